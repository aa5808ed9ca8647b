package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"herd.dev/herd/internal/ami"
	"herd.dev/herd/internal/disk"
	"herd.dev/herd/internal/image"
	"herd.dev/herd/internal/provider/aws/awstwin"
)

// herd image ls shows the disk made of an image (its path, its size and allocated size as they
// are now) and the AMIs tagged with its digest in each region asked, in the table and in JSON;
// an image without either shows "-".
func TestImageLsShowsDisksAndAMIs(t *testing.T) {
	made, other := "sha256:"+strings.Repeat("ab", 32), "sha256:"+strings.Repeat("cd", 32)
	bs := []image.Bundle{
		{Digest: made, Size: 3 << 20, Created: time.Now(), Config: image.Config{Name: "hello"}},
		{Digest: other, Size: 2048, Created: time.Now(), Config: image.Config{Name: "other"}},
	}
	dir := t.TempDir()
	raw := filepath.Join(dir, "hello.raw")
	f, err := os.Create(raw)
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(3 << 30) // sparse: 3.22GB, nothing allocated
	f.WriteAt([]byte("herd"), 0)
	f.Close()
	disks := filepath.Join(dir, "disks")
	if err := disk.SaveRecord(disks, made, disk.Result{Path: raw, Digest: "sha256:ff"}); err != nil {
		t.Fatal(err)
	}
	tw := awstwin.New(t, awstwin.Options{})
	id := tw.AddImage("eu-west-1", "herd-hello", map[string]string{ami.TagImage: made})
	tw.AddImage("eu-west-1", "unrelated", map[string]string{"team": "x"})

	rows, err := imageRows(bs, nil, disks)
	if err != nil {
		t.Fatal(err)
	}
	amis, err := ami.List(context.Background(), ami.AWS{Endpoint: tw.URL, Credentials: tw.Credentials()}, "eu-west-1")
	if err != nil {
		t.Fatal(err)
	}
	for i := range rows {
		rows[i].AMIs = amis[rows[i].Digest]
	}
	var out bytes.Buffer
	if err := printImageRows(&out, rows, false, true); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "DISK-SIZE") || !strings.HasSuffix(lines[0], "AMIS") ||
		!strings.Contains(lines[1], raw+"   3.22GB/") || !strings.HasSuffix(lines[1], "eu-west-1:"+id) ||
		!strings.Contains(lines[2], " -   ") || !strings.HasSuffix(lines[2], " -") {
		t.Fatalf("herd image ls:\n%s\nwant hello's disk and AMI %s, and - for other", out.String(), id)
	}
	out.Reset()
	if err := printObject(&out, "json", rows); err != nil {
		t.Fatal(err)
	}
	var got []imageRow
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Disk == nil || got[0].Disk.Size != 3<<30 || len(got[0].AMIs) != 1 || got[0].AMIs[0].ID != id ||
		got[1].Disk != nil || len(got[1].AMIs) != 0 {
		t.Fatalf("herd image ls -o json:\n%s", out.String())
	}
}
