package controller

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/store"
)

// warmState returns a fleet's serving and warm instance names, and what keeps it from having
// serving serving and warm warm instances, all Ready and all known to the provider.
func (e *env) warmState(fleet string, serving, warm int) (srv, wrm []string, problem string) {
	recs, obs := e.records(fleet), e.observed(fleet)
	if len(recs) != serving+warm || len(obs) != serving+warm {
		return nil, nil, fmt.Sprintf("%d records, %d provider instances, want %d", len(recs), len(obs), serving+warm)
	}
	for _, r := range recs {
		if r.Status.Phase != v1alpha1.PhaseReady {
			return nil, nil, fmt.Sprintf("%s is %s", r.Metadata.Name, r.Status.Phase)
		}
		if IsWarm(r) {
			wrm = append(wrm, r.Metadata.Name)
		} else {
			srv = append(srv, r.Metadata.Name)
		}
	}
	sort.Strings(srv)
	sort.Strings(wrm)
	if len(srv) != serving || len(wrm) != warm {
		return nil, nil, fmt.Sprintf("serving %v, warm %v; want %d and %d", srv, wrm, serving, warm)
	}
	// The fleet's status counts the serving instances only.
	f, err := store.GetObject[v1alpha1.Fleet](context.Background(), e.store, store.Fleets, fleet)
	if err != nil {
		return nil, nil, err.Error()
	}
	if f.Status.Replicas != int32(serving) || f.Status.ReadyReplicas != int32(serving) || f.Status.Phase != "Ready" || f.Status.ObservedGeneration != f.Metadata.Generation {
		return nil, nil, fmt.Sprintf("fleet status %+v", f.Status)
	}
	return srv, wrm, ""
}

// A warm pool is kept booted beside the serving instances; a scale-out takes it first (no new
// instance needed for the first ones) and the pool is refilled afterwards.
func TestWarmPool(t *testing.T) {
	e := newEnv(t, nil, nil)
	f := fleetSpec("web", "img", 1)
	f.Spec.Replicas.Max = new(int32(10))
	f.Spec.Autoscaling = &v1alpha1.Autoscaling{Metric: v1alpha1.MetricRequestsPerSecond, Target: 10, WarmPool: 2}
	e.put(f)
	var warm []string
	waitFor(t, 5*time.Second, func() string {
		var why string
		_, warm, why = e.warmState("web", 1, 2)
		return why
	})

	// Scale out by 2: both warm instances serve, and two new ones refill the pool.
	f.Spec.Replicas.Desired = new(int32(3))
	e.put(f)
	var serving, warm2 []string
	waitFor(t, 5*time.Second, func() string {
		var why string
		serving, warm2, why = e.warmState("web", 3, 2)
		return why
	})
	for _, w := range warm {
		if !slices.Contains(serving, w) {
			t.Fatalf("warm instance %s not taken by the scale-out: serving %v, warm %v", w, serving, warm2)
		}
	}

	// Scale in: the pool stays.
	f.Spec.Replicas.Desired = new(int32(1))
	e.put(f)
	waitFor(t, 5*time.Second, func() string { _, _, why := e.warmState("web", 1, 2); return why })

	// A smaller pool deletes the extra warm instances; no pool at all, every one of them.
	f.Spec.Autoscaling.WarmPool = 0
	e.put(f)
	waitFor(t, 5*time.Second, func() string { _, _, why := e.warmState("web", 1, 0); return why })
}
