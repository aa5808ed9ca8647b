package lbsync

import (
	"crypto/tls"
	"crypto/x509"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/controller"
	"herd.dev/herd/internal/lb"
	"herd.dev/herd/internal/lbsync/lbsynctest"
	"herd.dev/herd/internal/localca"
)

type fakeLB struct {
	applied []lb.Config
	health  []lb.TargetHealth
}

func (f *fakeLB) Apply(c lb.Config) error   { f.applied = append(f.applied, c); return nil }
func (f *fakeLB) Health() []lb.TargetHealth { return f.health }

func TestListeners(t *testing.T) {
	f := &v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: "web"}, Spec: v1alpha1.FleetSpec{
		Listeners:   []v1alpha1.Listener{{Name: "http", Port: 8080, InstancePort: 30080, Protocol: v1alpha1.ProtocolHTTP}},
		HealthCheck: v1alpha1.HealthCheck{Path: "/healthz", Port: 30080, Interval: &v1alpha1.Duration{Duration: time.Second}, HealthyThreshold: 2, UnhealthyThreshold: 3},
	}}
	fl := &fakeLB{}
	s := New(fl, "127.0.0.1", nil)
	s.SetFleetTargets(f, []*v1alpha1.Instance{
		lbsynctest.Inst("web-a", "web-1", v1alpha1.PhaseReady, "10.0.0.1"),
		lbsynctest.Inst("web-b", "web-1", v1alpha1.PhaseTerminating, "10.0.0.2"), // drained, not routed
		lbsynctest.Inst("web-c", "web-2", v1alpha1.PhaseBooting, "10.0.0.3"),     // health checks decide
		lbsynctest.Inst("web-d", "web-2", v1alpha1.PhaseReady, "10.0.0.4"),
		lbsynctest.Inst("web-e", "web-2", v1alpha1.PhasePending, ""), // no address yet
	}, nil)
	if len(fl.applied) != 1 {
		t.Fatalf("%d applies, want 1", len(fl.applied))
	}
	ls := fl.applied[0].Listeners
	if len(ls) != 1 || ls[0].Address != "127.0.0.1:8080" || ls[0].Name != "web/http" || ls[0].HealthCheck.Port != 30080 || ls[0].HealthCheck.UnhealthyThreshold != 3 {
		t.Fatalf("listener: %+v", ls)
	}
	g := ls[0].Groups
	if len(g) != 2 || g[0].Name != "web-1" || g[0].Weight != 1 || g[1].Name != "web-2" || g[1].Weight != 2 {
		t.Fatalf("groups: %+v", g)
	}
	if g[1].Targets[0].Address != "10.0.0.3:30080" || g[1].Targets[1].ID != "web-d" {
		t.Fatalf("targets: %+v", g[1].Targets)
	}

	// The same state again changes nothing; removal applies an empty config.
	s.SetFleetTargets(f, []*v1alpha1.Instance{lbsynctest.Inst("web-a", "web-1", v1alpha1.PhaseReady, "10.0.0.1"), lbsynctest.Inst("web-b", "web-1", v1alpha1.PhaseTerminating, "10.0.0.2"), lbsynctest.Inst("web-c", "web-2", v1alpha1.PhaseBooting, "10.0.0.3"), lbsynctest.Inst("web-d", "web-2", v1alpha1.PhaseReady, "10.0.0.4")}, nil)
	if len(fl.applied) != 1 {
		t.Fatalf("unchanged targets were applied again")
	}
	s.RemoveFleet("web")
	if len(fl.applied) != 2 || len(fl.applied[1].Listeners) != 0 {
		t.Fatalf("RemoveFleet: %+v", fl.applied)
	}
}

func TestDrainedAndHealth(t *testing.T) {
	fl := &fakeLB{health: []lb.TargetHealth{
		{ID: "web-a", State: lb.StateHealthy}, {ID: "web-a", State: lb.StateEjected},
		{ID: "web-b", State: lb.StateDraining},
	}}
	s := New(fl, "127.0.0.1", nil)
	if s.Drained("web-b") || !s.Drained("web-z") {
		t.Fatal("Drained: a draining target is not drained; an absent one is")
	}
	h := s.Health()
	if h["web-a"] != "ejected" || h["web-b"] != "draining" {
		t.Fatalf("Health = %v, want the worst state per instance", h)
	}
}

// A rollout's weights replace the proportional ones; a revision the weights leave out gets none.
func TestRolloutWeights(t *testing.T) {
	f := &v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: "web"}, Spec: v1alpha1.FleetSpec{
		Listeners: []v1alpha1.Listener{{Name: "http", Port: 8080, InstancePort: 30080, Protocol: v1alpha1.ProtocolHTTP}},
	}}
	s := New(&fakeLB{}, "127.0.0.1", nil)
	ins := []*v1alpha1.Instance{
		lbsynctest.Inst("web-a", "web-1", v1alpha1.PhaseReady, "10.0.0.1"),
		lbsynctest.Inst("web-b", "web-1", v1alpha1.PhaseReady, "10.0.0.2"),
		lbsynctest.Inst("web-c", "web-2", v1alpha1.PhaseReady, "10.0.0.3"),
		lbsynctest.Inst("web-d", "web-3", v1alpha1.PhaseReady, "10.0.0.4"),
	}
	got := map[string]int{}
	for _, g := range s.Listeners(f, ins, map[string]int32{"web-1": 90, "web-2": 10})[0].Groups {
		got[g.Name] = g.Weight
	}
	if got["web-1"] != 90 || got["web-2"] != 10 || got["web-3"] != 0 {
		t.Fatalf("weights %v, want web-1 90, web-2 10, web-3 0", got)
	}
	got = map[string]int{}
	for _, g := range s.Listeners(f, ins, nil)[0].Groups {
		got[g.Name] = g.Weight
	}
	if got["web-1"] != 2 || got["web-2"] != 1 || got["web-3"] != 1 {
		t.Fatalf("proportional weights %v", got)
	}
}

// Warm instances are out of rotation, and every fleet listener holds requests while nothing serves.
func TestListenersWarmPoolAndHold(t *testing.T) {
	f := &v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: "web"}, Spec: v1alpha1.FleetSpec{
		Listeners: []v1alpha1.Listener{{Name: "http", Port: 8080, InstancePort: 30080, Protocol: v1alpha1.ProtocolHTTP}},
	}}
	warm := lbsynctest.Inst("web-w", "web-1", v1alpha1.PhaseReady, "10.0.0.9")
	warm.Metadata.Labels = map[string]string{controller.LabelWarm: "true"}
	s := New(&fakeLB{}, "127.0.0.1", nil)
	ls := s.Listeners(f, []*v1alpha1.Instance{lbsynctest.Inst("web-a", "web-1", v1alpha1.PhaseReady, "10.0.0.1"), warm}, nil)
	if len(ls) != 1 || len(ls[0].Groups) != 1 || len(ls[0].Groups[0].Targets) != 1 || ls[0].Groups[0].Targets[0].ID != "web-a" {
		t.Fatalf("warm instance routed: %+v", ls)
	}
	if ls[0].Hold == nil {
		t.Fatal("fleet listener does not hold requests")
	}
	if ls := s.Listeners(f, nil, nil); len(ls) != 1 || len(ls[0].Groups) != 0 || ls[0].Hold == nil {
		t.Fatalf("fleet at zero: %+v", ls)
	}
}

// A fleet with tenancy gives its listener the tenant key and tenants, and every target its tenant;
// the warm pool stays out.
func TestListenersTenancy(t *testing.T) {
	f := &v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: "saas"}, Spec: v1alpha1.FleetSpec{
		Listeners: []v1alpha1.Listener{{Name: "http", Port: 8080, InstancePort: 30080, Protocol: v1alpha1.ProtocolHTTP}},
		Tenancy: &v1alpha1.Tenancy{Key: "header:X-Tenant", Tenants: []string{"a", "b"},
			MaxInFlight: new(int32(8)), RequestsPerSecond: 500, MaxWait: &v1alpha1.Duration{Duration: 250 * time.Millisecond}},
	}}
	a := lbsynctest.Inst("saas-a", "saas-1", v1alpha1.PhaseReady, "10.0.0.1")
	a.Metadata.Labels = map[string]string{v1alpha1.LabelTenant: "a"}
	warm := lbsynctest.Inst("saas-w", "saas-1", v1alpha1.PhaseReady, "10.0.0.9")
	warm.Metadata.Labels = map[string]string{controller.LabelWarm: "true"}
	ls := New(&fakeLB{}, "127.0.0.1", nil).Listeners(f, []*v1alpha1.Instance{a, warm}, nil)
	want := &lb.Tenancy{Key: lb.TenantByHeader, Header: "X-Tenant", Tenants: []string{"a", "b"}, MaxInFlight: 8, RequestsPerSecond: 500, MaxWait: lb.Duration(250 * time.Millisecond)}
	if len(ls) != 1 || ls[0].Tenancy == nil || ls[0].Tenancy.Key != want.Key || ls[0].Tenancy.Header != want.Header || !slices.Equal(ls[0].Tenancy.Tenants, want.Tenants) ||
		ls[0].Tenancy.MaxInFlight != want.MaxInFlight || ls[0].Tenancy.RequestsPerSecond != want.RequestsPerSecond || ls[0].Tenancy.MaxWait != want.MaxWait {
		t.Fatalf("listener tenancy: %+v", ls[0].Tenancy)
	}
	if g := ls[0].Groups; len(g) != 1 || len(g[0].Targets) != 1 || g[0].Targets[0].Tenant != "a" {
		t.Fatalf("targets: %+v", g)
	}
}

// A listener the load balancer cannot bind (its port in use on the host) is reported for its fleet
// alone, and clears once the fleet's listeners are served.
func TestListenerErrorPerFleet(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := int32(taken.Addr().(*net.TCPAddr).Port)
	fleet := func(name string, port int32) *v1alpha1.Fleet {
		return &v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: name}, Spec: v1alpha1.FleetSpec{
			Listeners: []v1alpha1.Listener{{Name: "http", Port: port, InstancePort: 30080, Protocol: v1alpha1.ProtocolHTTP}},
		}}
	}
	s := New(lb.New(lb.Options{}), "127.0.0.1", nil)
	t.Cleanup(func() { s.RemoveFleet("web"); s.RemoveFleet("api") })

	s.SetFleetTargets(fleet("web", port), nil, nil)
	s.SetFleetTargets(fleet("api", 0), nil, nil)
	err = s.ListenerError("web")
	if err == nil || !strings.Contains(err.Error(), "web/http") || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("ListenerError(web) = %v, want the bind error naming web/http", err)
	}
	if err := s.ListenerError("api"); err != nil {
		t.Fatalf("ListenerError(api) = %v, want nil: its listener is served", err)
	}
	taken.Close()
	s.SetFleetTargets(fleet("web", port), nil, nil)
	if err := s.ListenerError("web"); err != nil {
		t.Fatalf("ListenerError(web) = %v once the port is free, want nil", err)
	}
}

// Sync knows the region of every instance of the fleets it was given, for the Monitor.
func TestSyncRegionOf(t *testing.T) {
	s := New(&fakeLB{}, "127.0.0.1", nil)
	f := &v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: "web"}}
	a, b := lbsynctest.Inst("web-a", "web-1", v1alpha1.PhaseReady, "10.0.0.1"), lbsynctest.Inst("web-b", "web-1", v1alpha1.PhaseBooting, "")
	a.Spec.Region, b.Spec.Region = "eu", "us"
	s.SetFleetTargets(f, []*v1alpha1.Instance{a, b}, nil)
	if s.RegionOf("web-a") != "eu" || s.RegionOf("web-b") != "us" || s.RegionOf("web-z") != "" {
		t.Fatalf("RegionOf: web-a %q, web-b %q, web-z %q", s.RegionOf("web-a"), s.RegionOf("web-b"), s.RegionOf("web-z"))
	}
	s.SetFleetTargets(f, []*v1alpha1.Instance{a}, nil)
	if s.RegionOf("web-b") != "" {
		t.Errorf("web-b left the fleet but is still in region %q", s.RegionOf("web-b"))
	}
	s.RemoveFleet("web")
	if s.RegionOf("web-a") != "" {
		t.Errorf("the fleet was removed but web-a is still in region %q", s.RegionOf("web-a"))
	}
}

func TestListenersTLS(t *testing.T) {
	f := &v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: "web"}, Spec: v1alpha1.FleetSpec{
		Listeners: []v1alpha1.Listener{
			{Name: "files", Port: 8443, InstancePort: 30080, Protocol: v1alpha1.ProtocolHTTP, TLS: &v1alpha1.ListenerTLS{CertFile: "/etc/herd/tls.crt", KeyFile: "/etc/herd/tls.key"}},
			{Name: "local", Port: 8444, InstancePort: 30080, Protocol: v1alpha1.ProtocolHTTP, TLS: &v1alpha1.ListenerTLS{LocalCA: true}},
		},
		Global: &v1alpha1.Global{Hostname: "hello.herd.test"},
	}}
	instances := []*v1alpha1.Instance{lbsynctest.Inst("web-a", "web-1", v1alpha1.PhaseReady, "10.0.0.1")}

	// Without a local CA the listener that asks for one is left out; the other is served.
	s := New(&fakeLB{}, "127.0.0.2", nil)
	ls := s.Listeners(f, instances, nil)
	if len(ls) != 1 || ls[0].Name != "web/files" || ls[0].TLS == nil || ls[0].TLS.CertFile != "/etc/herd/tls.crt" || ls[0].TLS.KeyFile != "/etc/herd/tls.key" {
		t.Fatalf("without a local CA: %+v", ls)
	}

	ca, err := localca.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s.UseLocalCA(ca)
	ls = s.Listeners(f, instances, nil)
	if len(ls) != 2 || ls[1].TLS == nil {
		t.Fatalf("with a local CA: %+v", ls)
	}
	pair, err := tls.LoadX509KeyPair(ls[1].TLS.CertFile, ls[1].TLS.KeyFile)
	if err != nil {
		t.Fatalf("the issued certificate: %v", err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	var ips []string
	for _, ip := range leaf.IPAddresses {
		ips = append(ips, ip.String())
	}
	if !slices.Contains(leaf.DNSNames, "hello.herd.test") || !slices.Contains(leaf.DNSNames, "localhost") ||
		!slices.Contains(ips, "127.0.0.2") || !slices.Contains(ips, "127.0.0.1") {
		t.Errorf("certificate for %v %v, want localhost, 127.0.0.1, the bind address 127.0.0.2 and the global hostname", leaf.DNSNames, ips)
	}
}

// A fleet's allowFrom reaches its listeners, with every fleet's instances by address as the
// callers, also those of a fleet without listeners, whose new instance is applied at once; without
// allowFrom the configuration has no callers.
func TestCallers(t *testing.T) {
	listeners := []v1alpha1.Listener{{Name: "http", Port: 8080, InstancePort: 30080, Protocol: v1alpha1.ProtocolHTTP}}
	api := &v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: "api"}, Spec: v1alpha1.FleetSpec{Listeners: listeners}}
	batch := &v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: "batch"}}
	inst := func(name, fleet, addr string) *v1alpha1.Instance {
		in := lbsynctest.Inst(name, "r1", v1alpha1.PhaseReady, addr)
		in.Spec.Fleet = fleet
		return in
	}
	fl := &fakeLB{}
	s := New(fl, "127.0.0.1", nil)
	s.SetFleetTargets(api, []*v1alpha1.Instance{inst("api-1", "api", "10.0.0.1")}, nil)
	s.SetFleetTargets(batch, []*v1alpha1.Instance{inst("batch-1", "batch", "10.0.1.1")}, nil)
	if last := fl.applied[len(fl.applied)-1]; last.Callers != nil {
		t.Errorf("without allowFrom: callers %v, want none", last.Callers)
	}

	api.Spec.Discovery = &v1alpha1.Discovery{AllowFrom: []string{"web"}}
	s.SetFleetTargets(api, []*v1alpha1.Instance{inst("api-1", "api", "10.0.0.1")}, nil)
	s.SetFleetTargets(batch, []*v1alpha1.Instance{inst("batch-1", "batch", "10.0.1.1"), inst("batch-2", "batch", "10.0.1.2")}, nil)
	last := fl.applied[len(fl.applied)-1]
	want := map[netip.Addr]string{netip.MustParseAddr("10.0.0.1"): "api", netip.MustParseAddr("10.0.1.1"): "batch", netip.MustParseAddr("10.0.1.2"): "batch"}
	if !slices.Equal(last.Listeners[0].AllowFrom, []string{"web"}) || !maps.Equal(last.Callers, want) {
		t.Errorf("allowFrom %v callers %v, want [web] and %v", last.Listeners[0].AllowFrom, last.Callers, want)
	}
}
