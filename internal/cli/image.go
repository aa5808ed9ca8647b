package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"herd.dev/herd/internal/controlplane"
	"herd.dev/herd/internal/image"
)

func newImageCmd(g *globals) *cobra.Command {
	var dataDir string
	store := func() *image.Store { return image.NewStore(image.StoreDir(dataDir)) }
	cmd := &cobra.Command{
		Use:   "image",
		Short: "Build and list node images (the bundles instances boot from)",
		Long: `A node image is what every instance of a fleet boots from: a Kubernetes version, the manifests
applied at boot and the container images baked in, stored as a bundle named by the digest of its
content. A fleet's spec.image names one by NodeImage name (the last build of that name) or digest.

Bundles are kept under --data-dir/images.`,
		Args: cobra.NoArgs,
	}
	cmd.PersistentFlags().StringVar(&dataDir, "data-dir", controlplane.DefaultDataDir(), "herd's data directory; node images live in its images/ subdirectory")
	cmd.AddCommand(
		newImageBuildCmd(g, store),
		newImageLsCmd(g, store),
		newImageInspectCmd(g, store),
	)
	return cmd
}

func newImageBuildCmd(g *globals, store func() *image.Store) *cobra.Command {
	var file string
	var quiet bool
	cmd := &cobra.Command{
		Use:   "build -f FILE",
		Short: "Build a node image bundle from a NodeImage file",
		Long: `Build the NodeImage in FILE into a bundle: its manifests, an image tar for each of spec.images
(built with 'go build' from a Go main package, or read from an image tar), the pause image, and the
node configuration. The bundle is named by the digest of its content: the same inputs give the same
digest, and any change gives a new one. Paths in the file are relative to the file.

Needs the Go toolchain on PATH. Nothing is stored unless the whole build succeeds.`,
		Example: `  herd image build -f examples/hello/image.yaml
  DIGEST=$(herd image build -f examples/hello/image.yaml -q)`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if file == "" {
				return errors.New("-f is required: the NodeImage file to build")
			}
			progress := func(line string) { fmt.Fprintln(g.errOut, line) }
			if quiet {
				progress = nil
			}
			b, err := image.Build(cmd.Context(), file, store(), progress)
			if err != nil {
				return err
			}
			if quiet {
				fmt.Fprintln(g.out, b.Digest)
				return nil
			}
			fmt.Fprintf(g.out, "image/%s built: %s\n", b.Config.Name, b.Digest)
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "filename", "f", "", "NodeImage file to build")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print only the digest, no progress")
	return cmd
}

func newImageLsCmd(g *globals, store func() *image.Store) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List node image bundles",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			bundles, err := store().List()
			if err != nil {
				return err
			}
			if len(bundles) == 0 {
				fmt.Fprintln(g.errOut, "No node images found.")
				return nil
			}
			t := newTable(g.out, "NAME", "DIGEST", "KUBERNETES", "IMAGES", "SIZE", "AGE")
			for _, b := range bundles {
				var refs []string
				for _, im := range b.AppImages() {
					refs = append(refs, im.Ref)
				}
				created := b.Created
				t.row(b.Config.Name, "sha256:"+b.ShortDigest(), b.Config.Kubernetes.Distribution+"/"+b.Config.Kubernetes.Version,
					strings.Join(refs, ","), image.FormatSize(b.Size), age(&created))
			}
			return t.flush()
		},
	}
	return cmd
}

func newImageInspectCmd(g *globals, store func() *image.Store) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "inspect NAME|DIGEST",
		Short: "Show a node image bundle: its node configuration, files and digests",
		Long: `Show a node image bundle. NAME is a NodeImage name (the bundle last built under it); DIGEST is
a full digest (sha256:...) or a unique prefix of one, as 'herd image ls' shows it.`,
		Example: `  herd image inspect hello
  herd image inspect sha256:0123456789ab -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			format := outputFormat(output)
			if format != "" && format != "yaml" && format != "json" {
				return fmt.Errorf("-o %s: use yaml or json", output)
			}
			s := store()
			digest, err := s.Resolve(args[0])
			if err != nil {
				return err
			}
			b, err := s.Get(digest)
			if err != nil {
				return err
			}
			return printObject(g.out, format, b)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "yaml", "output format: yaml or json")
	return cmd
}
