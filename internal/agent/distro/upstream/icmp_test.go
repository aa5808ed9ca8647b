package upstream

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestUnlimitRejects(t *testing.T) {
	for _, c := range []struct{ was, want string }{
		{"6168\n", "6160"}, // the kernel's default: 3, 4, 11 and 12
		{"6160\n", "6160"}, // already off: left alone
		{"8\n", "0"},
	} {
		root := t.TempDir()
		p := filepath.Join(root, icmpRateMask)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(c.was), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := unlimitRejects(root); err != nil {
			t.Fatalf("%q: %v", c.was, err)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(string(b)); got != c.want {
			t.Errorf("mask %q became %s, want %s", c.was, got, c.want)
		}
	}
}

func TestUnlimitRejectsBadInput(t *testing.T) {
	root := t.TempDir()
	if err := unlimitRejects(root); err == nil || !strings.Contains(err.Error(), icmpRateMask) {
		t.Errorf("missing setting: got %v, want an error naming %s", err, icmpRateMask)
	}
	p := filepath.Join(root, icmpRateMask)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("lots\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unlimitRejects(root); err == nil || !strings.Contains(err.Error(), "not a number") {
		t.Errorf("garbage: got %v, want a not-a-number error", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "lots\n" {
		t.Errorf("garbage was changed to %q", b)
	}
}
