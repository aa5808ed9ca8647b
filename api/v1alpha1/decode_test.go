package v1alpha1

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// wantErrors reads the "# error: ..." lines of a testdata file: each must appear in the output.
func wantErrors(data []byte) []string {
	var want []string
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "# error: "); ok {
			want = append(want, rest)
		}
	}
	return want
}

func TestTestdata(t *testing.T) {
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata: %v", err)
	}
	for _, file := range files {
		name := filepath.Base(file)
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			docs, err := DecodeAndValidate(data, "local", "v1.33.13")
			switch {
			case strings.HasPrefix(name, "valid-"):
				if err != nil {
					t.Fatalf("unexpected error:\n%v", err)
				}
				if len(docs) == 0 {
					t.Fatal("no documents")
				}
			case strings.HasPrefix(name, "invalid-"):
				if err != nil && docs != nil {
					t.Fatal("documents returned with an error")
				}
				if err == nil {
					t.Fatal("expected an error")
				}
				want := wantErrors(data)
				if len(want) == 0 {
					t.Fatal("invalid testdata must list '# error: ' lines")
				}
				for _, w := range want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error does not mention %q; got:\n%v", w, err)
					}
				}
				if n := strings.Count(err.Error(), "\n") + 1; n < len(want) {
					t.Errorf("got %d error lines, want at least %d", n, len(want))
				}
			default:
				t.Fatalf("testdata files are named valid-* or invalid-*")
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	data, _ := os.ReadFile("testdata/valid-minimal.yaml")
	docs, err := DecodeAndValidate(data, "fake", "v1.33.13")
	if err != nil {
		t.Fatal(err)
	}
	f := docs[0].Object.(*Fleet)
	r := f.Spec.Replicas
	if *r.Min != 1 || *r.Max != 1 || *r.Desired != 1 {
		t.Errorf("replicas defaults: min=%d max=%d desired=%d, want 1/1/1", *r.Min, *r.Max, *r.Desired)
	}
	h := f.Spec.HealthCheck
	if h.Path != "/healthz" || h.Interval.Duration != DefaultHealthInterval || h.Timeout.Duration != DefaultHealthTimeout || h.HealthyThreshold != 2 || h.UnhealthyThreshold != 2 || h.GracePeriod.Duration != DefaultHealthGracePeriod {
		t.Errorf("health check defaults: %+v", h)
	}
	if f.Spec.Rollout.Strategy != StrategyRolling || *f.Spec.Rollout.MaxSurge != 1 || *f.Spec.Rollout.MaxUnavailable != 0 {
		t.Errorf("rollout defaults: %+v", f.Spec.Rollout)
	}
	if len(f.Spec.Regions) != 1 || f.Spec.Regions[0].Name != "local" || f.Spec.Regions[0].Provider != "fake" || !f.Spec.Regions[0].Default {
		t.Errorf("region defaults: %+v", f.Spec.Regions)
	}

	// desired 0 without min makes min 0 (scale to zero), max stays at least 1.
	zero := int32(0)
	g := &Fleet{Spec: FleetSpec{Replicas: Replicas{Desired: &zero}}}
	SetFleetDefaults(g, "fake")
	if *g.Spec.Replicas.Min != 0 || *g.Spec.Replicas.Max != 1 {
		t.Errorf("desired 0: min=%d max=%d", *g.Spec.Replicas.Min, *g.Spec.Replicas.Max)
	}
}

func TestDecodeRejects(t *testing.T) {
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"ten megabytes", bytes.Repeat([]byte("a: b\n"), 2<<20), "at most 1048576 bytes"},
		{"only comments", []byte("# nothing\n---\n# here\n"), "holds no object"},
		{"a list", []byte("- a\n- b\n"), "must be a mapping"},
		{"broken yaml", []byte("kind: Fleet\n  metadata: [\n"), "(yaml)"},
		{"no kind", []byte("apiVersion: herd.dev/v1alpha1\n"), "kind: required"},
		{"bad duration", []byte("apiVersion: herd.dev/v1alpha1\nkind: Fleet\nmetadata: {name: a}\nspec: {image: x, healthCheck: {interval: 5}}\n"), "a duration must be a string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeAndValidate(tt.data, "local", "v1.33.13")
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestStatusIgnoredOnDecode(t *testing.T) {
	data := []byte("apiVersion: herd.dev/v1alpha1\nkind: Fleet\nmetadata: {name: a, resourceVersion: 7}\nspec: {image: x}\nstatus: {replicas: 9}\n")
	docs, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	f := docs[0].Object.(*Fleet)
	if f.Status.Replicas != 0 || f.Metadata.ResourceVersion != 0 {
		t.Fatalf("status or resourceVersion kept from the file: %+v %+v", f.Status, f.Metadata)
	}
}

func TestSplitDocuments(t *testing.T) {
	got := SplitDocuments([]byte("# c\n---\na: 1\n---\n\n---\nb: 2\n--- # trailing\n"))
	if len(got) != 2 || string(got[0]) != "a: 1\n" || string(got[1]) != "b: 2\n" {
		t.Fatalf("SplitDocuments = %q, want the two documents with content", got)
	}
}
