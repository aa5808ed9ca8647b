package apiserver

import (
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/image/bundle"
	"herd.dev/herd/internal/imagepin"
	"herd.dev/herd/internal/store"
	"herd.dev/herd/internal/store/memory"
)

// bundles is an image store of bundles by digest.
type bundles map[string]bundle.Bundle

func (b bundles) Resolve(ref string) (string, error) {
	if _, ok := b[ref]; ok {
		return ref, nil
	}
	return "", imagepin.NotFound(errNoImage)
}

func (b bundles) List() ([]bundle.Bundle, error) {
	var out []bundle.Bundle
	for _, x := range b {
		out = append(out, x)
	}
	return out, nil
}

func (b bundles) Remove(ref string) error { delete(b, ref); return nil }

var errNoImage = errors.New("no such node image")

// rm is refused, naming the fleet, while the fleet's pin or a tenant's pin uses an image, and
// allowed for one no fleet uses; prune keeps the images of the last --keep history entries, removes the rest and says
// how many bytes it freed; ls says which fleet uses which.
func TestImageRmPruneLs(t *testing.T) {
	st := memory.New()
	imgs := bundles{}
	for i, d := range []string{"sha256:a", "sha256:b", "sha256:c", "sha256:d", "sha256:e"} {
		imgs[d] = bundle.Bundle{Digest: d, Size: int64(100 * (i + 1)), Config: bundle.Config{Name: "hello"}}
	}
	srv := httptest.NewServer(New(Options{Store: st, Token: token, DefaultProvider: "fake", Providers: []string{"fake"}, ImageStore: imgs}))
	t.Cleanup(srv.Close)
	f := &v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: "web"}, Spec: v1alpha1.FleetSpec{Image: "hello"},
		Pinned:   &v1alpha1.PinnedImage{Ref: "hello", Digest: "sha256:b"},
		Requests: v1alpha1.FleetRequests{TenantPins: map[string]v1alpha1.TenantPin{"acme": {Ref: "hello-v2", Digest: "sha256:e"}}},
		Status:   v1alpha1.FleetStatus{History: []v1alpha1.RevisionHistory{{Image: "sha256:b"}, {Image: "sha256:a"}, {Image: "sha256:c"}}}}
	if err := store.PutObject(t.Context(), st, store.Fleets, f); err != nil {
		t.Fatal(err)
	}

	code, body := call(t, srv, token, "DELETE", "/v1/images/sha256:b", "")
	if code != 409 || !strings.Contains(body, "fleet/web (pinned)") || imgs["sha256:b"].Digest == "" {
		t.Fatalf("rm of the pinned image: %d %s, want 409 naming fleet/web and the image kept", code, body)
	}
	code, body = call(t, srv, token, "DELETE", "/v1/images/sha256:e", "")
	if code != 409 || !strings.Contains(body, "fleet/web (tenant acme pinned)") || imgs["sha256:e"].Digest == "" {
		t.Fatalf("rm of a tenant's pinned image: %d %s, want 409 naming fleet/web's tenant acme and the image kept", code, body)
	}
	if code, body := call(t, srv, token, "DELETE", "/v1/images/sha256:d", ""); code != 200 || imgs["sha256:d"].Digest != "" {
		t.Fatalf("rm of an image no fleet uses: %d %s", code, body)
	}

	_, body = call(t, srv, token, "GET", "/v1/images", "")
	var ls []ImageInfo
	if err := json.Unmarshal([]byte(body), &ls); err != nil || len(ls) != 4 {
		t.Fatalf("ls: %s %v", body, err)
	}
	want := map[string]string{"sha256:b": "fleet/web (pinned)", "sha256:e": "fleet/web (tenant acme pinned)"}
	for _, im := range ls {
		if use, used := want[im.Digest]; used != (len(im.UsedBy) == 1 && im.UsedBy[0] == use) {
			t.Fatalf("ls: %s used by %v; want sha256:b by fleet/web (pinned), sha256:e by its tenant acme, no other", im.Digest, im.UsedBy)
		}
	}

	code, body = call(t, srv, token, "POST", "/v1/images/prune?keep=2", "")
	var res PruneResult
	if err := json.Unmarshal([]byte(body), &res); code != 200 || err != nil || len(res.Removed) != 1 || res.Removed[0].Digest != "sha256:c" || res.Freed != 300 {
		t.Fatalf("prune --keep 2: %d %s; want sha256:c removed (beyond the 2 history entries kept), 300 bytes freed", code, body)
	}
	if imgs["sha256:a"].Digest == "" || imgs["sha256:b"].Digest == "" || imgs["sha256:e"].Digest == "" {
		t.Fatal("prune removed an image the last 2 history entries or a tenant's pin name")
	}
}
