package edge

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// diskHelperEnv makes the test binary the writer that TestDiskTierNeverServesTornObject kills.
const diskHelperEnv = "HERD_EDGE_DISK_WRITER"

func TestMain(m *testing.M) {
	if dir := os.Getenv(diskHelperEnv); dir != "" {
		diskWriter(dir)
		return
	}
	os.Exit(m.Run())
}

// diskWriter writes object "a" whole, then object "b" until half of its file is written, says so
// on standard output, and waits to be killed there.
func diskWriter(dir string) {
	d, err := openDisk(dir, 1<<30, slog.New(slog.DiscardHandler))
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	d.land(diskWrite{pk: "a", e: testEntry("object a")})
	diskWriteHook = func(path string) {
		fmt.Println("midway", path)
		select {}
	}
	d.land(diskWrite{pk: "b", e: testEntry(strings.Repeat("object b ", 10000))})
	fmt.Println("error: the write of b was not held midway")
	os.Exit(1)
}

// testEntry is an entry of one fresh 200 with body.
func testEntry(body string) *entry {
	now := time.Now()
	o := newObject(200, http.Header{"Content-Type": {"text/plain"}, "Cache-Control": {"max-age=600"}}, []byte(body), now, now, 10*time.Minute)
	e := &entry{variants: []variant{{"", o}}}
	e.retain = e.retention()
	return e
}

// bodyOf is the body of an entry's identity, or "" without one.
func bodyOf(e *entry) string {
	if e == nil || e.variant("") == nil {
		return ""
	}
	return string(e.variant("").body())
}

// A writer killed -9 in the middle of a file leaves a temporary file, which the tier removes when it
// opens; the object it was writing is a miss, never a torn body, and the one written before is
// served whole. A file damaged after it was written fails its checksum and is dropped.
func TestDiskTierNeverServesTornObject(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), diskHelperEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "midway ") {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("the writer said %q (%v), want midway", line, err)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	tmp := strings.TrimSpace(strings.TrimPrefix(line, "midway "))
	if fi, err := os.Stat(tmp); err != nil || fi.Size() == 0 {
		t.Fatalf("the half-written file %s: %v", tmp, err)
	}

	d, err := openDisk(dir, 1<<30, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Fatalf("the half-written file is still there after the tier opened: %v", err)
	}
	if e := d.lookup("b"); e != nil {
		t.Fatalf("the object whose write was killed is served: %d bytes", len(bodyOf(e)))
	}
	if got := bodyOf(d.lookup("a")); got != "object a" {
		t.Fatalf("the object written before: %q, want it whole", got)
	}

	// Damage a's file: one byte flipped.
	f, _ := d.index.GetIfPresent("a")
	path := filepath.Join(dir, f.name)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0xff
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if e := d.lookup("a"); e != nil {
		t.Fatalf("a damaged file was served: %q", bodyOf(e))
	}
	waitFor(t, "the damaged file removed", func() bool {
		_, err := os.Stat(path)
		return os.IsNotExist(err)
	})
}

// An edge with a disk tier stopped and started again on the same directory serves what the first
// one stored without asking the origin; an invalidation removes it from disk too.
func TestDiskTierSurvivesRestart(t *testing.T) {
	var hits atomic.Int64
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Cache-Control", "max-age=600")
		io.WriteString(w, "stored "+r.URL.Path)
	}))
	defer origin.Close()
	dir := t.TempDir()
	start := func() (*Edge, *testServer) {
		e, err := New(Config{Behaviors: []Behavior{{PathPattern: "*", Origin: Origin{Primary: mustURL(t, origin.URL)}}},
			DiskDir: dir, DiskBytes: 1 << 20}, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		return e, startServer(t, e)
	}
	get := func(srv *testServer, path string) (string, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.Header.Get("X-Cache"), string(b)
	}
	e1, srv1 := start()
	for _, p := range []string{"/a", "/b"} {
		if x, b := get(srv1, p); x != "Miss" || b != "stored "+p {
			t.Fatalf("first edge, %s: %s %q", p, x, b)
		}
	}
	srv1.Close()
	e1.Close() // writes what is queued

	e2, srv2 := start()
	defer srv2.Close()
	defer e2.Close()
	for _, p := range []string{"/a", "/b"} {
		if x, b := get(srv2, p); x != "Hit" || b != "stored "+p {
			t.Fatalf("after the restart, %s: %s %q, want a Hit from disk", p, x, b)
		}
	}
	if n := hits.Load(); n != 2 {
		t.Fatalf("the origin received %d requests, want 2", n)
	}
	if n := e2.Invalidate([]string{"/a"}); n != 1 {
		t.Fatalf("invalidated %d, want 1", n)
	}
	if e := e2.store.disk.lookup(primaryKey(httptest.NewRequest("GET", srv2.URL+"/a", nil), Policy{})); e != nil {
		t.Fatal("an invalidated object is still on disk")
	}
}

// The disk tier keeps within its bound: the files of the entries it evicts are removed.
func TestDiskTierBoundedByBytes(t *testing.T) {
	dir := t.TempDir()
	const bound = 64 << 10
	d, err := openDisk(dir, bound, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	for i := range 40 {
		d.land(diskWrite{pk: fmt.Sprintf("k%d", i), e: testEntry(strings.Repeat("x", 8<<10))})
	}
	waitFor(t, "the files within the bound", func() bool {
		var total int64
		files, _ := os.ReadDir(dir)
		for _, f := range files {
			if fi, err := f.Info(); err == nil {
				total += fi.Size()
			}
		}
		return total <= bound && len(files) > 0
	})
}
