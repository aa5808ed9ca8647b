package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"sigs.k8s.io/yaml"

	"herd.dev/herd/internal/client"
)

// outputFormat is the -o flag: "" (table), wide, yaml or json.
type outputFormat string

func (o outputFormat) check() error {
	switch o {
	case "", "wide", "yaml", "json":
		return nil
	}
	return fmt.Errorf("-o %s: use wide, yaml or json", o)
}

// resourceArgs reads the "fleets|instances [NAME]" arguments and the -o flag of get and top: the
// format, the resource ("fleet" or "instance") and the name ("" for all).
func resourceArgs(args []string, output string) (format outputFormat, kind, name string, err error) {
	format = outputFormat(output)
	if err := format.check(); err != nil {
		return "", "", "", err
	}
	kind = resource(args[0])
	if kind != "fleet" && kind != "instance" {
		return "", "", "", fmt.Errorf("unknown resource %q: use fleets or instances", args[0])
	}
	if len(args) == 2 {
		name = args[1]
	}
	return format, kind, name, nil
}

// printObject writes v as YAML or JSON.
func printObject(w io.Writer, format outputFormat, v any) error {
	switch format {
	case "json":
		data, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(w, string(data))
		return err
	default:
		data, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(data)
		return err
	}
}

// table writes aligned columns like kubectl.
type table struct {
	tw *tabwriter.Writer
}

func newTable(w io.Writer, headers ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)}
	t.row(toAny(headers)...)
	return t
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

func (t *table) row(cols ...any) {
	parts := make([]string, len(cols))
	for i, c := range cols {
		parts[i] = fmt.Sprint(c)
		if parts[i] == "" {
			parts[i] = "<none>"
		}
	}
	fmt.Fprintln(t.tw, strings.Join(parts, "\t"))
}

func (t *table) flush() error { return t.tw.Flush() }

// age formats how long ago t was, like kubectl: 45s, 12m, 3h, 5d.
func age(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "<unknown>"
	}
	return shortDuration(time.Since(*t))
}

func shortDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < 2*time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < 2*time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	default:
		return fmt.Sprintf("%dd", int(d.Hours()/24))
	}
}

// formatAndClient checks -o and makes the API client, as every listing command does first.
func formatAndClient(g *globals, output string) (outputFormat, *client.Client, error) {
	format := outputFormat(output)
	if err := format.check(); err != nil {
		return format, nil, err
	}
	c, err := g.client()
	return format, c, err
}
