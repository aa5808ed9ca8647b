package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/provider/fake"
	"herd.dev/herd/internal/store"
	"herd.dev/herd/internal/store/memory"
)

var planNow = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// running is one instance a plan starts from, with its record and its provider instance agreeing.
type running struct {
	name, image string
	state       provider.State
	age         time.Duration
}

// planOf plans one reconcile of f (nil: a deleted fleet named web) that observed the given
// instances, on a controller that is not running, and checks that planning touched neither the
// providers nor the store.
func planOf(t *testing.T, f *v1alpha1.Fleet, status v1alpha1.FleetStatus, insts ...running) *plan {
	t.Helper()
	p, _ := fake.New(fake.Options{})
	st := memory.New()
	c, err := New(Options{Store: st, Providers: map[string]provider.Provider{fake.Name: p}, Clock: clocktesting.NewFakeClock(planNow)})
	if err != nil {
		t.Fatal(err)
	}
	s := &scope{c: c, ctx: context.Background(), fleet: f, object: "Fleet/web",
		records: map[string]*v1alpha1.Instance{}, observed: map[string]provider.Instance{}, observedBy: map[string]string{}}
	if f == nil {
		s.deleted, s.fleet = true, &v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: "web"}}
	} else {
		stored := *f
		stored.Status = status
		s.stored, s.revision = &stored, RevisionName(f)
	}
	for i, r := range insts {
		rev := RevisionName(&v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: "web"}, Spec: v1alpha1.FleetSpec{Image: r.image}})
		created := planNow.Add(-r.age)
		addr := fmt.Sprintf("10.0.0.%d", i+1)
		labels := map[string]string{v1alpha1.LabelFleet: "web", v1alpha1.LabelRevision: rev, v1alpha1.LabelRegion: "local"}
		in := &v1alpha1.Instance{
			Metadata: v1alpha1.ObjectMeta{Name: r.name, Labels: labels, ResourceVersion: int64(i + 1)},
			Spec:     v1alpha1.InstanceSpec{Fleet: "web", Revision: rev, Region: "local", Provider: fake.Name, Image: r.image},
			Status:   v1alpha1.InstanceStatus{Phase: v1alpha1.InstancePhase(r.state), Address: addr, CreatedAt: &created},
		}
		o := provider.Instance{Name: r.name, Labels: labels, Image: r.image, Address: addr, State: r.state, CreatedAt: created}
		switch r.state {
		case provider.StateReady:
			in.Status.ReadyAt = &created
		case provider.StateFailed:
			in.Status.LastError, o.Reason = "kernel panic", "kernel panic"
		}
		s.records[r.name], s.observed[r.name], s.observedBy[r.name] = in, o, fake.Name
	}
	var pl *plan
	if f == nil {
		pl = s.planDeleted()
	} else {
		pl = s.plan()
	}
	recs, _, _ := st.List(context.Background(), store.Instances)
	if n := p.Calls("Create") + p.Calls("Delete") + p.Calls("List") + len(recs); n != 0 {
		t.Fatalf("planning made %d provider calls or store writes", n)
	}
	return pl
}

func names(list []*v1alpha1.Instance) string {
	var out []string
	for _, in := range list {
		out = append(out, in.Metadata.Name)
	}
	return fmt.Sprint(out)
}

func reasonsOf(evs []event) string {
	var out []string
	for _, ev := range evs {
		out = append(out, ev.reason)
	}
	return fmt.Sprint(out)
}

// revisionsOf counts the instances of each revision in a list.
func revisionsOf(list []*v1alpha1.Instance) map[string]int {
	out := map[string]int{}
	for _, in := range list {
		out[in.Spec.Revision]++
	}
	return out
}

func TestPlan(t *testing.T) {
	const hour = time.Hour
	ready, booting, failed := provider.StateReady, provider.StateBooting, provider.StateFailed
	rev1 := RevisionName(fleetSpec("web", "img-1", 1))
	rev2 := RevisionName(fleetSpec("web", "img-2", 1))
	rolling := fleetSpec("web", "img-2", 2)
	canary := canaryFleet(step(25, time.Minute))
	canary.Spec.Image = "img-2"

	for _, tt := range []struct {
		name   string
		fleet  *v1alpha1.Fleet
		status v1alpha1.FleetStatus
		insts  []running
		check  func(t *testing.T, p *plan)
	}{{
		name:  "scale up creates the shortfall of the current revision",
		fleet: fleetSpec("web", "img-1", 3),
		insts: []running{{"web-a", "img-1", ready, hour}},
		check: func(t *testing.T, p *plan) {
			if len(p.Create) != 2 || revisionsOf(p.Create)[rev1] != 2 || len(p.Delete) != 0 || len(p.Write) != 2 {
				t.Errorf("create %s, delete %s, write %s: want 2 new of %s written and created", names(p.Create), names(p.Delete), names(p.Write), rev1)
			}
			if got := reasonsOf(p.RecordEvents); got != "[ScalingUp]" {
				t.Errorf("events %s", got)
			}
			if p.Status.Replicas != 3 || p.Status.ReadyReplicas != 1 || p.Status.Phase != "Scaling" {
				t.Errorf("planned status %d/%d %s, want 1/3 Scaling", p.Status.ReadyReplicas, p.Status.Replicas, p.Status.Phase)
			}
		},
	}, {
		name:  "scale down removes instances not ready first, then the newest",
		fleet: fleetSpec("web", "img-1", 2),
		insts: []running{{"web-a", "img-1", ready, 3 * hour}, {"web-b", "img-1", ready, 2 * hour}, {"web-c", "img-1", ready, hour}, {"web-d", "img-1", booting, time.Minute}},
		check: func(t *testing.T, p *plan) {
			if got := names(p.Delete); got != "[web-c web-d]" || len(p.Create) != 0 {
				t.Errorf("delete %s, create %s: want web-c and web-d deleted", got, names(p.Create))
			}
			if got := names(p.Write); got != "[web-c web-d]" {
				t.Errorf("write %s: the terminating records must be stored first", got)
			}
			if got := reasonsOf(p.RecordEvents); got != "[ScalingDown]" {
				t.Errorf("events %s", got)
			}
		},
	}, {
		name:  "healing replaces failed instances within its bound",
		fleet: fleetSpec("web", "img-1", 4), // one replacement at a time
		insts: []running{{"web-a", "img-1", ready, hour}, {"web-b", "img-1", ready, hour}, {"web-c", "img-1", failed, hour}, {"web-d", "img-1", failed, hour}},
		check: func(t *testing.T, p *plan) {
			if got := names(p.Delete); got != "[web-c]" || len(p.Create) != 1 {
				t.Errorf("delete %s, create %s: want web-c replaced by one new instance, web-d held back", got, names(p.Create))
			}
			if got := reasonsOf(p.RecordEvents); got != "[InstanceFailed ScalingUp]" {
				t.Errorf("events %s", got)
			}
		},
	}, {
		name:  "rolling update surges one new instance and keeps every ready old one",
		fleet: rolling,
		insts: []running{{"web-a", "img-1", ready, hour}, {"web-b", "img-1", ready, hour}},
		check: func(t *testing.T, p *plan) {
			if len(p.Create) != 1 || revisionsOf(p.Create)[rev2] != 1 || len(p.Delete) != 0 {
				t.Errorf("create %s, delete %s: want one of %s and no deletion", names(p.Create), names(p.Delete), rev2)
			}
			if p.Weights != nil {
				t.Errorf("weights %v, want proportional", p.Weights)
			}
		},
	}, {
		name:   "canary starts with one new instance and no traffic",
		fleet:  canary,
		status: v1alpha1.FleetStatus{CurrentRevision: rev1},
		insts:  []running{{"web-a", "img-1", ready, hour}, {"web-b", "img-1", ready, hour}, {"web-c", "img-1", ready, hour}, {"web-d", "img-1", ready, hour}},
		check: func(t *testing.T, p *plan) {
			if len(p.Create) != 1 || revisionsOf(p.Create)[rev2] != 1 || len(p.Delete) != 0 {
				t.Errorf("create %s, delete %s: want one canary of %s", names(p.Create), names(p.Delete), rev2)
			}
			if got := fmt.Sprint(p.Weights); got != fmt.Sprint(map[string]int32{rev1: 100, rev2: 0}) {
				t.Errorf("weights %s, want all on %s", got, rev1)
			}
			if got := reasonsOf(p.StatusEvents); got != "[RolloutStarted]" {
				t.Errorf("status events %s", got)
			}
			if ro := p.Status.Rollout; ro == nil || ro.Phase != v1alpha1.RolloutProgressing || ro.PreviousRevision != rev1 {
				t.Errorf("planned rollout %+v, want progressing from %s", ro, rev1)
			}
		},
	}, {
		name:  "a deleted fleet's instances all go",
		insts: []running{{"web-a", "img-1", ready, hour}, {"web-b", "img-1", booting, time.Minute}},
		check: func(t *testing.T, p *plan) {
			if got := names(p.Delete); got != "[web-a web-b]" || len(p.Create) != 0 {
				t.Errorf("delete %s, create %s: want both deleted", got, names(p.Create))
			}
			if got := reasonsOf(p.RecordEvents); got != "[Deleting]" {
				t.Errorf("events %s", got)
			}
		},
	}} {
		t.Run(tt.name, func(t *testing.T) {
			tt.check(t, planOf(t, tt.fleet, tt.status, tt.insts...))
		})
	}
}
