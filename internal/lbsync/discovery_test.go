package lbsync

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/freeport"
	"herd.dev/herd/internal/lb"
	"herd.dev/herd/internal/lbsync/lbsynctest"
)

// publishedFleet is fleet name with a tcp listener on tcpPort first, then an http one on
// httpPort, published (defaults applied) in region eu.
func publishedFleet(name string, httpPort, tcpPort int32) *v1alpha1.Fleet {
	f := &v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: name}, Spec: v1alpha1.FleetSpec{
		Listeners: []v1alpha1.Listener{
			{Name: "tcp", Port: tcpPort, InstancePort: 30081, Protocol: v1alpha1.ProtocolTCP},
			{Name: "http", Port: httpPort, InstancePort: 30080},
		},
		Regions: []v1alpha1.Region{{Name: "eu"}},
	}}
	v1alpha1.SetFleetDefaults(f, "local")
	return f
}

// herd up's own load balancer on every address gets one host router per region bridge with
// instances, routing each published fleet's name to its first http listener; a fleet no longer
// published leaves it; on a loopback address there is none.
func TestDiscoveryRouter(t *testing.T) {
	fl := &fakeLB{}
	s := New(fl, "0.0.0.0", nil)
	s.SetDiscovery(Discovery{Zone: "herd.internal.", Port: 80, Gateway: func(region string) (netip.Addr, bool) {
		return netip.MustParseAddr("10.213.1.1"), region == "eu"
	}})
	api := publishedFleet("api", 8081, 8082)
	inst := lbsynctest.Inst("api-a", "api-1", v1alpha1.PhaseReady, "10.213.1.10")
	inst.Spec.Region = "eu"
	s.SetFleetTargets(api, []*v1alpha1.Instance{inst}, nil)
	last := fl.applied[len(fl.applied)-1]
	r := last.Listeners[len(last.Listeners)-1]
	want := []lb.HostRoute{{Host: "api.herd.internal", Listener: "api/http"}}
	if r.Name != "discovery@10.213.1.1" || r.Address != "10.213.1.1:80" || len(r.Routes) != 1 || r.Routes[0] != want[0] {
		t.Fatalf("router %+v, want %s:80 routing %+v", r, "10.213.1.1", want)
	}

	off := false
	api.Spec.Discovery.Enabled = &off
	s.SetFleetTargets(api, []*v1alpha1.Instance{inst}, nil)
	for _, l := range fl.applied[len(fl.applied)-1].Listeners {
		if len(l.Routes) > 0 {
			t.Errorf("a fleet no longer published still routed: %+v", l)
		}
	}

	loop := &fakeLB{}
	s = New(loop, "127.0.0.1", nil)
	s.SetDiscovery(Discovery{Zone: "herd.internal.", Port: 80})
	s.SetFleetTargets(publishedFleet("api", 8081, 8082), []*v1alpha1.Instance{inst}, nil)
	for _, l := range loop.applied[0].Listeners {
		if len(l.Routes) > 0 {
			t.Errorf("a router on loopback, which no instance reaches: %+v", l)
		}
	}
}

// When the port of the names is taken on the host, the fleets' listeners are served all the same,
// and the names alone are not, with an error naming the flag; once it is free, they are.
func TestDiscoveryRouterPortTaken(t *testing.T) {
	hello := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "api") }))
	t.Cleanup(hello.Close)
	taken, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(freeport.TCP(t)))
	if err != nil {
		t.Fatal(err)
	}
	port := taken.Addr().(*net.TCPAddr).Port
	balancer := lb.New(lb.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- balancer.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	var logs strings.Builder
	s := New(balancer, "0.0.0.0", slog.New(slog.NewTextHandler(&logs, nil)))
	s.SetDiscovery(Discovery{Zone: "herd.internal.", Port: port, Gateway: func(string) (netip.Addr, bool) {
		return netip.MustParseAddr("127.0.0.1"), true
	}})
	api := publishedFleet("api", int32(freeport.TCP(t)), int32(freeport.TCP(t)))
	api.Spec.Listeners[1].InstancePort = int32(hello.Listener.Addr().(*net.TCPAddr).Port)
	api.Spec.HealthCheck.Port = api.Spec.Listeners[1].InstancePort
	inst := lbsynctest.Inst("api-a", "api-1", v1alpha1.PhaseReady, "127.0.0.1")
	inst.Spec.Region = "eu"
	s.SetFleetTargets(api, []*v1alpha1.Instance{inst}, nil)
	if err := s.ListenerError("api"); err != nil || balancer.Addr("api/http") == nil {
		t.Fatalf("api's listener with the names' port taken: %v; want it served", err)
	}
	if !strings.Contains(logs.String(), PortFlag) || balancer.Addr("discovery@127.0.0.1") != nil {
		t.Fatalf("port %d taken: router %v, log %q; want no router and an error naming %s", port, balancer.Addr("discovery@127.0.0.1"), logs.String(), PortFlag)
	}

	taken.Close()
	inst2 := lbsynctest.Inst("api-b", "api-1", v1alpha1.PhaseBooting, "127.0.0.1")
	inst2.Spec.Region = "eu"
	s.SetFleetTargets(api, []*v1alpha1.Instance{inst, inst2}, nil)
	if balancer.Addr("discovery@127.0.0.1") == nil {
		t.Fatal("no router once the port is free")
	}
	req, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1:"+strconv.Itoa(port)+"/", nil)
	req.Host = "API.herd.internal"
	var last string
	err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		last = resp.Status + " " + string(body)
		return resp.StatusCode == http.StatusOK && string(body) == "api", nil
	})
	if err != nil {
		t.Fatalf("GET with Host API.herd.internal on the router: %s", last)
	}
}
