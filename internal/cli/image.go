package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"herd.dev/herd/internal/apiserver"
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
		newImageDiskCmd(g, store),
		newImagePushCmd(g, store),
		newImageLsCmd(g, store),
		newImageInspectCmd(g, store),
		newImageRmCmd(g),
		newImagePruneCmd(g),
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
			// Which fleets use each image, as herd up knows them.
			var uses map[string][]string
			c, err := g.client()
			var infos []apiserver.ImageInfo
			if err == nil {
				infos, err = c.Images(cmd.Context())
			}
			if err != nil {
				fmt.Fprintf(g.errOut, "which fleets use each image is not shown: %v\n", err)
			} else {
				uses = map[string][]string{}
				for _, im := range infos {
					uses[im.Digest] = im.UsedBy
				}
			}
			return printImages(g.out, bundles, uses)
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
			b, err := resolveBundle(store(), args[0])
			if err != nil {
				return err
			}
			return printObject(g.out, format, b)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "yaml", "output format: yaml or json")
	return cmd
}

// printImages lists bundles with their size and, when uses is not nil, the fleets that use each.
func printImages(out io.Writer, bundles []image.Bundle, uses map[string][]string) error {
	t := newTable(out, "NAME", "DIGEST", "KUBERNETES", "IMAGES", "SIZE", "AGE", "USED-BY")
	for _, b := range bundles {
		var refs []string
		for _, im := range b.AppImages() {
			refs = append(refs, im.Ref)
		}
		created := b.Created
		usedBy := "?"
		if uses != nil {
			usedBy = orDash(strings.Join(uses[b.Digest], ","))
		}
		t.row(b.Config.Name, "sha256:"+b.ShortDigest(), b.Config.Kubernetes.Distribution+"/"+b.Config.Kubernetes.Version,
			strings.Join(refs, ","), image.FormatSize(b.Size), age(&created), usedBy)
	}
	return t.flush()
}

func newImageRmCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "rm NAME|DIGEST",
		Short: "Remove a node image bundle no fleet uses",
		Long: `Remove the bundle NAME (the last build of that name) or DIGEST names, through herd up. It is
refused, naming the fleets, while a fleet boots it: its pinned image, a revision it still runs or
rolls out, or an instance not yet deleted.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			im, err := c.RemoveImage(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(g.out, "image/%s %s removed, %s freed\n", im.Name, im.Digest, image.FormatSize(im.Size))
			return nil
		},
	}
}

func newImagePruneCmd(g *globals) *cobra.Command {
	var keep int
	cmd := &cobra.Command{
		Use:   "prune",
		Short: "Remove the node image bundles no fleet uses",
		Long: `Remove, through herd up, every bundle that no fleet boots (pinned, in a revision, or on an
instance) and that none of the last --keep entries of any fleet's rollout history names, so that
herd rollout undo still finds its image. Prints each bundle removed and the space freed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if keep < 0 {
				return fmt.Errorf("--keep %d: want 0 or more history entries", keep)
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.PruneImages(cmd.Context(), keep)
			if err != nil {
				return err
			}
			for _, im := range res.Removed {
				fmt.Fprintf(g.out, "removed image/%s %s (%s)\n", im.Name, im.Digest, image.FormatSize(im.Size))
			}
			fmt.Fprintf(g.out, "%d node images removed, %s freed\n", len(res.Removed), image.FormatSize(res.Freed))
			return nil
		},
	}
	cmd.Flags().IntVar(&keep, "keep", 10, "keep the images of the last N entries of each fleet's rollout history")
	return cmd
}

// resolveBundle is the bundle a NAME or DIGEST argument names.
func resolveBundle(s *image.Store, ref string) (image.Bundle, error) {
	digest, err := s.Resolve(ref)
	if err != nil {
		return image.Bundle{}, err
	}
	return s.Get(digest)
}
