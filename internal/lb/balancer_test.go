package lb

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"testing"
)

// appliedRoutes applies l alone without starting the load balancer (checks off, so every target is
// healthy) and returns its routes.
func appliedRoutes(t *testing.T, l Listener) *routes {
	t.Helper()
	l.HealthCheck.Disabled = true
	lb := New(Options{Logger: testLogger(t)})
	if err := lb.Apply(Config{Listeners: []Listener{l}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		lb.Start(ctx)
	})
	return lb.listeners[l.Name].state.Load().routes
}

func fakeTargets(prefix string, n int) []Target {
	out := make([]Target, n)
	for i := range out {
		out[i] = Target{ID: fmt.Sprintf("%s%d", prefix, i), Address: fmt.Sprintf("127.0.0.1:%d", 10000+i)}
	}
	return out
}

// countPicks picks n times for requests without a key and counts the picks per group/target.
func countPicks(rt *routes, n int) map[string]int {
	got := map[string]int{}
	for range n {
		t := rt.pick(&pickKey{}, nil)
		if t == nil {
			got["<none>"]++
			continue
		}
		got[t.key.group+"/"+t.key.id]++
	}
	return got
}

func byGroup(picks map[string]int, groupOf func(string) string) map[string]int {
	out := map[string]int{}
	for k, v := range picks {
		out[groupOf(k)] += v
	}
	return out
}

func TestGroupWeights(t *testing.T) {
	cases := []struct {
		name    string
		weights []int
		want    []float64 // expected shares
	}{
		{"canary 90/10", []int{90, 10}, []float64{0.9, 0.1}},
		{"three revisions", []int{50, 30, 20}, []float64{0.5, 0.3, 0.2}},
		{"odd weights", []int{997, 3}, []float64{0.997, 0.003}},
		{"all omitted share equally", []int{0, 0}, []float64{0.5, 0.5}},
		{"weight 0 gets nothing", []int{1, 0}, []float64{1, 0}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := Listener{Name: "w", Fleet: "f", Address: "127.0.0.1:0"}
			for i, w := range tc.weights {
				l.Groups = append(l.Groups, TargetGroup{Name: fmt.Sprintf("g%d", i), Weight: w, Targets: fakeTargets(fmt.Sprintf("g%dt", i), 3)})
			}
			rt := appliedRoutes(t, l)
			const n = 100_000
			picks := countPicks(rt, n)
			groups := byGroup(picks, func(k string) string { return k[:2] })
			for i, want := range tc.want {
				got := float64(groups[fmt.Sprintf("g%d", i)]) / n
				if math.Abs(got-want) > 0.01*max(want, 0.001) {
					t.Errorf("group g%d got share %.4f, want %.4f within 1%%", i, got, want)
				}
			}
		})
	}
}

func TestTargetPolicies(t *testing.T) {
	const n = 60_000
	t.Run("round-robin is even", func(t *testing.T) {
		l := Listener{Name: "w", Fleet: "f", Address: "127.0.0.1:0", Policy: Policy{Type: PolicyRoundRobin},
			Groups: []TargetGroup{{Name: "g", Targets: fakeTargets("t", 3)}}}
		rt := appliedRoutes(t, l)
		for k, v := range countPicks(rt, n) {
			if v != n/3 {
				t.Errorf("%s got %d, want %d", k, v, n/3)
			}
		}
	})
	t.Run("weighted follows target weights", func(t *testing.T) {
		ts := fakeTargets("t", 3)
		for i := range ts {
			ts[i].Weight = i + 1
		}
		l := Listener{Name: "w", Fleet: "f", Address: "127.0.0.1:0", Policy: Policy{Type: PolicyWeighted},
			Groups: []TargetGroup{{Name: "g", Targets: ts}}}
		rt := appliedRoutes(t, l)
		got := countPicks(rt, n)
		for i := range ts {
			if want := n * (i + 1) / 6; got[fmt.Sprintf("g/t%d", i)] != want {
				t.Errorf("t%d got %d, want %d", i, got[fmt.Sprintf("g/t%d", i)], want)
			}
		}
	})
	t.Run("least outstanding avoids busy targets", func(t *testing.T) {
		l := Listener{Name: "w", Fleet: "f", Address: "127.0.0.1:0", Groups: []TargetGroup{{Name: "g", Targets: fakeTargets("t", 3)}}}
		rt := appliedRoutes(t, l)
		busy := rt.groups[0].targets
		defer func() {
			// Nothing is really in flight: let shutdown find the targets idle.
			for _, b := range busy {
				b.stats.inFlight.Store(0)
			}
		}()
		busy[0].stats.inFlight.Store(5)
		busy[1].stats.inFlight.Store(1)
		for range 100 {
			if got := rt.pick(&pickKey{}, nil); got != busy[2] {
				t.Fatalf("picked %s, want the idle t2", got.key.id)
			}
		}
		busy[2].stats.inFlight.Store(9)
		if got := rt.pick(&pickKey{}, nil); got != busy[1] {
			t.Fatalf("picked %s, want t1", got.key.id)
		}
	})
	t.Run("unusable targets and groups are skipped", func(t *testing.T) {
		l := Listener{Name: "w", Fleet: "f", Address: "127.0.0.1:0", Groups: []TargetGroup{
			{Name: "a", Weight: 99, Targets: fakeTargets("a", 2)},
			{Name: "b", Weight: 1, Targets: fakeTargets("b", 1)},
		}}
		rt := appliedRoutes(t, l)
		for _, tg := range rt.groups[0].targets {
			tg.ejected.Store(true)
		}
		got := countPicks(rt, 1000)
		if got["b/b0"] != 1000 {
			t.Fatalf("with group a all ejected, got %v, want everything on b/b0", got)
		}
		rt.groups[1].targets[0].healthy.Store(false)
		if got := rt.pick(&pickKey{}, nil); got != nil {
			t.Fatalf("with nothing healthy, picked %s", got.key.id)
		}
	})
	t.Run("retry excludes the failed target", func(t *testing.T) {
		l := Listener{Name: "w", Fleet: "f", Address: "127.0.0.1:0", Groups: []TargetGroup{{Name: "g", Targets: fakeTargets("t", 2)}}}
		rt := appliedRoutes(t, l)
		first := rt.groups[0].targets[0]
		for range 100 {
			if got := rt.pick(&pickKey{}, first); got == first {
				t.Fatal("picked the excluded target")
			}
		}
	})
}

func TestHeaderHashPolicy(t *testing.T) {
	l := Listener{Name: "w", Fleet: "f", Address: "127.0.0.1:0", Policy: Policy{Type: PolicyHeaderHash, Header: "x-tenant"},
		Groups: []TargetGroup{{Name: "g", Targets: fakeTargets("t", 5)}}}
	rt := appliedRoutes(t, l)
	req := func(tenant string) *http.Request {
		r, _ := http.NewRequest(http.MethodGet, "http://x/", nil)
		r.Header.Set("X-Tenant", tenant)
		return r
	}
	home := map[string]*target{}
	spread := map[*target]bool{}
	for i := range 1000 {
		tenant := fmt.Sprintf("tenant-%d", i)
		k := rt.keyOf(req(tenant))
		home[tenant] = rt.pick(&k, nil)
		spread[home[tenant]] = true
	}
	if len(spread) != 5 {
		t.Fatalf("1000 tenants landed on %d of 5 targets", len(spread))
	}
	for tenant, want := range home {
		for range 3 {
			k := rt.keyOf(req(tenant))
			if got := rt.pick(&k, nil); got != want {
				t.Fatalf("%s moved from %s to %s", tenant, want.key.id, got.key.id)
			}
		}
	}
	// Losing a target moves only its own tenants.
	gone := rt.groups[0].targets[2]
	gone.ejected.Store(true)
	for tenant, was := range home {
		k := rt.keyOf(req(tenant))
		got := rt.pick(&k, nil)
		if was != gone && got != was {
			t.Fatalf("%s moved from %s to %s though its target is healthy", tenant, was.key.id, got.key.id)
		}
		if got == gone {
			t.Fatalf("%s still on the ejected target", tenant)
		}
	}
}

func TestSmoothSchedule(t *testing.T) {
	cases := []struct {
		weights []int
		want    []int32
	}{
		{[]int{1}, []int32{0}},
		{[]int{2, 2}, []int32{0, 1}},
		{[]int{5, 1, 1}, []int32{0, 0, 1, 0, 2, 0, 0}},
		{[]int{0, 3}, []int32{1}},
		{[]int{0, 0}, nil},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprint(tc.weights), func(t *testing.T) {
			if got := smoothSchedule(tc.weights); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}
