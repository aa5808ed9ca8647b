package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"herd.dev/herd/internal/image"
)

// herd image ls shows each bundle's size and the fleets that use it, "-" for none and "?" when
// herd up did not say.
func TestPrintImagesShowsSizeAndUsers(t *testing.T) {
	hex := strings.Repeat("ab", 32)
	bs := []image.Bundle{
		{Digest: "sha256:" + hex, Size: 3 << 20, Created: time.Now(), Config: image.Config{Name: "hello"}},
		{Digest: "sha256:" + strings.Repeat("cd", 32), Size: 2048, Created: time.Now(), Config: image.Config{Name: "hello"}},
	}
	var out bytes.Buffer
	if err := printImages(&out, bs, map[string][]string{"sha256:" + hex: {"fleet/web (pinned)"}}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "SIZE") || !strings.Contains(lines[0], "USED-BY") ||
		!strings.Contains(lines[1], "3.15MB") || !strings.HasSuffix(lines[1], "fleet/web (pinned)") || !strings.HasSuffix(lines[2], " -") {
		t.Fatalf("herd image ls:\n%s\nwant SIZE and USED-BY columns, fleet/web on the first, - on the second", out.String())
	}
	out.Reset()
	printImages(&out, bs[:1], nil)
	if !strings.HasSuffix(strings.TrimSpace(out.String()), " ?") {
		t.Fatalf("without herd up:\n%s\nwant ? for the users", out.String())
	}
}
