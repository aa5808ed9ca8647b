package cli

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"herd.dev/herd/internal/ami"
	"herd.dev/herd/internal/apiserver"
	"herd.dev/herd/internal/controlplane"
	"herd.dev/herd/internal/disk"
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
	var output, endpoint string
	var regions []string
	cmd := &cobra.Command{
		Use:     "ls [--aws-region R]... [-o json]",
		Aliases: []string{"list"},
		Short:   "List node image bundles, their disks and their AMIs",
		Long: `List the node images: each one's digest, what it holds, the fleets that use it (as herd up
says), the disk 'herd image disk' made of it (its path, size and allocated size), and, for each
--aws-region, the AMIs of the account tagged with its digest ('herd image push aws').`,
		Example: `  herd image ls
  herd image ls --aws-region eu-west-1 --aws-region us-east-1 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			format := outputFormat(output)
			if format != "" && format != "json" {
				return fmt.Errorf("-o %s: use json, or leave it out for a table", output)
			}
			s := store()
			bundles, err := s.List()
			if err != nil {
				return err
			}
			if len(bundles) == 0 && format == "" {
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
			rows, err := imageRows(bundles, uses, filepath.Join(s.Root(), "disks"))
			if err != nil {
				return err
			}
			for _, region := range regions {
				amis, err := ami.List(cmd.Context(), ami.AWS{Endpoint: endpoint}, region)
				if err != nil {
					return err
				}
				for i := range rows {
					rows[i].AMIs = append(rows[i].AMIs, amis[rows[i].Digest]...)
				}
			}
			if format == "json" {
				return printObject(g.out, format, rows)
			}
			return printImageRows(g.out, rows, uses != nil, len(regions) > 0)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: json, or a table when left out")
	cmd.Flags().StringArrayVar(&regions, "aws-region", nil, "an AWS region to list the AMIs of each image in (repeatable)")
	cmd.Flags().StringVar(&endpoint, "aws-endpoint", "", "the URL of EC2's API, for an EC2-compatible cloud or a twin (default AWS's own)")
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

// imageRow is what herd image ls shows of a node image.
type imageRow struct {
	Name       string       `json:"name"`
	Digest     string       `json:"digest"`
	Kubernetes string       `json:"kubernetes"`
	Images     []string     `json:"images"`
	Size       int64        `json:"size"`
	Created    time.Time    `json:"created"`
	UsedBy     []string     `json:"usedBy,omitempty"`
	Disk       *disk.Record `json:"disk,omitempty"`
	AMIs       []ami.Image  `json:"amis,omitempty"`
}

// imageRows describes bundles with the fleets that use each (uses) and the disks recorded in
// disks.
func imageRows(bundles []image.Bundle, uses map[string][]string, disks string) ([]imageRow, error) {
	rows := []imageRow{}
	for _, b := range bundles {
		r := imageRow{Name: b.Config.Name, Digest: b.Digest, Kubernetes: b.Config.Kubernetes.Distribution + "/" + b.Config.Kubernetes.Version,
			Size: b.Size, Created: b.Created, UsedBy: uses[b.Digest]}
		for _, im := range b.AppImages() {
			r.Images = append(r.Images, im.Ref)
		}
		if disks != "" {
			d, ok, err := disk.LoadRecord(disks, b.Digest)
			if err != nil {
				return nil, err
			}
			if ok {
				r.Disk = &d
			}
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// printImages lists bundles with their size and, when uses is not nil, the fleets that use each.
func printImages(out io.Writer, bundles []image.Bundle, uses map[string][]string) error {
	rows, err := imageRows(bundles, uses, "")
	if err != nil {
		return err
	}
	return printImageRows(out, rows, uses != nil, false)
}

// printImageRows writes rows as a table; usesKnown says whether herd up said which fleets use
// them, amis whether AMIs were asked for.
func printImageRows(out io.Writer, rows []imageRow, usesKnown, amis bool) error {
	headers := []string{"NAME", "DIGEST", "KUBERNETES", "IMAGES", "SIZE", "AGE", "DISK", "DISK-SIZE", "USED-BY"}
	if amis {
		headers = append(headers, "AMIS")
	}
	t := newTable(out, headers...)
	for _, r := range rows {
		usedBy := "?"
		if usesKnown {
			usedBy = orDash(strings.Join(r.UsedBy, ","))
		}
		diskPath, diskSize := "-", "-"
		if r.Disk != nil {
			diskPath, diskSize = r.Disk.Path, image.FormatSize(r.Disk.Size)+"/"+image.FormatSize(r.Disk.Allocated)
		}
		cells := []any{r.Name, "sha256:" + image.Bundle{Digest: r.Digest}.ShortDigest(), r.Kubernetes, strings.Join(r.Images, ","), image.FormatSize(r.Size),
			age(&r.Created), diskPath, diskSize, usedBy}
		if amis {
			var list []string
			for _, im := range r.AMIs {
				list = append(list, im.Region+":"+im.ID)
			}
			cells = append(cells, orDash(strings.Join(list, ",")))
		}
		t.row(cells...)
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
