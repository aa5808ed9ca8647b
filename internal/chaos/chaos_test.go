package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/provider/fake"
	"herd.dev/herd/internal/regionnet"
	"herd.dev/herd/internal/store"
	"herd.dev/herd/internal/store/memory"
)

// netProvider is a fake provider whose regions are networks: it records the link's state.
type netProvider struct {
	*fake.Provider
	mu    sync.Mutex
	links map[string]string // region -> "partition", "degrade 300ms 0.2", or "" (as configured)
	calls int
}

func (p *netProvider) set(region, s string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.links[region] = s
	p.calls++
	return nil
}

func (p *netProvider) link(region string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.links[region]
}

func (p *netProvider) Partition(ctx context.Context, region string) error {
	return p.set(region, "partition")
}

func (p *netProvider) Degrade(ctx context.Context, region string, latency time.Duration, loss float64) error {
	return p.set(region, fmt.Sprintf("degrade %s %v", latency, loss))
}

func (p *netProvider) Restore(ctx context.Context, region string) error { return p.set(region, "") }

type pauser struct {
	mu     sync.Mutex
	paused map[string]bool
}

func (p *pauser) SetHealthPaused(f map[string]bool) { p.mu.Lock(); p.paused = f; p.mu.Unlock() }

func (p *pauser) get() map[string]bool { p.mu.Lock(); defer p.mu.Unlock(); return p.paused }

type events struct {
	mu   sync.Mutex
	list []string
}

func (e *events) Eventf(object, typ, reason, format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.list = append(e.list, object+" "+reason)
}

func (e *events) has(s string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, l := range e.list {
		if l == s {
			return true
		}
	}
	return false
}

type rig struct {
	st     store.Store
	prov   *netProvider
	pauser *pauser
	events *events
	engine *Engine
	srv    *httptest.Server
}

func newRig(t *testing.T, st store.Store, since time.Time) *rig {
	t.Helper()
	fp, err := fake.New(fake.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{st: st, prov: &netProvider{Provider: fp, links: map[string]string{}}, pauser: &pauser{}, events: &events{}}
	r.engine, err = New(Options{Store: st, Providers: map[string]provider.Provider{fake.Name: r.prov}, Networks: map[string]regionnet.Chaos{fake.Name: r.prov},
		Pausers: []HealthPauser{r.pauser}, Events: r.events, Since: since})
	if err != nil {
		t.Fatal(err)
	}
	r.srv = httptest.NewServer(r.engine.Handler())
	t.Cleanup(r.srv.Close)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.engine.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return r
}

func (r *rig) post(t *testing.T, path string, body any) (int, v1alpha1.ChaosAction, string) {
	t.Helper()
	data, _ := json.Marshal(body)
	resp, err := http.Post(r.srv.URL+path, "application/json", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	var a v1alpha1.ChaosAction
	_ = json.Unmarshal(buf.Bytes(), &a)
	var e struct{ Error string }
	if json.Unmarshal(buf.Bytes(), &e) == nil && e.Error != "" {
		return resp.StatusCode, a, e.Error
	}
	return resp.StatusCode, a, buf.String()
}

func (r *rig) get(t *testing.T, name string) v1alpha1.ChaosAction {
	t.Helper()
	a, err := r.engine.Get(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return *a
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func seed(t *testing.T, st store.Store) {
	t.Helper()
	f := &v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: "web"}, Spec: v1alpha1.FleetSpec{
		Regions: []v1alpha1.Region{{Name: "eu", Provider: fake.Name}, {Name: "us", Provider: fake.Name}}}}
	in := &v1alpha1.Instance{Metadata: v1alpha1.ObjectMeta{Name: "web-1"}, Spec: v1alpha1.InstanceSpec{Fleet: "web", Provider: fake.Name, Region: "eu"}}
	for kind, obj := range map[string]store.Object{store.Fleets: f, store.Instances: in} {
		if err := store.PutObject(context.Background(), st, kind, obj); err != nil {
			t.Fatal(err)
		}
	}
}

func spec(action, target string, d time.Duration) v1alpha1.ChaosActionSpec {
	return v1alpha1.ChaosActionSpec{Action: action, Target: target, Duration: v1alpha1.D(d)}
}

// Partition and degrade last their duration, or until stopped, and are recorded as events.
func TestRegionActionsEndAfterDurationOrStop(t *testing.T) {
	st := memory.New()
	defer st.Close()
	seed(t, st)
	r := newRig(t, st, time.Now())

	code, a, body := r.post(t, "/v1/chaos", spec(v1alpha1.ChaosPartitionRegion, "eu", time.Second))
	if code != http.StatusCreated || a.Status.Phase != v1alpha1.ChaosActive {
		t.Fatalf("start: %d %s", code, body)
	}
	if got := r.prov.link("eu"); got != "partition" {
		t.Fatalf("region eu's link is %q, want partitioned", got)
	}
	start := time.Now()
	waitUntil(t, "the partition to end", func() bool { return r.get(t, a.Metadata.Name).Status.Phase == v1alpha1.ChaosEnded })
	t.Logf("a partition of 1s ended after %s", time.Since(start))
	if got := r.prov.link("eu"); got != "" {
		t.Fatalf("after its duration region eu's link is %q, want restored", got)
	}
	if msg := r.get(t, a.Metadata.Name).Status.Message; msg != "its duration ended" {
		t.Fatalf("message %q", msg)
	}

	code, d, body := r.post(t, "/v1/chaos", v1alpha1.ChaosActionSpec{Action: v1alpha1.ChaosDegradeRegion, Target: "us",
		Latency: v1alpha1.D(300 * time.Millisecond), Loss: 0.2, Duration: v1alpha1.D(time.Hour)})
	if code != http.StatusCreated {
		t.Fatalf("degrade: %d %s", code, body)
	}
	if got := r.prov.link("us"); got != "degrade 300ms 0.2" {
		t.Fatalf("region us's link is %q", got)
	}
	code, stopped, body := r.post(t, "/v1/chaos/"+d.Metadata.Name+"/stop", nil)
	if code != http.StatusOK || stopped.Status.Phase != v1alpha1.ChaosEnded || stopped.Status.Message != "stopped" {
		t.Fatalf("stop: %d %s", code, body)
	}
	if got := r.prov.link("us"); got != "" {
		t.Fatalf("after stop region us's link is %q, want restored", got)
	}
	if code, _, _ := r.post(t, "/v1/chaos/nope/stop", nil); code != http.StatusNotFound {
		t.Fatalf("stopping an unknown action answered %d, want 404", code)
	}
	for _, e := range []string{"Region/eu ChaosStarted", "Region/eu ChaosEnded", "Region/us ChaosStarted", "Region/us ChaosEnded"} {
		if !r.events.has(e) {
			t.Errorf("no event %q", e)
		}
	}
	list, err := r.engine.List(context.Background())
	if err != nil || len(list) != 2 || list[0].Metadata.Name != d.Metadata.Name {
		t.Fatalf("List: %v, %d actions", err, len(list))
	}
}

// Every bad request is refused with the field and the fix, and changes nothing.
func TestRefusals(t *testing.T) {
	st := memory.New()
	defer st.Close()
	seed(t, st)
	r := newRig(t, st, time.Now())
	if code, _, _ := r.post(t, "/v1/chaos", spec(v1alpha1.ChaosPartitionRegion, "eu", time.Hour)); code != http.StatusCreated {
		t.Fatal("could not start the partition the overlap check needs")
	}
	calls := r.prov.calls
	cases := []struct {
		body any
		want string
	}{
		{spec("flood", "eu", 0), "action \"flood\": use one of"},
		{spec(v1alpha1.ChaosPartitionRegion, "mars", 0), "region \"mars\": no fleet runs in it"},
		{spec(v1alpha1.ChaosPartitionRegion, "Bad_Name", 0), "target \"Bad_Name\""},
		{spec(v1alpha1.ChaosPartitionRegion, "us", 48*time.Hour), "--duration 48h0m0s: must be between"},
		{spec(v1alpha1.ChaosDegradeRegion, "us", time.Minute), "degrade-region needs --latency or --loss"},
		{v1alpha1.ChaosActionSpec{Action: v1alpha1.ChaosDegradeRegion, Target: "us", Loss: 2}, "--loss 200: must be between"},
		{v1alpha1.ChaosActionSpec{Action: v1alpha1.ChaosPartitionRegion, Target: "us", Loss: 0.5}, "--latency and --loss are for degrade-region only"},
		{spec(v1alpha1.ChaosKillInstance, "web-1", time.Minute), "--duration: kill-instance is not undone"},
		{spec(v1alpha1.ChaosKillInstance, "web-9", 0), "instance \"web-9\" not found"},
		{spec(v1alpha1.ChaosPauseHealth, "api", 0), "fleet \"api\" not found"},
		{v1alpha1.ChaosActionSpec{Action: v1alpha1.ChaosDegradeRegion, Target: "eu", Latency: v1alpha1.D(time.Second)}, "is active on it; stop it first: herd chaos stop partition-region-eu-"},
		{map[string]any{"action": "partition-region", "target": "us", "durationn": "1m"}, "malformed chaos action"},
	}
	for _, c := range cases {
		code, _, got := r.post(t, "/v1/chaos", c.body)
		if code != http.StatusUnprocessableEntity || !strings.Contains(got, c.want) {
			t.Errorf("%+v: %d %s, want 422 with %q", c.body, code, got, c.want)
		}
	}
	if r.prov.calls != calls {
		t.Fatalf("refused requests made %d provider calls", r.prov.calls-calls)
	}
	list, _ := r.engine.List(context.Background())
	if len(list) != 1 {
		t.Fatalf("refused requests left %d actions, want the one partition", len(list))
	}
}

// pause-health pauses the fleet on every load balancer until stopped; kill-instance kills at
// once and is done.
func TestPauseHealthAndKill(t *testing.T) {
	st := memory.New()
	defer st.Close()
	seed(t, st)
	r := newRig(t, st, time.Now())
	code, p, body := r.post(t, "/v1/chaos", spec(v1alpha1.ChaosPauseHealth, "web", time.Hour))
	if code != http.StatusCreated {
		t.Fatalf("pause: %d %s", code, body)
	}
	waitUntil(t, "fleet web paused", func() bool { return r.pauser.get()["web"] })
	r.post(t, "/v1/chaos/"+p.Metadata.Name+"/stop", nil)
	waitUntil(t, "fleet web resumed", func() bool { m := r.pauser.get(); return m != nil && !m["web"] })

	if _, err := r.prov.Create(context.Background(), provider.InstanceSpec{Name: "web-1", Image: "img", Region: "eu"}); err != nil {
		t.Fatal(err)
	}
	code, k, body := r.post(t, "/v1/chaos", spec(v1alpha1.ChaosKillInstance, "web-1", 0))
	if code != http.StatusCreated || k.Status.Phase != v1alpha1.ChaosEnded {
		t.Fatalf("kill: %d %s", code, body)
	}
	in, err := r.prov.Get(context.Background(), "web-1")
	if err != nil || in.State != provider.StateFailed {
		t.Fatalf("killed instance: %v %+v, want Failed", err, in)
	}
	if !r.events.has("Instance/web-1 ChaosKilled") || !r.events.has("Fleet/web ChaosStarted") {
		t.Fatalf("events %v", r.events.list)
	}
}

// An action a crashed herd up left active is undone when the next one starts, even though its
// duration has not ended.
func TestUndoneOnRestart(t *testing.T) {
	st := memory.New()
	defer st.Close()
	seed(t, st)
	first := newRig(t, st, time.Now())
	_, a, _ := first.post(t, "/v1/chaos", spec(v1alpha1.ChaosPartitionRegion, "eu", time.Hour))
	_, p, _ := first.post(t, "/v1/chaos", spec(v1alpha1.ChaosPauseHealth, "web", time.Hour))

	second := newRig(t, st, time.Now().Add(10*time.Millisecond))
	waitUntil(t, "the actions to be undone", func() bool {
		return second.get(t, a.Metadata.Name).Status.Phase == v1alpha1.ChaosEnded &&
			second.get(t, p.Metadata.Name).Status.Phase == v1alpha1.ChaosEnded
	})
	second.prov.mu.Lock()
	link, restored := second.prov.links["eu"]
	second.prov.mu.Unlock()
	if !restored || link != "" {
		t.Fatalf("region eu's link is %q (set: %v) after the restart, want restored", link, restored)
	}
	if m := second.pauser.get(); m["web"] {
		t.Fatal("fleet web's health checks are still paused after the restart")
	}
	if msg := second.get(t, a.Metadata.Name).Status.Message; !strings.Contains(msg, "herd up started again") {
		t.Fatalf("message %q", msg)
	}
}
