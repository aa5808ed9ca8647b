package cli

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/kubebin"
)

func newApplyCmd(g *globals) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "apply -f FILE",
		Short: "Create or update fleets and distributions from a YAML file",
		Long: `Create or update the fleets and distributions described in a YAML (or JSON) file; '-' reads
standard input. herd up runs an edge location for each distribution.
A file may hold several documents separated by '---'. Every document is validated first and every
problem is printed with its field; if any is invalid, nothing is applied.`,
		Example: `  herd apply -f examples/hello/fleet.yaml`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if file == "" {
				return errors.New("-f is required: the file to apply ('-' for standard input)")
			}
			data, err := readInput(file)
			if err != nil {
				return err
			}
			// Validate with defaults filled in, but send the fleets as written: the control plane
			// applies its own defaults (its provider, for one).
			if _, err := v1alpha1.DecodeAndValidate(data, "local", kubebin.Version); err != nil {
				return fmt.Errorf("%s is invalid, nothing was applied:\n%w", file, err)
			}
			docs, err := v1alpha1.Decode(data)
			if err != nil {
				return err
			}
			var fleets []v1alpha1.Fleet
			var dists []v1alpha1.Distribution
			for _, d := range docs {
				switch o := d.Object.(type) {
				case *v1alpha1.Fleet:
					fleets = append(fleets, *o)
				case *v1alpha1.NodeImage:
					return fmt.Errorf("%s: document %d is a NodeImage: build it with `herd image build -f %s`; nothing was applied", file, d.Index+1, file)
				case *v1alpha1.Distribution:
					dists = append(dists, *o)
				}
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			results, err := c.ApplyAll(cmd.Context(), fleets, dists)
			if err != nil {
				return fmt.Errorf("nothing was applied:\n%w", err)
			}
			for _, r := range results {
				kind := cmp.Or(r.Kind, "fleet")
				for _, w := range r.Warnings {
					fmt.Fprintf(g.errOut, "Warning: %s/%s: %s\n", kind, r.Name, w)
				}
				fmt.Fprintf(g.out, "%s/%s %s\n", kind, r.Name, r.Result)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "filename", "f", "", "file to apply, or - for standard input")
	return cmd
}

// readInput reads a file or stdin, refusing anything larger than herd will parse.
func readInput(path string) ([]byte, error) {
	var r io.Reader
	if path == "-" {
		r = os.Stdin
	} else {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, v1alpha1.MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(data) > v1alpha1.MaxFileSize {
		return nil, fmt.Errorf("%s is larger than %d bytes (1 MiB): herd specs are a few KB; is it the right file?", path, v1alpha1.MaxFileSize)
	}
	return data, nil
}
