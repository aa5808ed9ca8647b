package apiserver

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/imagepin"
	"herd.dev/herd/internal/store"
	"herd.dev/herd/internal/store/memory"
)

// builds is an image store: each name names the digest last built under it, and every digest
// built is kept.
type builds struct {
	mu      sync.Mutex
	names   map[string]string
	digests map[string]bool
}

func (b *builds) build(name, digest string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.names[name] = digest
	b.digests[digest] = true
}

func (b *builds) Resolve(ref string) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if d, ok := b.names[ref]; ok {
		return d, nil
	}
	if b.digests[ref] {
		return ref, nil
	}
	return "", imagepin.NotFound(fmt.Errorf("no node image named %q: build it with herd image build -f image.yaml", ref))
}

// newPinServer is an API whose images come from the returned builds; the "fake" provider's
// instances boot no image, the "local" provider's do.
func newPinServer(t *testing.T) (*httptest.Server, store.Store, *builds) {
	st := memory.New()
	b := &builds{names: map[string]string{}, digests: map[string]bool{}}
	srv := httptest.NewServer(New(Options{Store: st, Token: token, DefaultProvider: "local", Providers: []string{"local", "fake"},
		Images: imagepin.Resolver{Images: b, Imageless: map[string]bool{"fake": true}}}))
	t.Cleanup(srv.Close)
	return srv, st, b
}

// A name is resolved when it is applied: a rebuild changes nothing stored; applying the same file
// again pins the new digest with a new generation, and a third apply changes nothing.
func TestApplyPinsImage(t *testing.T) {
	srv, st, b := newPinServer(t)
	b.build("hello", "sha256:one")
	apply := func(want string) *v1alpha1.Fleet {
		t.Helper()
		code, body := call(t, srv, token, "POST", "/v1/apply", fleetJSON("web", func(f *v1alpha1.Fleet) { f.Spec.Image = "hello" }))
		if res := applyResults(t, body); code != 200 || res[0].Result != want {
			t.Fatalf("apply: %d %s, want %s", code, body, want)
		}
		return getFleet(t, st, "web")
	}
	f := apply("created")
	if f.Spec.Image != "hello" || f.Pinned == nil || f.Pinned.Digest != "sha256:one" || f.Pinned.By != v1alpha1.PinnedByApply {
		t.Fatalf("after apply: spec.image %q, pinned %+v; want hello pinned to sha256:one by apply", f.Spec.Image, f.Pinned)
	}
	gen := f.Metadata.Generation

	b.build("hello", "sha256:two")
	if f := getFleet(t, st, "web"); f.BootImage() != "sha256:one" {
		t.Fatalf("a rebuild changed the stored fleet's image to %s", f.BootImage())
	}
	f = apply("configured")
	if f.BootImage() != "sha256:two" || f.Metadata.Generation != gen+1 || f.Spec.Image != "hello" {
		t.Fatalf("re-apply after a rebuild: boots %s, generation %d, spec.image %q; want sha256:two, %d, hello", f.BootImage(), f.Metadata.Generation, f.Spec.Image, gen+1)
	}
	apply("unchanged")
}

// An image that was never built is refused, naming spec.image and the fix, and nothing is stored;
// a digest stays that digest; a fleet only on a provider that boots no image may name anything.
func TestApplyImageNotBuilt(t *testing.T) {
	srv, st, b := newPinServer(t)
	code, body := call(t, srv, token, "POST", "/v1/apply", fleetJSON("web", func(f *v1alpha1.Fleet) { f.Spec.Image = "nope" }))
	if code != 422 || !strings.Contains(body, `"field":"spec.image"`) || !strings.Contains(body, "herd image build") {
		t.Fatalf("apply of an image never built: %d %s, want 422 naming spec.image and herd image build", code, body)
	}
	if fleets, _, _ := store.ListObjects[v1alpha1.Fleet](t.Context(), st, store.Fleets); len(fleets) != 0 {
		t.Fatalf("a refused apply stored %d fleets", len(fleets))
	}

	b.build("hello", "sha256:one")
	b.build("hello", "sha256:two")
	if code, body := call(t, srv, token, "POST", "/v1/apply", fleetJSON("web", func(f *v1alpha1.Fleet) { f.Spec.Image = "sha256:one" })); code != 200 {
		t.Fatalf("apply of a digest: %d %s", code, body)
	}
	if f := getFleet(t, st, "web"); f.BootImage() != "sha256:one" || f.Spec.Image != "sha256:one" {
		t.Fatalf("a fleet given a digest boots %s (spec.image %q), want that digest", f.BootImage(), f.Spec.Image)
	}

	code, body = call(t, srv, token, "POST", "/v1/apply", fleetJSON("sim", func(f *v1alpha1.Fleet) {
		f.Spec.Image = "demo"
		f.Spec.Regions = []v1alpha1.Region{{Name: "local", Provider: "fake"}}
	}))
	if code != 200 || getFleet(t, st, "sim").BootImage() != "demo" {
		t.Fatalf("apply of a fake-provider fleet naming an image never built: %d %s, want it pinned as written", code, body)
	}
}

// herd rollout restart pins what the name names now, and says nothing changed when it names the
// pinned digest.
func TestRolloutRestartReresolves(t *testing.T) {
	srv, st, b := newPinServer(t)
	b.build("hello", "sha256:one")
	call(t, srv, token, "POST", "/v1/apply", fleetJSON("web", func(f *v1alpha1.Fleet) { f.Spec.Image = "hello" }))
	gen := getFleet(t, st, "web").Metadata.Generation
	restart := func() RestartResult {
		t.Helper()
		code, body := call(t, srv, token, "POST", "/v1/fleets/web/rollout/restart", "")
		var res RestartResult
		if err := json.Unmarshal([]byte(body), &res); code != 200 || err != nil || res.Fleet == nil {
			t.Fatalf("restart: %d %s", code, body)
		}
		return res
	}
	if res := restart(); res.Previous != "sha256:one" || res.Fleet.BootImage() != "sha256:one" || res.Fleet.Metadata.Generation != gen {
		t.Fatalf("restart without a rebuild: %s -> %s, generation %d; want no change", res.Previous, res.Fleet.BootImage(), res.Fleet.Metadata.Generation)
	}
	b.build("hello", "sha256:two")
	res := restart()
	if res.Previous != "sha256:one" || res.Fleet.BootImage() != "sha256:two" || res.Fleet.Pinned.By != v1alpha1.PinnedByRestart || res.Fleet.Metadata.Generation != gen+1 {
		t.Fatalf("restart after a rebuild: %s -> %s (%+v), generation %d; want sha256:one -> sha256:two by rollout restart, %d", res.Previous, res.Fleet.BootImage(), res.Fleet.Pinned, res.Fleet.Metadata.Generation, gen+1)
	}
	if f := getFleet(t, st, "web"); f.BootImage() != "sha256:two" || f.Spec.Image != "hello" {
		t.Fatalf("stored after restart: boots %s, spec.image %q", f.BootImage(), f.Spec.Image)
	}
}
