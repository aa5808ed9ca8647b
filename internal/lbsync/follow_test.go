package lbsync

import (
	"context"
	"fmt"
	"testing"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/chaos"
	"herd.dev/herd/internal/lb"
	"herd.dev/herd/internal/lbsync/lbsynctest"
	"herd.dev/herd/internal/store"
	"herd.dev/herd/internal/store/memory"
)

// lastConfig returns what the load balancer was last given, under the Sync's lock (Follow
// applies from its own goroutine).
func lastConfig(s *Sync, fl *fakeLB) (lb.Config, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(fl.applied) == 0 {
		return lb.Config{}, 0
	}
	return fl.applied[len(fl.applied)-1], len(fl.applied)
}

func waitConfig(t *testing.T, s *Sync, fl *fakeLB, want string) {
	t.Helper()
	lbsynctest.WaitDescribed(t, want, func() string { c, _ := lastConfig(s, fl); return lbsynctest.Describe(c) })
}

// TestFollow configures the load balancer from the store as a replica that does not lead does:
// a canary's weights from the fleet's status, instances as the leader records them, a deleted
// fleet removed; and when the store stops answering, the last configuration stays.
func TestFollow(t *testing.T) {
	st := memory.New()
	f := &v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: "web"}, Spec: v1alpha1.FleetSpec{
		Listeners: []v1alpha1.Listener{{Name: "http", Port: 8080, InstancePort: 30080, Protocol: v1alpha1.ProtocolHTTP}},
	}, Status: v1alpha1.FleetStatus{Rollout: &v1alpha1.RolloutStatus{Revision: "web-2", PreviousRevision: "web-1",
		Phase: v1alpha1.RolloutProgressing, Weights: map[string]int32{"web-1": 80, "web-2": 20}}}}
	lbsynctest.Put(t, st, store.Fleets, f)
	a := lbsynctest.Inst("web-a", "web-1", v1alpha1.PhaseReady, "10.0.0.1")
	lbsynctest.Put(t, st, store.Instances, a)
	lbsynctest.Put(t, st, store.Instances, lbsynctest.Inst("web-b", "web-2", v1alpha1.PhaseBooting, "10.0.0.2"))

	fl := &fakeLB{}
	s := New(fl, "127.0.0.1", nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Follow(ctx, st, lbsynctest.Informer(t, st)) }()
	waitConfig(t, s, fl, "127.0.0.1:8080 -> web-1:80:1 web-2:20:1;")

	// The leader records a new instance and ends the rollout: proportional weights again.
	lbsynctest.Put(t, st, store.Instances, lbsynctest.Inst("web-c", "web-2", v1alpha1.PhaseReady, "10.0.0.3"))
	f.Status.Rollout.Phase = v1alpha1.RolloutSucceeded
	lbsynctest.Put(t, st, store.Fleets, f)
	waitConfig(t, s, fl, "127.0.0.1:8080 -> web-1:1:1 web-2:2:2;")

	// An instance on its way out is no target.
	a.Status.Phase = v1alpha1.PhaseTerminating
	lbsynctest.Put(t, st, store.Instances, a)
	waitConfig(t, s, fl, "127.0.0.1:8080 -> web-2:2:2;")

	// The store stops answering: the load balancer keeps what it had.
	_, applies := lastConfig(s, fl)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // nothing to wait for: Follow must do nothing
	if c, n := lastConfig(s, fl); n != applies || lbsynctest.Describe(c) != "127.0.0.1:8080 -> web-2:2:2;" {
		t.Fatalf("after the store closed: %d applies (was %d), config %q", n, applies, lbsynctest.Describe(c))
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// A fleet deleted while nobody followed is removed when following starts again.
	st2 := memory.New()
	defer st2.Close()
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	go func() { _ = s.Follow(ctx2, st2, lbsynctest.Informer(t, st2)) }()
	waitConfig(t, s, fl, "")
}

// paused reports, as "listener:paused", whether the last configuration pauses each listener's
// health checks.
func paused(s *Sync, fl *fakeLB) string {
	c, _ := lastConfig(s, fl)
	out := ""
	for _, l := range c.Listeners {
		out += fmt.Sprintf("%s:%v;", l.Address, l.HealthCheck.Paused)
	}
	return out
}

// TestFollowPausedHealth: a replica that does not lead pauses a fleet's health checks while a
// pause-health action is active in the store, as the leader's load balancer does, and resumes
// them when the action ends.
func TestFollowPausedHealth(t *testing.T) {
	st := memory.New()
	defer st.Close()
	lbsynctest.Put(t, st, store.Fleets, &v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: "web"}, Spec: v1alpha1.FleetSpec{
		Listeners: []v1alpha1.Listener{{Name: "http", Port: 8080, InstancePort: 30080, Protocol: v1alpha1.ProtocolHTTP}},
	}})
	lbsynctest.Put(t, st, store.Instances, lbsynctest.Inst("web-a", "web-1", v1alpha1.PhaseReady, "10.0.0.1"))
	fl := &fakeLB{}
	s := New(fl, "127.0.0.1", nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Follow(ctx, st, lbsynctest.Informer(t, st)) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	lbsynctest.WaitDescribed(t, "127.0.0.1:8080:false;", func() string { return paused(s, fl) })

	a := &v1alpha1.ChaosAction{Metadata: v1alpha1.ObjectMeta{Name: "pause-1"},
		Spec:   v1alpha1.ChaosActionSpec{Action: v1alpha1.ChaosPauseHealth, Target: "web"},
		Status: v1alpha1.ChaosActionStatus{Phase: v1alpha1.ChaosActive, StartedAt: time.Now()}}
	lbsynctest.Put(t, st, chaos.Kind, a)
	lbsynctest.WaitDescribed(t, "127.0.0.1:8080:true;", func() string { return paused(s, fl) })

	a.Status.Phase = v1alpha1.ChaosEnded
	lbsynctest.Put(t, st, chaos.Kind, a)
	lbsynctest.WaitDescribed(t, "127.0.0.1:8080:false;", func() string { return paused(s, fl) })
}
