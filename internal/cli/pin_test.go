package cli

import (
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/apiserver"
	"herd.dev/herd/internal/client"
	"herd.dev/herd/internal/imagepin"
	"herd.dev/herd/internal/store"
	"herd.dev/herd/internal/store/memory"
)

// builtImages resolves the names of images built, as herd up's image store does.
type builtImages map[string]string

func (b builtImages) Resolve(ref string) (string, error) {
	if d, ok := b[ref]; ok {
		return d, nil
	}
	for _, d := range b {
		if d == ref {
			return d, nil
		}
	}
	return "", fmt.Errorf("image %q: %w", ref, imagepin.ErrNotFound)
}

// herd rollout pin and unpin, run as a user types them against herd up's API: the pin is stored
// with the digest its image names and said back, a pin without --image keeps the tenant on what
// the fleet boots, unpin removes it; a tenant the fleet does not serve, an image never built, a
// fleet without tenancy and a missing --tenant are refused, saying why, and change no pin.
func TestRolloutPinUnpin(t *testing.T) {
	st := memory.New()
	t.Cleanup(func() { _ = st.Close() })
	const token = "0123456789abcdef0123456789abcdef"
	srv := httptest.NewServer(apiserver.New(apiserver.Options{Store: st, Token: token, DefaultProvider: "local", Providers: []string{"local"},
		Images: imagepin.Resolver{Images: builtImages{"hello": "sha256:one", "hello-v2": "sha256:two"}}}))
	t.Cleanup(srv.Close)
	config := filepath.Join(t.TempDir(), "config")
	if err := client.SaveConfig(config, &client.Config{Server: srv.URL, Token: token}); err != nil {
		t.Fatal(err)
	}
	fleet := func(name string, port int32, tenancy *v1alpha1.Tenancy) v1alpha1.Fleet {
		return v1alpha1.Fleet{TypeMeta: v1alpha1.TypeMeta{APIVersion: v1alpha1.GroupVersion, Kind: v1alpha1.KindFleet},
			Metadata: v1alpha1.ObjectMeta{Name: name}, Spec: v1alpha1.FleetSpec{Image: "hello", Tenancy: tenancy,
				Listeners: []v1alpha1.Listener{{Port: port, InstancePort: 30080}}}}
	}
	if _, err := client.New(&client.Config{Server: srv.URL, Token: token}).Apply(t.Context(), []v1alpha1.Fleet{
		fleet("saas", 18080, &v1alpha1.Tenancy{Key: "header:X-Tenant", Tenants: []string{"acme", "globex"}}),
		fleet("web", 18081, nil),
	}); err != nil {
		t.Fatal(err)
	}
	herd := func(args ...string) (string, error) {
		var out, errOut strings.Builder
		cmd := NewRootCmd(&out, &errOut)
		cmd.SetArgs(append([]string{"--config", config}, args...))
		err := cmd.ExecuteContext(t.Context())
		return out.String(), err
	}
	pins := func() map[string]v1alpha1.TenantPin {
		t.Helper()
		f, err := store.GetObject[v1alpha1.Fleet](t.Context(), st, store.Fleets, "saas")
		if err != nil {
			t.Fatal(err)
		}
		return f.Requests.TenantPins
	}

	out, err := herd("rollout", "pin", "saas", "--tenant", "acme", "--image", "hello-v2")
	if want := "fleet/saas tenant acme pinned to hello-v2 (sha256:two); the other tenants follow sha256:one\n"; err != nil || out != want {
		t.Fatalf("pin acme to hello-v2: %q, %v; want %q", out, err, want)
	}
	if p := pins()["acme"]; p.Ref != "hello-v2" || p.Digest != "sha256:two" || len(pins()) != 1 {
		t.Fatalf("pins after pinning acme: %+v; want acme on hello-v2 = sha256:two alone", pins())
	}
	out, err = herd("rollout", "pin", "saas", "--tenant", "globex")
	if want := "fleet/saas tenant globex pinned to hello (sha256:one); the other tenants follow sha256:one\n"; err != nil || out != want {
		t.Fatalf("pin globex without --image: %q, %v; want %q", out, err, want)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"rollout", "pin", "saas", "--tenant", "mallory"}, "not in spec.tenancy.tenants"},
		{[]string{"rollout", "pin", "saas", "--tenant", "acme", "--image", "never-built"}, "--image"},
		{[]string{"rollout", "pin", "web", "--tenant", "acme"}, "no spec.tenancy"},
		{[]string{"rollout", "unpin", "web", "--tenant", "acme"}, "no spec.tenancy"},
		{[]string{"rollout", "pin", "saas"}, `"tenant" not set`},
		{[]string{"rollout", "unpin", "saas"}, `"tenant" not set`},
	} {
		before := pins()
		if out, err := herd(tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("herd %s: %q, %v; want an error saying %q", strings.Join(tc.args, " "), out, err, tc.want)
		}
		if after := pins(); len(after) != len(before) || after["acme"] != before["acme"] || after["globex"] != before["globex"] {
			t.Errorf("herd %s changed the pins: %+v -> %+v", strings.Join(tc.args, " "), before, after)
		}
	}

	out, err = herd("rollout", "unpin", "saas", "--tenant", "acme")
	if want := "fleet/saas tenant acme follows the fleet's image sha256:one\n"; err != nil || out != want {
		t.Fatalf("unpin acme: %q, %v; want %q", out, err, want)
	}
	if _, acme := pins()["acme"]; acme || pins()["globex"].Digest != "sha256:one" {
		t.Fatalf("pins after unpinning acme: %+v; want globex's alone", pins())
	}
}
