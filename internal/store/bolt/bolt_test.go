package bolt_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"herd.dev/herd/internal/store"
	"herd.dev/herd/internal/store/bolt"
	"herd.dev/herd/internal/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		return open(t, filepath.Join(t.TempDir(), "herd.db"))
	})
}

func open(t testing.TB, path string, opts ...bolt.Option) *bolt.Store {
	t.Helper()
	s, err := bolt.Open(path, opts...)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestOpenCreatesPrivateFileAndDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data", "herd")
	path := filepath.Join(dir, "state.db")
	open(t, path)
	tests := []struct {
		path string
		want os.FileMode
	}{
		{dir, 0o700 | os.ModeDir},
		{path, 0o600},
	}
	for _, tt := range tests {
		t.Run(filepath.Base(tt.path), func(t *testing.T) {
			fi, err := os.Stat(tt.path)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode() != tt.want {
				t.Errorf("mode = %v, want %v", fi.Mode(), tt.want)
			}
		})
	}
}

func TestReopenKeepsDataAndRevision(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "herd.db")
	s := open(t, path)
	if _, err := s.Txn(ctx,
		store.Op{Type: store.OpCreate, Kind: "fleet", Name: "web", Value: []byte(`{"replicas":3}`)},
		store.Op{Type: store.OpCreate, Kind: "instance", Name: "web-1", Value: []byte(`{}`)},
		store.Op{Type: store.OpCreate, Kind: "instance", Name: "web-2", Value: []byte(`{}`)},
	); err != nil {
		t.Fatal(err)
	}
	if err := store.Delete(ctx, s, "instance", "web-2", 0); err != nil {
		t.Fatal(err)
	}
	fleets, rev, err := s.List(ctx, "fleet")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = open(t, path)
	fleets2, rev2, err := s.List(ctx, "fleet")
	if err != nil {
		t.Fatal(err)
	}
	if rev2 != rev || len(fleets2) != 1 || string(fleets2[0].Value) != `{"replicas":3}` ||
		fleets2[0].ResourceVersion != fleets[0].ResourceVersion {
		t.Errorf("after reopening: fleets %v at revision %d, want %v at %d", fleets2, rev2, fleets, rev)
	}
	instances, _, err := s.List(ctx, "instance")
	if err != nil {
		t.Fatal(err)
	}
	if len(instances) != 1 || instances[0].Name != "web-1" {
		t.Errorf("after reopening: instances %v, want web-1 alone", instances)
	}
	rec, err := store.Update(ctx, s, "fleet", "web", []byte(`{"replicas":4}`), fleets2[0].ResourceVersion)
	if err != nil {
		t.Fatal(err)
	}
	if rec.ResourceVersion != rev+1 {
		t.Errorf("first write after reopening at version %d, want %d: the revision must continue", rec.ResourceVersion, rev+1)
	}

	// The changes before the reopening are gone from memory: a watch must say so, not skip them.
	tests := []struct {
		since   int64
		wantErr error
	}{
		{rev - 1, store.ErrCompacted},
		{rev, nil},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("watch from %d", tt.since), func(t *testing.T) {
			ch, err := s.Watch(ctx, "", tt.since)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Watch error = %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			select {
			case e := <-ch:
				if e.Record.ResourceVersion != rev+1 {
					t.Errorf("first event at %d, want %d", e.Record.ResourceVersion, rev+1)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("no event")
			}
		})
	}
}

func TestOpenFailsFastWhenAnotherProcessHoldsTheFile(t *testing.T) {
	// bbolt's lock is a flock on the open file, which a second open in the same process contends
	// for exactly as another herd up would.
	dir := t.TempDir()
	path := filepath.Join(dir, "herd.db")
	open(t, path)
	start := time.Now()
	s, err := bolt.Open(path)
	if err == nil {
		_ = s.Close()
		t.Fatal("a second Open of a file in use succeeded")
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the second Open took %s to fail, want about a second", took)
	}
	if want := "another herd up is using " + dir; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not say %q", err, want)
	}
}

func TestOpenRefusesAnotherFormat(t *testing.T) {
	path := filepath.Join(t.TempDir(), "herd.db")
	s := open(t, path)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := bolt.SetFormatForTest(path, "99"); err != nil {
		t.Fatal(err)
	}
	if s, err := bolt.Open(path); err == nil || !strings.Contains(err.Error(), `format "99"`) {
		if err == nil {
			_ = s.Close()
		}
		t.Errorf("Open of a format-99 file: error = %v, want it to name the format", err)
	}
}

func TestRefusedWriteFailsOnlyItsTxn(t *testing.T) {
	// bbolt refuses keys over 32 KiB. Among concurrent Txns, which the committer writes together,
	// the one with such a name must fail alone.
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), "herd.db"))
	const n = 50
	long := strings.Repeat("x", 40<<10)
	var wg sync.WaitGroup
	errs := make([]error, n+1)
	for i := range n + 1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := "ok-" + strconv.Itoa(i)
			if i == n {
				name = long
			}
			_, errs[i] = s.Txn(ctx, store.Op{Type: store.OpPut, Kind: "instance", Name: name, Value: []byte(`{}`)})
		}()
	}
	wg.Wait()
	for i, err := range errs[:n] {
		if err != nil {
			t.Errorf("Txn %d: %v", i, err)
		}
	}
	if errs[n] == nil {
		t.Error("a Txn with a 40 KiB name succeeded")
	}
	recs, rev, err := s.List(ctx, "instance")
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != n || rev != n {
		t.Errorf("%d instances at revision %d, want %d at %d", len(recs), rev, n, n)
	}
}

// The crash test's child writes in a loop until the parent kills it. Each group transaction
// creates groupSize objects and moves the progress marker to the group's number in one Txn, while
// other goroutines overwrite single objects (Txns the committer groups) with values that carry
// their own checksum.
const (
	crashChildEnv = "HERD_STORE_CRASH_CHILD"
	groupSize     = 5
	soloWriters   = 4
)

type groupObject struct {
	Group int    `json:"group"`
	Part  int    `json:"part"`
	Pad   string `json:"pad"`
}

type soloObject struct {
	Seq  int    `json:"seq"`
	Data string `json:"data"`
	Sum  string `json:"sum"`
}

func TestIntegrationCrashLeavesNoPartialState(t *testing.T) {
	if path := os.Getenv(crashChildEnv); path != "" {
		crashChild(path)
		return
	}
	if testing.Short() {
		t.Skip("starts and kills child processes")
	}
	// Several rounds on one file: each child continues where the last one's writes stopped, and
	// each kill lands at another point of a commit.
	const rounds, groupsPerRound = 5, 100
	path := filepath.Join(t.TempDir(), "herd.db")
	for round := range rounds {
		reported := runAndKill(t, path, groupsPerRound)
		stored := verifyAfterCrash(t, path, reported)
		t.Logf("round %d: killed after group %d was reported, %d stored", round, reported, stored)
	}
}

// runAndKill starts a writing child on path, SIGKILLs it once it has reported groups more group
// transactions, and returns the last group it reported committed.
func runAndKill(t *testing.T, path string, groups int) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestIntegrationCrashLeavesNoPartialState$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+path)
	cmd.Stderr = os.Stderr
	// Should this test die first, the child must not write on forever.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stdout)
	first, last := 0, 0
	for lines.Scan() {
		last, _ = strconv.Atoi(lines.Text())
		if first == 0 {
			first = last
		}
		if last-first+1 >= groups {
			break
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if first == 0 || last-first+1 < groups {
		t.Fatalf("the child stopped after reporting groups %d..%d: %v", first, last, lines.Err())
	}
	return last
}

// verifyAfterCrash opens the store a killed child left, checks that every object is whole and
// every group transaction all there or all absent, and returns the number of groups stored.
func verifyAfterCrash(t *testing.T, path string, reported int) int {
	t.Helper()
	ctx := context.Background()
	s := open(t, path)
	defer s.Close()
	progress, err := s.Get(ctx, "progress", "groups")
	if err != nil {
		t.Fatal(err)
	}
	done, err := strconv.Atoi(string(progress.Value))
	if err != nil {
		t.Fatalf("progress marker %q: %v", progress.Value, err)
	}
	if done < reported {
		t.Errorf("progress marker says %d groups, but the child had reported %d committed", done, reported)
	}

	groups, rev, err := s.List(ctx, "group")
	if err != nil {
		t.Fatal(err)
	}
	maxVersion := progress.ResourceVersion
	parts := map[int]int{}
	for _, r := range groups {
		var o groupObject
		if err := json.Unmarshal(r.Value, &o); err != nil {
			t.Fatalf("%s is not whole: %v", r.Name, err)
		}
		if want := fmt.Sprintf("g%d-p%d", o.Group, o.Part); r.Name != want || o.Pad != pad(o.Group, o.Part) {
			t.Fatalf("%s holds another object's value: %+v", r.Name, o)
		}
		parts[o.Group]++
		maxVersion = max(maxVersion, r.ResourceVersion)
	}
	// All or nothing: every group up to the marker is complete, and none after it exists.
	for g := 1; g <= done; g++ {
		if parts[g] != groupSize {
			t.Errorf("group %d has %d of %d objects", g, parts[g], groupSize)
		}
	}
	if len(parts) != done {
		t.Errorf("%d groups stored, the marker says %d: a transaction was half applied", len(parts), done)
	}

	solos, _, err := s.List(ctx, "solo")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range solos {
		var o soloObject
		if err := json.Unmarshal(r.Value, &o); err != nil {
			t.Fatalf("%s is not whole: %v", r.Name, err)
		}
		if o.Sum != checksum(o.Data) {
			t.Fatalf("%s: checksum mismatch: a torn write", r.Name)
		}
		maxVersion = max(maxVersion, r.ResourceVersion)
	}
	if len(solos) != soloWriters {
		t.Errorf("%d solo objects, want %d", len(solos), soloWriters)
	}
	if rev < maxVersion {
		t.Errorf("revision %d after the crash is behind a stored version %d", rev, maxVersion)
	}
	rec, err := s.Txn(ctx, store.Op{Type: store.OpPut, Kind: "progress", Name: "after-crash", Value: []byte(`1`)})
	if err != nil {
		t.Fatal(err)
	}
	if rec[0].ResourceVersion != rev+1 {
		t.Errorf("first write after the crash at %d, want %d", rec[0].ResourceVersion, rev+1)
	}
	return done
}

// crashChild writes until it is killed, continuing from the groups already stored and printing
// the number of each group once its transaction is committed.
func crashChild(path string) {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		os.Exit(2)
	}
	s, err := bolt.Open(path)
	if err != nil {
		fail(err)
	}
	ctx := context.Background()
	next := 1
	if rec, err := s.Get(ctx, "progress", "groups"); err == nil {
		n, err := strconv.Atoi(string(rec.Value))
		if err != nil {
			fail(err)
		}
		next = n + 1
	}
	for w := range soloWriters {
		go func() {
			for seq := 0; ; seq++ {
				data := strings.Repeat(strconv.Itoa(seq), 100+seq%300)
				v, _ := json.Marshal(soloObject{Seq: seq, Data: data, Sum: checksum(data)})
				if _, err := s.Txn(ctx, store.Op{Type: store.OpPut, Kind: "solo", Name: "s" + strconv.Itoa(w), Value: v}); err != nil {
					fail(err)
				}
			}
		}()
	}
	for g := next; ; g++ {
		ops := make([]store.Op, 0, groupSize+1)
		for p := range groupSize {
			v, _ := json.Marshal(groupObject{Group: g, Part: p, Pad: pad(g, p)})
			ops = append(ops, store.Op{Type: store.OpCreate, Kind: "group", Name: fmt.Sprintf("g%d-p%d", g, p), Value: v})
		}
		ops = append(ops, store.Op{Type: store.OpPut, Kind: "progress", Name: "groups", Value: []byte(strconv.Itoa(g))})
		if _, err := s.Txn(ctx, ops...); err != nil {
			fail(err)
		}
		fmt.Println(g)
	}
}

// pad is a value large enough that a group spans several pages, so that a torn write would show.
func pad(group, part int) string {
	return strings.Repeat(fmt.Sprintf("%d.%d;", group, part), 200)
}

func checksum(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// statusValue is about the size of an instance status the controller writes.
var statusValue = []byte(`{"id":"web-7f9c2-abcde","region":"local","revision":"7f9c2","providerID":"local://ns-herd-web-7f9c2-abcde",` +
	`"address":"10.77.3.21","phase":"Ready","createdAt":"2025-01-01T00:00:00Z","readyAt":"2025-01-01T00:00:12Z",` +
	`"lastProbeAt":"2025-01-01T00:05:00Z","lastError":""}`)

// BenchmarkTxn5000Ops measures one Txn writing the statuses of 5,000 instances: one bbolt
// transaction, one fsync.
func BenchmarkTxn5000Ops(b *testing.B) {
	const n = 5000
	s := open(b, filepath.Join(b.TempDir(), "herd.db"))
	ops := make([]store.Op, n)
	for i := range ops {
		ops[i] = store.Op{Type: store.OpPut, Kind: "instance", Name: fmt.Sprintf("web-%05d", i), Value: statusValue}
	}
	ctx := context.Background()
	for b.Loop() {
		if _, err := s.Txn(ctx, ops...); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "writes/s")
}

// BenchmarkTxn5000ConcurrentUpdates measures 5,000 goroutines each updating one instance's status
// with a single-op Txn at the version it read, as 5,000 reconcilers would: the committer groups
// them.
func BenchmarkTxn5000ConcurrentUpdates(b *testing.B) {
	const n = 5000
	s := open(b, filepath.Join(b.TempDir(), "herd.db"))
	ctx := context.Background()
	ops := make([]store.Op, n)
	for i := range ops {
		ops[i] = store.Op{Type: store.OpPut, Kind: "instance", Name: fmt.Sprintf("web-%05d", i), Value: statusValue}
	}
	recs, err := s.Txn(ctx, ops...)
	if err != nil {
		b.Fatal(err)
	}
	versions := make([]int64, n)
	for i, r := range recs {
		versions[i] = r.ResourceVersion
	}
	for b.Loop() {
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rec, err := store.Update(ctx, s, "instance", ops[i].Name, statusValue, versions[i])
				if err != nil {
					errs <- err
					return
				}
				versions[i] = rec.ResourceVersion
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "writes/s")
}

// BenchmarkTxnWorkerPool measures 5,000 single-op updates made by 32 workers, each writing one
// after the other, as a controller's reconcile workers do.
func BenchmarkTxnWorkerPool(b *testing.B) {
	const n, workers = 5000, 32
	s := open(b, filepath.Join(b.TempDir(), "herd.db"))
	ctx := context.Background()
	for b.Loop() {
		var wg sync.WaitGroup
		var next atomic.Int64
		errs := make(chan error, workers)
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := next.Add(1); i <= n; i = next.Add(1) {
					op := store.Op{Type: store.OpPut, Kind: "instance", Name: fmt.Sprintf("web-%05d", i), Value: statusValue}
					if _, err := s.Txn(ctx, op); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "writes/s")
}

// BenchmarkTxnSingleOpSequential is the latency of one write when nothing else is writing: the
// cost of one commit and its fsync.
func BenchmarkTxnSingleOpSequential(b *testing.B) {
	s := open(b, filepath.Join(b.TempDir(), "herd.db"))
	ctx := context.Background()
	for b.Loop() {
		if _, err := s.Txn(ctx, store.Op{Type: store.OpPut, Kind: "instance", Name: "web-00001", Value: statusValue}); err != nil {
			b.Fatal(err)
		}
	}
}
