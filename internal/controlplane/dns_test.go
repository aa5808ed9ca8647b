package controlplane_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"

	"herd.dev/herd/internal/controlplane"
	globaldns "herd.dev/herd/internal/global/dns"
)

// TestDNSFollowsTheStore runs herd up with --dns-zone on the fake provider: the DNS answers a
// fleet's spec.global hostname with the embedded load balancer's address, fails open while the
// fleet has fewer Ready instances than minHealthyInstances, and stops failing open once scaled
// up; both changes are events on the fleet, and GET /v1/routes says why.
func TestDNSFollowsTheStore(t *testing.T) {
	l, err := globaldns.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c, cl := inProcessWith(t, func(o *controlplane.Options) {
		o.DNS = controlplane.DNSOptions{Zone: "herd.test.", Listener: l}
	})
	applyManifest(t, cl, `apiVersion: herd.dev/v1alpha1
kind: Fleet
metadata: {name: web}
spec:
  image: sha256:0000000000000000000000000000000000000000000000000000000000000000
  replicas: {min: 1, max: 5, desired: 1}
  global: {hostname: web.herd.test, minHealthyInstances: 2}
`)
	ctx := context.Background()
	reasons := func() []string {
		evs, err := cl.ListEvents(ctx, "Fleet/web", 0)
		if err != nil {
			return nil
		}
		var out []string
		for _, e := range evs {
			out = append(out, e.Reason)
		}
		return out
	}
	answer := func() string {
		m := new(dns.Msg).SetQuestion("web.herd.test.", dns.TypeA)
		r, _, err := (&dns.Client{Timeout: time.Second}).Exchange(m, l.Addr().String())
		if err != nil {
			return err.Error()
		}
		return fmt.Sprint(dns.RcodeToString[r.Rcode], " ", r.Answer)
	}
	c.waitFor(30*time.Second, func() string {
		if !slices.Contains(reasons(), "DNSFailOpen") || answer() != "NOERROR [web.herd.test.\t5\tIN\tA\t127.0.0.1]" {
			return fmt.Sprintf("events %v, answer %s: want DNSFailOpen and 127.0.0.1", reasons(), answer())
		}
		return ""
	})
	table, err := cl.Routes(ctx)
	if err != nil || len(table.Routes) != 1 || table.Routes[0].Regions[0].Healthy {
		t.Fatalf("routes %+v, %v: want web's one region unhealthy", table, err)
	}
	t.Logf("while short of instances: %s", table.Routes[0].Regions[0].Why)

	if err := cl.Scale(ctx, "web", 2); err != nil {
		t.Fatal(err)
	}
	c.waitFor(30*time.Second, func() string {
		if !slices.Contains(reasons(), "DNSFailOpenEnded") || !slices.Contains(reasons(), "DNSRegionIn") {
			return fmt.Sprintf("events %v: want DNSFailOpenEnded and DNSRegionIn", reasons())
		}
		return ""
	})
	if got := answer(); got != "NOERROR [web.herd.test.\t5\tIN\tA\t127.0.0.1]" {
		t.Errorf("answer with a healthy region: %s", got)
	}
	if table, err = cl.Routes(ctx); err != nil || !table.Routes[0].Regions[0].Healthy {
		t.Errorf("routes %+v, %v: want web's region healthy", table, err)
	}
}
