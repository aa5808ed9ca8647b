package cli

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/apiserver"
	"herd.dev/herd/internal/client"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/provider/fake"
	"herd.dev/herd/internal/store"
	"herd.dev/herd/internal/store/memory"
)

// waitEnv is an in-process API server on a memory store with the fake provider's validation, a
// client config for it, and a fleet "web" applied through the API.
type waitEnv struct {
	t      *testing.T
	store  store.Store
	config string
	// watching receives a fleet watch's revision once the API server watches the store for it.
	watching chan int64
}

// watchSignal is a store that tells when a watch of fleets has begun, so that a test changes the
// fleet only once the waiter follows it.
type watchSignal struct {
	store.Store
	watching chan int64
}

func (w watchSignal) Watch(ctx context.Context, kind string, since int64) (<-chan store.Event, error) {
	ch, err := w.Store.Watch(ctx, kind, since)
	if err == nil && kind == store.Fleets {
		w.watching <- since
	}
	return ch, err
}

// watched waits until n more fleet watches have begun.
func (e *waitEnv) watched(n int) {
	e.t.Helper()
	for range n {
		select {
		case <-e.watching:
		case <-time.After(20 * time.Second):
			e.t.Fatal("no fleet watch began")
		}
	}
}

func newWaitEnv(t *testing.T) *waitEnv {
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	p, err := fake.New(fake.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const token = "0123456789abcdef0123456789abcdef"
	e := &waitEnv{t: t, store: st, config: filepath.Join(t.TempDir(), "config"), watching: make(chan int64, 8)}
	srv := httptest.NewServer(apiserver.New(apiserver.Options{Store: watchSignal{st, e.watching}, Token: token, DefaultProvider: fake.Name,
		Providers: []string{fake.Name}, OptionValidators: map[string]provider.OptionsValidator{fake.Name: p}}))
	t.Cleanup(srv.Close)
	if err := client.SaveConfig(e.config, &client.Config{Server: srv.URL, Token: token}); err != nil {
		t.Fatal(err)
	}
	f := v1alpha1.Fleet{TypeMeta: v1alpha1.TypeMeta{APIVersion: v1alpha1.GroupVersion, Kind: v1alpha1.KindFleet},
		Metadata: v1alpha1.ObjectMeta{Name: "web"}, Spec: v1alpha1.FleetSpec{Image: "img"}}
	if _, err := client.New(&client.Config{Server: srv.URL, Token: token}).Apply(t.Context(), []v1alpha1.Fleet{f}); err != nil {
		t.Fatal(err)
	}
	return e
}

// setReady writes the fleet's Ready condition as the reconciler does, for generation gen (0: the
// fleet's own).
func (e *waitEnv) setReady(status metav1.ConditionStatus, gen int64) {
	e.t.Helper()
	_, err := store.UpdateObject(context.Background(), e.store, store.Fleets, "web", func(f *v1alpha1.Fleet) (bool, error) {
		if gen == 0 {
			gen = f.Metadata.Generation
		}
		meta.SetStatusCondition(&f.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionReady, Status: status,
			Reason: "ReplicasNotReady", Message: "0/1 instances ready", ObservedGeneration: gen})
		return true, nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
}

// start runs herd with args in the background; the returned func waits for its output and error.
func (e *waitEnv) start(args ...string) func() (string, error) {
	var out, errOut strings.Builder
	cmd := NewRootCmd(&out, &errOut)
	cmd.SetArgs(append([]string{"--config", e.config}, args...))
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(e.t.Context()) }()
	return func() (string, error) {
		select {
		case err := <-done:
			return out.String(), err
		case <-time.After(20 * time.Second):
			e.t.Fatalf("herd %v did not return", args)
			return "", nil
		}
	}
}

func TestWaitConditionMet(t *testing.T) {
	e := newWaitEnv(t)
	e.setReady(metav1.ConditionFalse, 0)
	result := e.start("wait", "fleet/web", "--for", "condition=Ready", "--timeout", "1m")
	e.watched(1)
	e.setReady(metav1.ConditionTrue, 0)
	if out, err := result(); err != nil || out != "fleet/web condition met\n" {
		t.Fatalf("wait: %q, %v", out, err)
	}
	if out, err := e.start("wait", "fleet/web", "--for", "condition=ready=true", "--timeout", "0")(); err != nil || !strings.Contains(out, "condition met") {
		t.Fatalf("wait --timeout 0 on a met condition: %q, %v", out, err)
	}
}

// A condition written for an older generation does not count: the status does not describe the
// spec applied since.
func TestWaitIgnoresConditionOfOlderGeneration(t *testing.T) {
	e := newWaitEnv(t)
	e.setReady(metav1.ConditionTrue, 0)
	if _, err := store.UpdateFleetSpec(t.Context(), e.store, "web", func(f *v1alpha1.Fleet) error { f.Spec.Image = "img-2"; return nil }); err != nil {
		t.Fatal(err)
	}
	_, err := e.start("wait", "fleet/web", "--for", "condition=Ready", "--timeout", "0")()
	if err == nil || !strings.Contains(err.Error(), "Ready describes generation 1, the spec is at 2") {
		t.Fatalf("wait on a stale condition: %v", err)
	}
}

func TestWaitTimesOutWithTheFleetsState(t *testing.T) {
	e := newWaitEnv(t)
	e.setReady(metav1.ConditionFalse, 0)
	result := e.start("wait", "fleet/web", "--for", "condition=Ready", "--timeout", "2s")
	e.watched(1)
	_, err := result()
	want := "timed out after 2s waiting for fleet/web condition=Ready=True: Ready is False (ReplicasNotReady: 0/1 instances ready)"
	if err == nil || err.Error() != want {
		t.Fatalf("wait: %v, want %q", err, want)
	}
}

func TestWaitFleetDeleted(t *testing.T) {
	e := newWaitEnv(t)
	result := e.start("wait", "fleet/web", "--for", "condition=Ready", "--timeout", "1m")
	gone := e.start("wait", "fleet/web", "--for", "delete", "--timeout", "1m")
	e.watched(2)
	if err := store.Delete(t.Context(), e.store, store.Fleets, "web", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := result(); err == nil || !strings.Contains(err.Error(), "fleet/web was deleted while waiting for condition=Ready=True") {
		t.Fatalf("wait for Ready on a deleted fleet: %v", err)
	}
	if out, err := gone(); err != nil || out != "fleet/web deleted\n" {
		t.Fatalf("wait --for delete: %q, %v", out, err)
	}
	if out, err := e.start("wait", "fleet/web", "--for", "delete")(); err != nil || out != "fleet/web deleted\n" {
		t.Fatalf("wait --for delete of a missing fleet: %q, %v", out, err)
	}
	if _, err := e.start("wait", "fleet/web", "--for", "condition=Ready")(); err == nil || !strings.Contains(err.Error(), `fleet "web" not found`) {
		t.Fatalf("wait for a condition of a missing fleet: %v", err)
	}
}

func TestWaitRefusesBadArguments(t *testing.T) {
	e := newWaitEnv(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"wait", "web", "--for", "condition=Ready"}, "wait takes fleet/NAME"},
		{[]string{"wait", "fleet/web"}, "--for is required"},
		{[]string{"wait", "fleet/web", "--for", "ready"}, `--for "ready": use condition=TYPE`},
		{[]string{"wait", "fleet/web", "--for", "condition=Ready=Maybe"}, "condition=TYPE[=True|False|Unknown]"},
		{[]string{"wait", "fleet/web", "--for", "delete", "--for", "condition=Ready"}, "cannot be combined"},
	} {
		if _, err := e.start(tc.args...)(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("herd %v: %v, want %q", tc.args, err, tc.want)
		}
	}
}
