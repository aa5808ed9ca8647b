package controller

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/events/eventstest"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/provider/fake"
	"herd.dev/herd/internal/store"
	"herd.dev/herd/internal/store/memory"
)

// orphanProvider is the fake provider with two things watched: the lists of every instance (the
// collector's: a fleet's reconcile always names its fleet), and creates, which it can hold in
// flight after the instance exists, as a slow provider's create is.
type orphanProvider struct {
	*fake.Provider
	unfiltered atomic.Int64
	hold       atomic.Bool
	held       chan string   // told the name of each create held
	release    chan struct{} // closed to let held creates return
}

func (p *orphanProvider) List(ctx context.Context, opts provider.ListOptions) ([]provider.Instance, error) {
	if opts.Fleet == "" && opts.Region == "" {
		p.unfiltered.Add(1)
	}
	return p.Provider.List(ctx, opts)
}

func (p *orphanProvider) Create(ctx context.Context, spec provider.InstanceSpec) (provider.Instance, error) {
	in, err := p.Provider.Create(ctx, spec)
	if err == nil && p.hold.Load() {
		p.held <- spec.Name
		<-p.release
	}
	return in, err
}

// orphanCounts is an OrphanObserver.
type orphanCounts struct {
	mu      sync.Mutex
	found   map[string]int
	deleted map[string]int
}

func (o *orphanCounts) OrphansFound(prov string, n int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.found[prov] = n
}

func (o *orphanCounts) OrphanDeleted(prov string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.deleted[prov]++
}

func (o *orphanCounts) get(prov string) (found, deleted int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.found[prov], o.deleted[prov]
}

func (c *Controller) orphanPasses() int64 {
	c.orphans.mu.Lock()
	defer c.orphans.mu.Unlock()
	return c.orphans.passes
}

// runController starts a controller made of opts, stopped when the test ends.
func runController(t *testing.T, opts Options) *Controller {
	t.Helper()
	c, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("controller stopped with %v", err)
		}
	})
	return c
}

// seedOwned makes, on p and in st, fleets of perFleet Ready instances each, every one recorded as
// a controller that ran them would have, and returns their names.
func seedOwned(t *testing.T, st store.Store, p *fake.Provider, fleets, perFleet int) map[string]bool {
	t.Helper()
	ctx := context.Background()
	names := map[string]bool{}
	for i := range fleets {
		f := fleetSpec(fmt.Sprintf("web%02d", i), "img", int32(perFleet))
		f.Spec.Replicas.Max = new(int32(perFleet + 10))
		rev := RevisionName(f)
		region := f.Spec.Regions[0].Name
		ops := []store.Op{}
		for j := range perFleet {
			name := fmt.Sprintf("%s-%05d", f.Metadata.Name, j)
			labels := map[string]string{v1alpha1.LabelFleet: f.Metadata.Name, v1alpha1.LabelRevision: rev, v1alpha1.LabelRegion: region}
			o, err := p.Create(ctx, provider.InstanceSpec{Name: name, Image: "img", Region: region, Labels: labels})
			if err != nil {
				t.Fatal(err)
			}
			created, ready := o.CreatedAt, o.CreatedAt
			op, err := store.PutOp(store.Instances, &v1alpha1.Instance{
				TypeMeta: v1alpha1.TypeMeta{APIVersion: v1alpha1.GroupVersion, Kind: v1alpha1.KindInstance},
				Metadata: v1alpha1.ObjectMeta{Name: name, Labels: labels},
				Spec:     v1alpha1.InstanceSpec{Fleet: f.Metadata.Name, Revision: rev, Region: region, Provider: fake.Name, Image: "img"},
				Status: v1alpha1.InstanceStatus{Phase: v1alpha1.PhaseReady, ProviderID: o.ProviderID, Address: o.Address,
					CreatedAt: &created, ReadyAt: &ready},
			})
			if err != nil {
				t.Fatal(err)
			}
			ops = append(ops, op)
			names[name] = true
		}
		fop, err := store.PutOp(store.Fleets, f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Txn(ctx, append(ops, fop)...); err != nil {
			t.Fatal(err)
		}
	}
	return names
}

// TestOrphansCollectedAtScale: among 50,000 instances that fleets own, 100 that none owns (no
// fleet label, as a benchmark harness leaves them; a fleet that does not exist; a region the
// fleet does not run in) are each reported once, then deleted together in the one pass that
// follows their grace period, with one unfiltered list of the provider per pass and not one call
// per instance. No owned instance is deleted, nor is an instance whose record is written and whose
// create is still in flight, through that pass and the resync's.
func TestOrphansCollectedAtScale(t *testing.T) {
	const fleets, perFleet, grace = 50, 1000, time.Minute
	ctx := context.Background()
	st := memory.New()
	fp, err := fake.New(fake.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := &orphanProvider{Provider: fp, held: make(chan string, 1), release: make(chan struct{})}
	owned := seedOwned(t, st, fp, fleets, perFleet)
	orphanNames := map[string]bool{}
	for i := range 100 {
		name, labels := fmt.Sprintf("bench-%d", i), map[string]string{}
		switch {
		case i >= 80:
			name, labels = fmt.Sprintf("web00-elsewhere-%d", i), map[string]string{v1alpha1.LabelFleet: "web00", v1alpha1.LabelRegion: "elsewhere"}
		case i >= 40:
			name, labels = fmt.Sprintf("gone-%d", i), map[string]string{v1alpha1.LabelFleet: "gone", v1alpha1.LabelRegion: "local"}
		}
		if _, err := fp.Create(ctx, provider.InstanceSpec{Name: name, Image: "img", Region: "local", Labels: labels}); err != nil {
			t.Fatal(err)
		}
		orphanNames[name] = true
	}

	clk := clocktesting.NewFakeClock(time.Now())
	rec := &eventstest.Recorder{}
	counts := &orphanCounts{found: map[string]int{}, deleted: map[string]int{}}
	c := runController(t, Options{
		Store: st, Providers: map[string]provider.Provider{fake.Name: p}, Clock: clk, Events: rec,
		Logger:       slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		ResyncPeriod: time.Hour, OrphanGrace: grace, Orphans: counts,
	})
	t.Cleanup(func() { close(p.release) }) // first: a create held would hold the controller's stop

	// The pass at start reports each orphan once, with when it goes, and deletes nothing. (The
	// deadlines are generous: a busy machine reconciles 50 fleets of 1,000 slowly.)
	waitFor(t, 5*time.Minute, func() string {
		if found, _ := counts.get(fake.Name); !c.Synced() || found != 100 {
			return fmt.Sprintf("synced %v, %d orphans found, %d passes", c.Synced(), found, c.orphanPasses())
		}
		return ""
	})
	if n := rec.Count("OrphanFound"); n != 100 {
		t.Fatalf("%d OrphanFound events, want one for each of the 100 orphans", n)
	}
	due := clk.Now().Add(grace).UTC().Format(time.RFC3339)
	for _, ev := range rec.Events() {
		if ev.Reason == "OrphanFound" && (!orphanNames[strings.TrimPrefix(ev.Object, "Instance/")] || !strings.Contains(ev.Message, due)) {
			t.Fatalf("OrphanFound event %+v: want one of the orphans, deleted at %s", ev, due)
		}
	}
	if n := fp.Calls("Delete"); n != 0 {
		t.Fatalf("%d instances deleted before the grace period was over", n)
	}
	if got := len(c.Orphans()); got != 100 {
		t.Fatalf("Orphans() lists %d, want 100", got)
	}

	// A create in flight: its record is written, the provider has the instance, the create has
	// not returned.
	p.hold.Store(true)
	f, err := store.GetObject[v1alpha1.Fleet](ctx, st, store.Fleets, "web00")
	if err != nil {
		t.Fatal(err)
	}
	f.Spec.Replicas.Desired = new(int32(perFleet + 1))
	op, _ := store.PutOp(store.Fleets, f)
	if _, err := st.Txn(ctx, op); err != nil {
		t.Fatal(err)
	}
	var inFlight string
	select {
	case inFlight = <-p.held:
	case <-time.After(5 * time.Minute):
		t.Fatal("the scale-out's create never reached the provider")
	}
	if _, err := st.Get(ctx, store.Instances, inFlight); err != nil {
		t.Fatalf("the instance being created has no record: %v", err)
	}

	// The grace period ends: one pass deletes the 100 orphans; then the resync's pass runs.
	passes, lists := c.orphanPasses(), p.unfiltered.Load()
	start := time.Now()
	clk.Step(grace)
	waitFor(t, 5*time.Minute, func() string {
		if _, deleted := counts.get(fake.Name); deleted != 100 || c.orphanPasses() < passes+1 {
			return fmt.Sprintf("%d orphans deleted, %d passes since", deleted, c.orphanPasses()-passes)
		}
		return ""
	})
	took := time.Since(start)
	clk.Step(time.Hour)
	waitFor(t, 5*time.Minute, func() string {
		if n := c.orphanPasses(); n < passes+2 {
			return fmt.Sprintf("%d passes since the grace period ended, want 2", n-passes)
		}
		return ""
	})
	if got, want := p.unfiltered.Load()-lists, c.orphanPasses()-passes; got != want {
		t.Fatalf("%d lists of every instance in %d passes, want one a pass", got, want)
	}
	if n := fp.Calls("Get"); n != 0 {
		t.Fatalf("%d Get calls: the collector must not ask about instances one by one", n)
	}
	if n := fp.Calls("Delete"); n != 100 {
		t.Fatalf("%d instances deleted, want the 100 orphans", n)
	}
	if n := rec.Count("OrphanDeleted"); n != 100 {
		t.Fatalf("%d OrphanDeleted events, want 100", n)
	}
	if n := rec.Count("OrphanFound"); n != 100 {
		t.Fatalf("%d OrphanFound events after three passes, want still 100: once each", n)
	}
	left, err := fp.List(ctx, provider.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, in := range left {
		have[in.Name] = true
		if orphanNames[in.Name] {
			t.Fatalf("orphan %s is still there", in.Name)
		}
	}
	for name := range owned {
		if !have[name] {
			t.Fatalf("owned instance %s was deleted", name)
		}
	}
	if !have[inFlight] {
		t.Fatalf("instance %s, whose create was in flight, was deleted", inFlight)
	}
	for _, ev := range rec.Events() {
		if ev.Object == "Instance/"+inFlight {
			t.Fatalf("event about the instance being created: %+v", ev)
		}
	}
	if got := len(c.Orphans()); got != 0 {
		t.Fatalf("Orphans() still lists %d", got)
	}
	passStart := time.Now()
	c.orphanPass(ctx)
	t.Logf("%d owned instances; the 100 orphans among them deleted %s after their grace period ended; a pass that finds none takes %s",
		len(owned), took.Round(time.Millisecond), time.Since(passStart).Round(time.Millisecond))
}

// TestOrphansKept: with KeepOrphans, an orphan is reported once, listed without a time to go,
// and left running through passes long after any grace period.
func TestOrphansKept(t *testing.T) {
	ctx := context.Background()
	p, err := fake.New(fake.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Create(ctx, provider.InstanceSpec{Name: "bench-1-0", Image: "img", Region: "bench"}); err != nil {
		t.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.Now())
	rec := &eventstest.Recorder{}
	c := runController(t, Options{Store: memory.New(), Providers: map[string]provider.Provider{fake.Name: p}, Clock: clk, Events: rec,
		ResyncPeriod: time.Hour, OrphanGrace: time.Second, KeepOrphans: true})
	waitFor(t, 10*time.Second, func() string {
		if n := c.orphanPasses(); n < 1 {
			return "no pass yet"
		}
		return ""
	})
	for pass := int64(2); pass <= 3; pass++ {
		clk.Step(time.Hour) // the resync's pass
		waitFor(t, 10*time.Second, func() string {
			if n := c.orphanPasses(); n < pass {
				return fmt.Sprintf("%d passes, want %d", n, pass)
			}
			return ""
		})
	}
	if n := p.Calls("Delete"); n != 0 {
		t.Fatalf("%d deletes of an orphan that is to be kept", n)
	}
	list := c.Orphans()
	if len(list) != 1 || list[0].Name != "bench-1-0" || list[0].DeleteAt != nil || list[0].Why != "it has no herd.dev/fleet label" {
		t.Fatalf("Orphans() = %+v, want bench-1-0, kept, with why", list)
	}
	evs := rec.Events()
	if len(evs) != 1 || evs[0].Reason != "OrphanFound" || !strings.Contains(evs[0].Message, "--orphans=keep") {
		t.Fatalf("events %+v, want one OrphanFound saying it is kept", evs)
	}
}
