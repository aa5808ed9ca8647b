package fleetwatch_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/fleetwatch"
	"herd.dev/herd/internal/informer"
	"herd.dev/herd/internal/store"
	"herd.dev/herd/internal/store/memory"
)

// TestRun: the first call has every fleet changed, each later one the fleets whose record or
// instance records changed (a deleted fleet is changed and gone from the view), a tick calls with
// nothing changed, and the view gives each fleet its instances by name and its rollout's weights.
func TestRun(t *testing.T) {
	st := memory.New()
	defer st.Close()
	ctx := context.Background()
	put := func(kind string, obj store.Object) {
		t.Helper()
		if err := store.PutObject(ctx, st, kind, obj); err != nil {
			t.Fatal(err)
		}
	}
	inst := func(name, fleet string) *v1alpha1.Instance {
		return &v1alpha1.Instance{Metadata: v1alpha1.ObjectMeta{Name: name}, Spec: v1alpha1.InstanceSpec{Fleet: fleet, Revision: fleet + "-1"}}
	}
	web := &v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: "web"}}
	api := &v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: "api"}}
	put(store.Fleets, web)
	put(store.Fleets, api)
	webA := inst("web-a", "web")
	put(store.Instances, webA)

	calls := make(chan string, 16)
	tick := make(chan time.Time)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	inf := informer.New(informer.Options{Store: st})
	go func() { _ = inf.Start(rctx) }()
	go func() {
		defer close(done)
		fleetwatch.Run(rctx, inf, tick, func(v *fleetwatch.View, dirty map[string]bool) {
			calls <- describe(v, dirty)
		})
	}()
	defer func() { cancel(); <-done }()
	next := func(want string) {
		t.Helper()
		select {
		case got := <-calls:
			if got != want {
				t.Fatalf("apply got %q, want %q", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no apply within 10s; want %q", want)
		}
	}

	next("changed [api web]; api:[] web:[web-a]")
	put(store.Instances, inst("web-b", "web"))
	next("changed [web]; api:[] web:[web-a web-b]")
	if err := store.Delete(ctx, st, store.Instances, "web-a", webA.Metadata.ResourceVersion); err != nil {
		t.Fatal(err)
	}
	next("changed [web]; api:[] web:[web-b]")
	if err := store.Delete(ctx, st, store.Fleets, "api", api.Metadata.ResourceVersion); err != nil {
		t.Fatal(err)
	}
	next("changed [api]; web:[web-b]")
	tick <- time.Now()
	next("changed []; web:[web-b]")
	web.Status.Rollout = &v1alpha1.RolloutStatus{Revision: "web-2", PreviousRevision: "web-1",
		Phase: v1alpha1.RolloutProgressing, Weights: map[string]int32{"web-1": 90, "web-2": 10}}
	put(store.Fleets, web)
	next("changed [web]; web:[web-b] weights map[web-1:90 web-2:10]")
}

// describe is what apply was told: the fleets changed, then each fleet of the view with its
// instances and its rollout's weights.
func describe(v *fleetwatch.View, dirty map[string]bool) string {
	changed := make([]string, 0, len(dirty))
	for n := range dirty {
		changed = append(changed, n)
	}
	slices.Sort(changed)
	var fleets []string
	for _, name := range v.Names() {
		if !v.Has(name) {
			return "Names has " + name + ", Has does not"
		}
		_, insts, weights, _ := v.Fleet(name)
		names := make([]string, 0, len(insts))
		for _, in := range insts {
			names = append(names, in.Metadata.Name)
		}
		s := fmt.Sprintf("%s:%v", name, names)
		if weights != nil {
			s += fmt.Sprintf(" weights %v", weights)
		}
		fleets = append(fleets, s)
	}
	if len(v.Fleets()) != len(fleets) {
		return fmt.Sprintf("Fleets has %d, Names %d", len(v.Fleets()), len(fleets))
	}
	return fmt.Sprintf("changed %v; %s", changed, strings.Join(fleets, " "))
}
