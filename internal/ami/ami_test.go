package ami_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"herd.dev/herd/internal/ami"
	"herd.dev/herd/internal/provider/aws/awstwin"
)

const (
	region = "eu-west-1"
	digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
)

// testDisk writes a sparse disk of 8 MiB and 1,000 bytes: data in blocks 0 and 3 and in the
// last, partial block; block 5 written with zeros (allocated, yet not worth sending); the rest
// holes. It returns the path and the disk's bytes.
func testDisk(t *testing.T) (string, []byte) {
	t.Helper()
	size := 8<<20 + 1000
	want := make([]byte, size)
	copy(want[0:], "herd disk")
	for i := range 4096 {
		want[3*ami.BlockSize+100+i] = byte(i)
	}
	copy(want[size-3:], "end")
	path := filepath.Join(t.TempDir(), "disk.raw")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(int64(size)); err != nil {
		t.Fatal(err)
	}
	for _, off := range []int{0, 3 * ami.BlockSize, 5 * ami.BlockSize, 16 * ami.BlockSize} {
		end := min(off+ami.BlockSize, size)
		if _, err := f.WriteAt(want[off:end], int64(off)); err != nil {
			t.Fatal(err)
		}
	}
	return path, want
}

func options(tw *awstwin.Twin, disk string) ami.Options {
	return ami.Options{AWS: ami.AWS{Endpoint: tw.URL, Credentials: tw.Credentials()},
		Disk: disk, Image: digest, Name: "hello", Version: "test", Region: region, Parallel: 4}
}

// checkSnapshot compares the twin's snapshot with the disk: the blocks that hold anything but
// zeros were sent, byte for byte, and nothing else.
func checkSnapshot(t *testing.T, s awstwin.Snapshot, disk []byte) {
	t.Helper()
	if s.State != awstwin.SnapshotCompleted || s.VolumeSize != 1 {
		t.Errorf("snapshot %s: %s, %d GiB; want completed, 1 GiB", s.ID, s.State, s.VolumeSize)
	}
	if got := slices.Sorted(maps.Keys(s.Blocks)); !slices.Equal(got, []int32{0, 3, 16}) {
		t.Fatalf("blocks written: %v, want 0, 3 and 16 (block 5 is zeros, the rest holes)", got)
	}
	for i, b := range s.Blocks {
		off := int(i) * ami.BlockSize
		want := make([]byte, ami.BlockSize)
		copy(want, disk[off:min(off+ami.BlockSize, len(disk))])
		if !bytes.Equal(b, want) {
			t.Errorf("block %d differs from the disk's", i)
		}
	}
}

// A push writes the disk's blocks that hold data into a snapshot, registers a UEFI, ENA AMI
// from it tagged with the node image's digest, and copies it to each --copy-to region; a second
// push finds them all by tag and registers, copies and uploads nothing.
func TestPushRegistersOnceAndCopies(t *testing.T) {
	tw := awstwin.New(t, awstwin.Options{})
	path, disk := testDisk(t)
	o := options(tw, path)
	o.CopyTo = []string{"us-east-1", "ap-southeast-2"}
	var last ami.Progress
	o.Progress = func(p ami.Progress) { last = p }
	res, err := ami.Push(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Images) != 3 || res.Sent != 3 || res.Skipped != 1 || last.Done != 4 || last.Total != 4 || last.Bytes != 3*ami.BlockSize {
		t.Fatalf("push: %+v, last progress %+v; want 3 AMIs, 3 blocks sent and 1 skipped of 4 that hold data", res, last)
	}
	regions := map[string]string{}
	for _, im := range tw.Images() {
		regions[im.Region] = im.ID
		if im.Tags[ami.TagImage] != digest || im.Tags[ami.TagVersion] != "test" || im.BootMode != "uefi" || !im.EnaSupport ||
			im.Architecture != "x86_64" || im.ImdsSupport != "v2.0" || len(im.BlockDevices) != 1 || im.BlockDevices[0].DeviceName != im.RootDeviceName {
			t.Errorf("AMI %s in %s: %+v", im.ID, im.Region, im)
		}
	}
	for _, im := range res.Images {
		if regions[im.Region] != im.ID || im.Reused {
			t.Errorf("push answered %+v; the twin has %v", im, regions)
		}
	}
	snaps := tw.Snapshots()
	if len(snaps) != 3 {
		t.Fatalf("%d snapshots, want the pushed one and a copy in each other region", len(snaps))
	}
	for _, s := range snaps {
		checkSnapshot(t, s, disk)
	}

	calls := tw.Calls()
	again, err := ami.Push(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	for i, im := range again.Images {
		if im.ID != res.Images[i].ID || !im.Reused {
			t.Errorf("second push: %+v, want %s reused", im, res.Images[i].ID)
		}
	}
	after := tw.Calls()
	for _, action := range []string{"StartSnapshot", "PutSnapshotBlock", "RegisterImage", "CopyImage"} {
		if after[action] != calls[action] {
			t.Errorf("the second push called %s %d times", action, after[action]-calls[action])
		}
	}
	if n := len(tw.Images()); n != 3 {
		t.Errorf("%d AMIs after the second push, want 3", n)
	}
}

// corrupting flips a bit in the data of the blocks it is told to, on their way to EBS.
type corrupting struct {
	left atomic.Int32 // blocks still to corrupt
}

func (c *corrupting) Do(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/blocks/") && c.left.Add(-1) >= 0 {
		data, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, err
		}
		data[len(data)/2] ^= 1
		r.Body = io.NopCloser(bytes.NewReader(data))
	}
	return http.DefaultClient.Do(r)
}

// A block corrupted on its way is refused by its checksum and sent again; the snapshot holds
// the disk's data.
func TestPushSendsACorruptedBlockAgain(t *testing.T) {
	tw := awstwin.New(t, awstwin.Options{})
	path, disk := testDisk(t)
	o := options(tw, path)
	c := &corrupting{}
	c.left.Store(1)
	o.HTTPClient = c
	if _, err := ami.Push(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	snaps := tw.Snapshots()
	if len(snaps) != 1 || snaps[0].Refused != 1 {
		t.Fatalf("snapshots %+v: want one, with the corrupted block refused once", snaps)
	}
	checkSnapshot(t, snaps[0], disk)
}

// A push that fails, whether a block never arrives intact, an action is not allowed or the push
// is interrupted, deletes the snapshot it started and registers nothing; an action refused is
// named in the error.
func TestFailedPushLeavesNoSnapshot(t *testing.T) {
	path, _ := testDisk(t)
	for _, tc := range []struct {
		name, want string
		setup      func(*awstwin.Twin, *ami.Options, context.CancelFunc)
	}{
		{"corrupted every time", "does not match", func(_ *awstwin.Twin, o *ami.Options, _ context.CancelFunc) {
			c := &corrupting{}
			c.left.Store(1 << 20)
			o.HTTPClient = c
		}},
		{"RegisterImage denied", "may not call ec2:RegisterImage", func(tw *awstwin.Twin, _ *ami.Options, _ context.CancelFunc) {
			tw.Deny("RegisterImage")
		}},
		{"interrupted", "context canceled", func(_ *awstwin.Twin, o *ami.Options, cancel context.CancelFunc) {
			o.Progress = func(p ami.Progress) {
				if p.Sent > 0 {
					cancel()
				}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tw := awstwin.New(t, awstwin.Options{})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			o := options(tw, path)
			tc.setup(tw, &o, cancel)
			_, err := ami.Push(ctx, o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("push: %v, want an error saying %q", err, tc.want)
			}
			if tw.Calls()["StartSnapshot"] != 1 || len(tw.Snapshots()) != 0 || len(tw.Images()) != 0 {
				t.Fatalf("after the failed push: %d snapshots, %d AMIs; want none left", len(tw.Snapshots()), len(tw.Images()))
			}
		})
	}
}

// docs/aws.md's policy for herd image push (the JSON block after its "## Pushing AMIs" heading)
// allows exactly the actions a push can call.
func TestPushPolicyMatchesTheCode(t *testing.T) {
	doc, err := os.ReadFile("../../docs/aws.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## Pushing AMIs")
	_, rest, ok2 := strings.Cut(section, "```json\n")
	block, _, ok3 := strings.Cut(rest, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/aws.md has no ```json block under ## Pushing AMIs")
	}
	var policy struct {
		Statement []struct {
			Sid, Effect string
			Action      []string
		}
	}
	if err := json.Unmarshal([]byte(block), &policy); err != nil {
		t.Fatalf("the push's IAM policy is not JSON: %v", err)
	}
	var allowed []string
	for _, s := range policy.Statement {
		if s.Effect != "Allow" {
			t.Errorf("statement %+v: want Allow", s)
		}
		if s.Sid == "HerdTagsWhatItRegisters" {
			continue // tags given at StartSnapshot, RegisterImage and CopyImage need ec2:CreateTags
		}
		allowed = append(allowed, s.Action...)
	}
	slices.Sort(allowed)
	code := ami.Actions()
	slices.Sort(code)
	if !slices.Equal(slices.Compact(allowed), code) {
		t.Errorf("docs/aws.md allows %v; a push calls %v", allowed, code)
	}
}
