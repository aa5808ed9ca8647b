package apiserver

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/provider/fake"
	"herd.dev/herd/internal/store"
	"herd.dev/herd/internal/store/memory"
)

func getFleet(t *testing.T, st store.Store, name string) *v1alpha1.Fleet {
	t.Helper()
	f, err := store.GetObject[v1alpha1.Fleet](context.Background(), st, store.Fleets, name)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func applyResults(t *testing.T, body string) []ApplyResult {
	t.Helper()
	var out []ApplyResult
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		t.Fatalf("apply answer %q: %v", body, err)
	}
	return out
}

// An autoscaled fleet scaled to 5 keeps 5 when the same file is applied again (what GitOps tools
// do on every sync); a desired count in the file is ignored with a warning that says why.
func TestApplyKeepsAutoscaledDesired(t *testing.T) {
	srv, st := newServer(t)
	autoscaled := func(desired *int32) string {
		return fleetJSON("web", func(f *v1alpha1.Fleet) {
			f.Spec.Replicas = v1alpha1.Replicas{Min: new(int32(1)), Max: new(int32(10)), Desired: desired}
			f.Spec.Autoscaling = &v1alpha1.Autoscaling{Target: 100}
			f.Spec.Discovery = &v1alpha1.Discovery{Enabled: new(false)} // no listener: no warning that it gets no name
		})
	}
	if code, body := call(t, srv, token, "POST", "/v1/apply", autoscaled(nil)); code != 200 {
		t.Fatalf("create: %d %s", code, body)
	}
	if code, body := call(t, srv, token, "PUT", "/v1/fleets/web/scale", `{"replicas":5}`); code != 200 {
		t.Fatalf("scale: %d %s", code, body)
	}
	gen := getFleet(t, st, "web").Metadata.Generation

	code, body := call(t, srv, token, "POST", "/v1/apply", autoscaled(nil))
	if res := applyResults(t, body); code != 200 || res[0].Result != "unchanged" || len(res[0].Warnings) != 0 {
		t.Fatalf("re-apply: %d %s, want unchanged without warnings", code, body)
	}
	if f := getFleet(t, st, "web"); *f.Spec.Replicas.Desired != 5 || f.Metadata.Generation != gen {
		t.Fatalf("after re-apply: desired %d generation %d, want 5 and %d", *f.Spec.Replicas.Desired, f.Metadata.Generation, gen)
	}

	_, body = call(t, srv, token, "POST", "/v1/apply", autoscaled(new(int32(2))))
	res := applyResults(t, body)
	if len(res[0].Warnings) != 1 || !strings.Contains(res[0].Warnings[0], "spec.replicas.desired (2) ignored: spec.autoscaling is set") {
		t.Fatalf("apply with desired 2: %s, want a warning that autoscaling owns it", body)
	}
	if f := getFleet(t, st, "web"); *f.Spec.Replicas.Desired != 5 {
		t.Fatalf("desired %d after an apply that set 2, want 5 kept", *f.Spec.Replicas.Desired)
	}

	// Lower bounds in the file clamp the kept count; without autoscaling the file's count rules.
	call(t, srv, token, "POST", "/v1/apply", fleetJSON("web", func(f *v1alpha1.Fleet) {
		f.Spec.Replicas = v1alpha1.Replicas{Min: new(int32(1)), Max: new(int32(3))}
		f.Spec.Autoscaling = &v1alpha1.Autoscaling{Target: 100}
	}))
	if f := getFleet(t, st, "web"); *f.Spec.Replicas.Desired != 3 {
		t.Fatalf("desired %d after max went to 3, want 3", *f.Spec.Replicas.Desired)
	}
	call(t, srv, token, "POST", "/v1/apply", fleetJSON("web", func(f *v1alpha1.Fleet) {
		f.Spec.Replicas = v1alpha1.Replicas{Min: new(int32(1)), Max: new(int32(3)), Desired: new(int32(2))}
	}))
	if f := getFleet(t, st, "web"); *f.Spec.Replicas.Desired != 2 {
		t.Fatalf("desired %d without autoscaling, want the file's 2", *f.Spec.Replicas.Desired)
	}
}

func withListener(port int32) func(*v1alpha1.Fleet) {
	return func(f *v1alpha1.Fleet) {
		f.Spec.Listeners = []v1alpha1.Listener{{Port: port, InstancePort: 30080}}
	}
}

// A load-balancer port another fleet holds is refused at apply, naming that fleet, and nothing
// is stored; so are two fleets of one apply that claim one port.
func TestApplyRefusesListenerClash(t *testing.T) {
	srv, st := newServer(t)
	if code, body := call(t, srv, token, "POST", "/v1/apply", fleetJSON("web", withListener(8080))); code != 200 {
		t.Fatalf("first fleet: %d %s", code, body)
	}
	code, body := call(t, srv, token, "POST", "/v1/apply", fleetJSON("clash", withListener(8080)))
	if code != http.StatusUnprocessableEntity || !strings.Contains(body, `spec.listeners[0].port`) ||
		!strings.Contains(body, `port 8080 is already claimed by fleet \"web\" (listener http-8080): choose another port`) {
		t.Fatalf("clash: %d %s, want 422 naming fleet web and the fix", code, body)
	}
	if _, err := store.GetObject[v1alpha1.Fleet](context.Background(), st, store.Fleets, "clash"); err == nil {
		t.Fatal("the refused fleet was stored")
	}
	// The fleet that holds the port may apply itself again.
	if code, body := call(t, srv, token, "POST", "/v1/apply", fleetJSON("web", withListener(8080))); code != 200 {
		t.Fatalf("re-apply of the holder: %d %s", code, body)
	}

	var req ApplyRequest
	for _, name := range []string{"one", "two"} {
		var r ApplyRequest
		_ = json.Unmarshal([]byte(fleetJSON(name, withListener(9090))), &r)
		req.Fleets = append(req.Fleets, r.Fleets...)
	}
	both, _ := json.Marshal(req)
	code, body = call(t, srv, token, "POST", "/v1/apply", string(both))
	if code != http.StatusUnprocessableEntity || !strings.Contains(body, `port 9090 is also claimed by fleet \"one\" (document 1 of this apply)`) {
		t.Fatalf("two fleets on one port in one apply: %d %s", code, body)
	}
	recs, _, _ := st.List(context.Background(), store.Fleets)
	if len(recs) != 1 {
		t.Fatalf("%d fleets stored, want only web", len(recs))
	}
}

// Region options are checked by the provider that will receive them; bad ones change nothing.
func TestApplyValidatesRegionOptions(t *testing.T) {
	p, err := fake.New(fake.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st := memory.New()
	srv := httptest.NewServer(New(Options{Store: st, Token: token, DefaultProvider: "fake", Providers: []string{"fake"},
		OptionValidators: map[string]provider.OptionsValidator{"fake": p}}))
	t.Cleanup(srv.Close)
	withOptions := func(opts map[string]string) string {
		return fleetJSON("web", func(f *v1alpha1.Fleet) {
			f.Spec.Regions = []v1alpha1.Region{{Name: "one"}, {Name: "two", Options: opts}}
		})
	}
	code, body := call(t, srv, token, "POST", "/v1/apply", withOptions(map[string]string{"bootDelai": "1s"}))
	if code != http.StatusUnprocessableEntity || !strings.Contains(body, `"field":"spec.regions[1].options.bootDelai"`) ||
		!strings.Contains(body, "the fake provider knows bootDelay, createDelay") {
		t.Fatalf("unknown option: %d %s", code, body)
	}
	if recs, _, _ := st.List(context.Background(), store.Fleets); len(recs) != 0 {
		t.Fatal("a fleet with bad options was stored")
	}
	if code, body := call(t, srv, token, "POST", "/v1/apply", withOptions(map[string]string{"bootDelay": "1s"})); code != 200 {
		t.Fatalf("good options: %d %s", code, body)
	}
}

// A fleet in several regions is autoscaled region by region: an apply of the same file keeps each
// region's count, and a count the file gives a region is ignored with a warning.
func TestApplyKeepsAutoscaledRegionDesired(t *testing.T) {
	srv, st := newServer(t)
	autoscaled := func(euDesired *int32) string {
		return fleetJSON("web", func(f *v1alpha1.Fleet) {
			f.Spec.Replicas = v1alpha1.Replicas{Min: new(int32(1)), Max: new(int32(10))}
			f.Spec.Autoscaling = &v1alpha1.Autoscaling{Target: 100}
			f.Spec.Discovery = &v1alpha1.Discovery{Enabled: new(false)} // no listener: no warning that it gets no name
			f.Spec.Regions = []v1alpha1.Region{{Name: "eu"}, {Name: "us"}}
			if euDesired != nil {
				f.Spec.Regions[0].Replicas = &v1alpha1.Replicas{Desired: euDesired}
			}
		})
	}
	if code, body := call(t, srv, token, "POST", "/v1/apply", autoscaled(nil)); code != 200 {
		t.Fatalf("create: %d %s", code, body)
	}
	// What the autoscaler writes for a busy region.
	if _, err := store.UpdateFleetSpec(context.Background(), st, "web", func(f *v1alpha1.Fleet) error {
		f.Spec.Regions[0].Replicas = &v1alpha1.Replicas{Desired: new(int32(4))}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	code, body := call(t, srv, token, "POST", "/v1/apply", autoscaled(nil))
	if res := applyResults(t, body); code != 200 || res[0].Result != "unchanged" || len(res[0].Warnings) != 0 {
		t.Fatalf("re-apply: %d %s, want unchanged without warnings", code, body)
	}
	_, body = call(t, srv, token, "POST", "/v1/apply", autoscaled(new(int32(2))))
	if res := applyResults(t, body); len(res[0].Warnings) != 1 || !strings.Contains(res[0].Warnings[0], "spec.regions[0].replicas.desired ignored") {
		t.Fatalf("apply with eu desired 2: %s, want a warning that autoscaling owns it", body)
	}
	f := getFleet(t, st, "web")
	if d := *f.RegionReplicas("eu").Desired; d != 4 {
		t.Fatalf("region eu desired %d after re-applies, want the autoscaler's 4", d)
	}
	if us := f.Spec.Regions[1].Replicas; us != nil {
		t.Fatalf("region us got replicas %+v, want none (the fleet's)", us)
	}
}
