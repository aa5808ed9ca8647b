package lb

import (
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// tenantTargets makes one target per backend for tenant.
func tenantTargets(tenant string, bs ...*backend) []Target {
	out := targets(bs...)
	for i := range out {
		out[i].Tenant = tenant
	}
	return out
}

// tenantGet does a GET for tenant (by header) and returns the status, answering backend and body.
func tenantGet(t testing.TB, c *http.Client, u, tenant string) (int, string, string) {
	return get(t, c, u, "X-Tenant", tenant)
}

func TestTenancyRoutesOnlyToTheTenantsTargets(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e Engine) {
		a := []*backend{newBackend(t, "a0", nil), newBackend(t, "a1", nil), newBackend(t, "a2", nil)}
		b := []*backend{newBackend(t, "b0", nil), newBackend(t, "b1", nil)}
		l := httpListener(
			// A fleet-wide weight of 0 on v2 must not send a's requests anywhere else: a tenant is
			// served by every revision it has targets of.
			TargetGroup{Name: "v1", Weight: 100, Targets: append(tenantTargets("a", a[0]), tenantTargets("b", b[0])...)},
			TargetGroup{Name: "v2", Weight: 0, Targets: append(tenantTargets("a", a[1]), tenantTargets("b", b[1])...)},
		)
		l.Tenancy = &Tenancy{Key: TenantByHeader, Header: "X-Tenant", Tenants: []string{"a", "b"}}
		lb := startLB(t, e, Config{Listeners: []Listener{l}})
		waitHealthy(t, lb, 4)

		// Requests of both tenants run while the targets change under them: a's first target goes,
		// a third comes, b's v1 target goes.
		var wrong, answered atomic.Int64
		var mu sync.Mutex
		var firstWrong string
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for _, tenant := range []string{"a", "b"} {
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c := newClient()
					for {
						select {
						case <-stop:
							return
						default:
						}
						code, from, _ := tenantGet(t, c, url(lb, "/"), tenant)
						if code != http.StatusOK {
							continue // a held request that timed out is not a cross-tenant answer
						}
						answered.Add(1)
						if !strings.HasPrefix(from, tenant) {
							wrong.Add(1)
							mu.Lock()
							if firstWrong == "" {
								firstWrong = tenant + " answered by " + from
							}
							mu.Unlock()
						}
					}
				}()
			}
		}
		waitFor(t, 5*time.Second, "answers", func() bool { return answered.Load() > 100 })
		l.Groups = []TargetGroup{
			{Name: "v1", Weight: 100, Targets: tenantTargets("a", a[2])},
			{Name: "v2", Weight: 0, Targets: append(tenantTargets("a", a[1]), tenantTargets("b", b[1])...)},
		}
		if err := lb.Apply(Config{Listeners: []Listener{l}}); err != nil {
			t.Fatal(err)
		}
		before := answered.Load()
		waitFor(t, 5*time.Second, "answers after the change", func() bool { return answered.Load() > before+200 })
		close(stop)
		wg.Wait()
		if n := wrong.Load(); n > 0 {
			t.Fatalf("%d of %d answers came from another tenant's target (first: %s)", n, answered.Load(), firstWrong)
		}
		if a[0].hits.Load() == 0 || a[2].hits.Load() == 0 || b[1].hits.Load() == 0 {
			t.Fatalf("hits a0=%d a2=%d b1=%d: every target of a tenant should have served", a[0].hits.Load(), a[2].hits.Load(), b[1].hits.Load())
		}
		stats := lb.TenantStats("web")
		if len(stats) != 2 || stats[0].Requests == 0 || stats[1].Requests == 0 || stats[0].LastRequest.IsZero() {
			t.Fatalf("tenant stats: %+v", stats)
		}
	})
}

func TestTenancyRefusesUnknownTenants(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e Engine) {
		a := newBackend(t, "a0", nil)
		l := httpListener(TargetGroup{Name: "v1", Targets: tenantTargets("a", a)})
		l.Tenancy = &Tenancy{Key: TenantByHeader, Header: "X-Tenant", Tenants: []string{"a"}}
		lb := startLB(t, e, Config{Listeners: []Listener{l}})
		waitHealthy(t, lb, 1)
		c := newClient()
		if code, _, body := tenantGet(t, c, url(lb, "/"), "mallory"); code != http.StatusNotFound || !strings.Contains(body, `unknown tenant "mallory"`) {
			t.Fatalf("unknown tenant: %d %q, want 404 naming it", code, body)
		}
		if code, _, body := get(t, c, url(lb, "/")); code != http.StatusNotFound || !strings.Contains(body, "no tenant in the request") || !strings.Contains(body, "X-Tenant") {
			t.Fatalf("no tenant: %d %q, want 404 naming the header", code, body)
		}
		// The connection is still good after a refusal.
		if code, from, _ := tenantGet(t, c, url(lb, "/"), "a"); code != http.StatusOK || from != "a0" {
			t.Fatalf("tenant a: %d from %q", code, from)
		}
		if a.hits.Load() != 1 {
			t.Fatalf("a0 served %d requests, want only a's one", a.hits.Load())
		}
	})
}

func TestTenancyClaimsAndHoldsForATenantWithoutTarget(t *testing.T) {
	for _, key := range []TenantKey{TenantByHeader, TenantByHost, TenantByPathPrefix} {
		t.Run(string(key), func(t *testing.T) {
			forEachEngine(t, func(t *testing.T, e Engine) {
				l := httpListener()
				l.Hold = &Hold{Timeout: Duration(10 * time.Second)}
				l.Tenancy = &Tenancy{Key: key, Header: "X-Tenant", Open: key == TenantByPathPrefix, Tenants: []string{"acme"}}
				lb := startLB(t, e, Config{Listeners: []Listener{l}})
				claimed := make(chan string, 16)
				lb.SetTenantClaimer(func(fleet, tenant string) {
					select {
					case claimed <- fleet + "/" + tenant:
					default:
					}
				})
				got := make(chan [2]string, 1)
				go func() {
					req, _ := http.NewRequest(http.MethodGet, url(lb, "/acme/orders"), nil)
					switch key {
					case TenantByHeader:
						req.Header.Set("X-Tenant", "acme")
					case TenantByHost:
						req.Host = "acme.example.com"
					}
					resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
					if err != nil {
						got <- [2]string{err.Error()}
						return
					}
					resp.Body.Close()
					got <- [2]string{resp.Status, resp.Header.Get("X-Backend")}
				}()
				select {
				case c := <-claimed:
					if c != "web/acme" {
						t.Fatalf("claimed %q, want web/acme", c)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("no claim for a tenant without target")
				}
				waitFor(t, 5*time.Second, "the held request", func() bool { return lb.Held("web") == 1 })
				other := newBackend(t, "other0", nil)
				mine := newBackend(t, "acme0", nil)
				l.Groups = []TargetGroup{{Name: "v1", Targets: append(tenantTargets("other", other), tenantTargets("acme", mine)...)}}
				if err := lb.Apply(Config{Listeners: []Listener{l}}); err != nil {
					t.Fatal(err)
				}
				if r := answer(t, got, "held request"); r[0] != "200 OK" || r[1] != "acme0" {
					t.Fatalf("held request: %s from %q, want 200 from acme0", r[0], r[1])
				}
			})
		})
	}
}

func TestTenantOf(t *testing.T) {
	for _, c := range []struct {
		key          TenantKey
		host, target string
		want         string
	}{
		{TenantByHost, "acme.example.com", "/", "acme"},
		{TenantByHost, "acme:8080", "/", "acme"},
		{TenantByHost, "acme", "/", "acme"},
		{TenantByPathPrefix, "x", "/acme/orders?x=1", "acme"},
		{TenantByPathPrefix, "x", "/acme?x=1", "acme"},
		{TenantByPathPrefix, "x", "/", ""},
		{TenantByPathPrefix, "x", "http://h/acme/x", "acme"},
		{TenantByPathPrefix, "x", "http://h", ""},
	} {
		if got := string(tenantOf(c.key, []byte(c.host), []byte(c.target))); got != c.want {
			t.Errorf("tenantOf(%s, %q, %q) = %q, want %q", c.key, c.host, c.target, got, c.want)
		}
	}
}
