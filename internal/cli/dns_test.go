package cli

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/apiserver"
	"herd.dev/herd/internal/client"
	"herd.dev/herd/internal/global/route53"
	"herd.dev/herd/internal/global/routes"
	"herd.dev/herd/internal/store"
	"herd.dev/herd/internal/store/memory"
)

// routesEnv is an API server with fleet web (spec.global, failover over eu and us) whose routes
// say eu is healthy and us unreachable, and a client config for it.
func routesEnv(t *testing.T) string {
	st := memory.New()
	f := &v1alpha1.Fleet{TypeMeta: v1alpha1.TypeMeta{APIVersion: v1alpha1.GroupVersion, Kind: v1alpha1.KindFleet},
		Metadata: v1alpha1.ObjectMeta{Name: "web"}, Spec: v1alpha1.FleetSpec{Image: "hello",
			Listeners: []v1alpha1.Listener{{Port: 8080, InstancePort: 30080}},
			Regions:   []v1alpha1.Region{{Name: "eu"}, {Name: "us"}},
			Global:    &v1alpha1.Global{Hostname: "web.herd.test"}}}
	v1alpha1.SetFleetDefaults(f, "fake")
	op, err := store.PutOp(store.Fleets, f)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Txn(context.Background(), op); err != nil {
		t.Fatal(err)
	}
	table := routes.Table{Routes: []routes.Route{{Fleet: "web", Hostname: "web.herd.test", Policy: v1alpha1.PolicyFailover, TTLSeconds: 5,
		Regions: []routes.RegionRoute{
			{Name: "eu", Addresses: []netip.Addr{netip.MustParseAddr("10.216.0.1")}, Weight: 1, Ready: 2, MinReady: 1, Reachable: true, Healthy: true, Why: "reachable, 2 Ready instances (min 1)"},
			{Name: "us", Addresses: []netip.Addr{netip.MustParseAddr("10.216.0.2")}, Weight: 1, Ready: 2, MinReady: 1, Why: "unreachable from outside the region: partitioned"},
		}}},
		DiscoveryZone: v1alpha1.DefaultDiscoveryZone, DiscoveryHTTPPort: 80,
		Discovery: []routes.Route{{Fleet: "web", Hostname: "web", Policy: v1alpha1.PolicyFailover, TTLSeconds: 5, AllowFrom: []string{"front"}, Port: 8080,
			Regions: []routes.RegionRoute{
				{Name: "eu", Addresses: []netip.Addr{netip.MustParseAddr("10.213.1.2")}, Weight: 1, Ready: 2, MinReady: 1, Reachable: true, Healthy: true, Why: "2 Ready instances (min 1)"},
				{Name: "us", Addresses: []netip.Addr{netip.MustParseAddr("10.213.2.2")}, Weight: 1, Ready: 0, MinReady: 1, Reachable: true, Why: "0 Ready instances, fewer than minHealthyInstances 1"},
			}}},
	}
	const token = "0123456789abcdef0123456789abcdef"
	srv := httptest.NewServer(apiserver.New(apiserver.Options{Store: st, Token: token,
		Routes: func(context.Context) (routes.Table, error) { return table, nil }}))
	t.Cleanup(srv.Close)
	config := filepath.Join(t.TempDir(), "config")
	if err := client.SaveConfig(config, &client.Config{Server: srv.URL, Token: token}); err != nil {
		t.Fatal(err)
	}
	return config
}

func TestGetRoutes(t *testing.T) {
	config := routesEnv(t)
	out, err := runHerd(config, "get", "routes")
	if err != nil {
		t.Fatalf("herd get routes: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	want := []string{
		"HOSTNAME FLEET POLICY TTL REGION ANSWER READY ADDRESS WHY",
		"web.herd.test web failover 5s eu primary 2/1 10.216.0.1 reachable, 2 Ready instances (min 1)",
		"web.herd.test web failover 5s us out 2/1 10.216.0.2 unreachable from outside the region: partitioned",
		"web.herd.internal web nearest, port 80 to 8080 (from front) 5s eu in 2/1 10.213.1.2 2 Ready instances (min 1)",
		"web.herd.internal web nearest, port 80 to 8080 (from front) 5s us out 0/1 10.213.2.2 0 Ready instances, fewer than minHealthyInstances 1",
	}
	if len(lines) != len(want) {
		t.Fatalf("herd get routes:\n%s\nwant %d lines", out, len(want))
	}
	for i := range want {
		if got := strings.Join(strings.Fields(lines[i]), " "); got != want[i] {
			t.Errorf("line %d %q, want %q", i, got, want[i])
		}
	}
	for _, name := range []string{"WEB.herd.test.", "web"} { // a hostname in any case, or the fleet
		if out, err := runHerd(config, "get", "routes", name); err != nil || strings.Count(out, "web.herd.test") != 2 {
			t.Errorf("herd get routes %s: %v\n%s", name, err, out)
		}
	}
	if out, err := runHerd(config, "get", "routes", "web.herd.internal"); err != nil || strings.Count(out, "web.herd.internal") != 2 || strings.Contains(out, "web.herd.test") {
		t.Errorf("herd get routes web.herd.internal: %v\n%s", err, out)
	}
	if out, err := runHerd(config, "get", "routes", "nope.herd.test"); err == nil || !strings.Contains(err.Error(), `no route for "nope.herd.test"`) {
		t.Errorf("herd get routes nope.herd.test: %v\n%s", err, out)
	}
	out, err = runHerd(config, "describe", "fleet", "web")
	if err != nil || !strings.Contains(out, "Global:             web.herd.test, policy failover, TTL 5s, min 1 Ready per region") ||
		!strings.Contains(out, "unreachable from outside the region: partitioned") {
		t.Errorf("herd describe fleet web: %v\n%s", err, out)
	}
}

func TestDNSExport(t *testing.T) {
	config := routesEnv(t)
	out, err := runHerd(config, "dns", "export", "web")
	if err != nil {
		t.Fatalf("herd dns export web: %v\n%s", err, out)
	}
	var exp route53.Export
	if err := json.Unmarshal([]byte(out), &exp); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if len(exp.HealthChecks) != 2 || exp.HealthChecks[1].HealthCheckConfig.IPAddress != "10.216.0.2" {
		t.Errorf("health checks %+v, want one per region on its LB address", exp.HealthChecks)
	}
	rs := exp.ChangeBatch.Changes[0].ResourceRecordSet
	if rs.Failover != "PRIMARY" || rs.SetIdentifier != "eu" || rs.ResourceRecords[0].Value != "10.216.0.1" {
		t.Errorf("first record set %+v, want eu PRIMARY", rs)
	}
	if out, err := runHerd(config, "dns", "export", "web", "--aws-region", "eu"); err == nil || !strings.Contains(err.Error(), "HERD_REGION=AWS_REGION") {
		t.Errorf("bad --aws-region: %v\n%s", err, out)
	}
}
