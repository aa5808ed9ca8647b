package aws_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"herd.dev/herd/internal/agent"
	"herd.dev/herd/internal/agentauth"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/provider/aws"
	"herd.dev/herd/internal/provider/aws/awstwin"
)

// agents is a twin backend whose instances are agents' ports on loopback addresses, each
// requiring its instance's credential and answering /readyz as the test sets.
type agents struct {
	t    *testing.T
	keys *agentauth.Keyring

	mu      sync.Mutex
	next    int
	readyz  map[string]string // by instance name: "ok", or the reason a real agent gives
	servers map[string]*http.Server
	down    map[string]bool
}

func (a *agents) set(name, answer string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.readyz[name] = answer
}

func (a *agents) Launch(in awstwin.Instance, _ awstwin.Image) (string, error) {
	name := in.Tags["herd.dev/instance"]
	a.mu.Lock()
	a.next++
	ip := fmt.Sprintf("127.3.%d.%d", a.next/250, 1+a.next%250)
	a.mu.Unlock()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, fmt.Sprint(agent.DefaultPort)))
	if err != nil {
		return "", err
	}
	srv := &http.Server{Handler: agentauth.Require(a.keys.Credential(name), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		answer := a.readyz[name]
		a.mu.Unlock()
		if answer != "ok" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprintln(w, answer)
	}))}
	go func() { _ = srv.Serve(ln) }()
	a.t.Cleanup(func() { srv.Close() })
	a.mu.Lock()
	a.servers[name] = srv
	a.mu.Unlock()
	return ip, nil
}

func (a *agents) Terminate(in awstwin.Instance) {
	name := in.Tags["herd.dev/instance"]
	a.mu.Lock()
	defer a.mu.Unlock()
	a.down[name] = true
	if s := a.servers[name]; s != nil {
		s.Close()
	}
}

// withAgents is a twin whose instances are agents of the backend above, the region options that
// reach it, and a provider of installation that asks those agents.
func withAgents(t *testing.T, installation string) (*agents, *awstwin.Twin, map[string]string, *aws.Provider) {
	t.Helper()
	keys, err := agentauth.NewKeyring([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	be := &agents{t: t, keys: keys, readyz: map[string]string{}, servers: map[string]*http.Server{}, down: map[string]bool{}}
	tw, opts := setup(t, awstwin.Options{Backend: be})
	p, err := aws.New(aws.Options{Installation: installation, Credentials: tw.Credentials(), StateDir: t.TempDir(),
		AgentKeys: keys, RateLimit: 200, RateBurst: 20, PollInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return be, tw, opts, p
}

// A running EC2 instance is only as ready as its agent says, asked with the instance's
// credential at its private address: Booting while the agent boots, Ready once it is, Failed with
// the agent's reason when the boot failed. Terminating the instance tears down what the twin's
// backend runs for it.
func TestReadinessComesFromTheAgent(t *testing.T) {
	be, _, opts, p := withAgents(t, "ready")
	ctx := context.Background()
	for _, name := range []string{"web-1", "web-2"} {
		be.set(name, "booting")
		if _, err := p.Create(ctx, spec(name, "web", opts)); err != nil {
			t.Fatal(err)
		}
	}
	state := func(name string) provider.Instance {
		t.Helper()
		in, err := p.Get(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return in
	}
	if in := state("web-1"); in.State != provider.StateBooting || !strings.Contains(in.Reason, "booting") {
		t.Fatalf("web-1 running on EC2 while its agent boots: %s %q, want Booting with the agent's reason", in.State, in.Reason)
	}
	be.set("web-1", "ok")
	be.set("web-2", "failed: manifest deployment/web: the API server said no")
	if in := state("web-1"); in.State != provider.StateReady {
		t.Fatalf("web-1 with its agent ready: %s %q, want Ready", in.State, in.Reason)
	}
	if in := state("web-2"); in.State != provider.StateFailed || !strings.Contains(in.Reason, "the API server said no") {
		t.Fatalf("web-2 whose agent failed: %s %q, want Failed with the agent's reason", in.State, in.Reason)
	}
	if err := p.Delete(ctx, "web-1"); err != nil {
		t.Fatal(err)
	}
	// The backend tears down on a goroutine of its own, so as not to hold up the twin.
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		be.mu.Lock()
		defer be.mu.Unlock()
		return be.down["web-1"], nil
	})
	if err != nil {
		t.Fatal("terminating web-1 did not tear down what the backend ran for it")
	}
}

// An instance registered in its target group that stops serving (its agent no longer ready) is
// taken out of the group, so that AWS's load balancer follows herd's verdict, and is registered
// again once it serves; one that never stopped stays registered all along.
func TestTargetGroupFollowsServing(t *testing.T) {
	be, tw, opts, p := withAgents(t, "follow")
	arn := tw.AddTargetGroup(ec2Region, "web", 0)
	opts["targetGroup"] = arn
	ctx := context.Background()
	for _, name := range []string{"web-1", "web-2"} {
		be.set(name, "ok")
		if _, err := p.Create(ctx, spec(name, "web", opts)); err != nil {
			t.Fatal(err)
		}
	}
	list := func(want map[string]provider.State) {
		t.Helper()
		ins, err := p.List(ctx, provider.ListOptions{Fleet: "web"})
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range ins {
			if in.State != want[in.Name] {
				t.Fatalf("%s: %s %q, want %s", in.Name, in.State, in.Reason, want[in.Name])
			}
		}
	}
	ids := live(tw)
	members := func() map[string]string { return tw.Targets(arn) }
	list(map[string]provider.State{"web-1": provider.StateReady, "web-2": provider.StateReady})
	if got := members(); got[ids["web-1"]] != awstwin.TargetHealthy || got[ids["web-2"]] != awstwin.TargetHealthy {
		t.Fatalf("both serve; the target group has %v, want both healthy", got)
	}

	be.set("web-1", "booting: the API server does not answer")
	list(map[string]provider.State{"web-1": provider.StateBooting, "web-2": provider.StateReady})
	if got := members(); got[ids["web-1"]] != "" || got[ids["web-2"]] != awstwin.TargetHealthy {
		t.Fatalf("web-1 stopped serving; the target group has %v, want only web-2 (%s)", got, ids["web-2"])
	}
	list(map[string]provider.State{"web-1": provider.StateBooting, "web-2": provider.StateReady})
	if n := tw.ELBCalls()["DeregisterTargets"]; n != 1 {
		t.Errorf("DeregisterTargets called %d times for one instance that stopped serving, listed twice; want 1", n)
	}

	be.set("web-1", "ok")
	list(map[string]provider.State{"web-1": provider.StateReady, "web-2": provider.StateReady})
	if got := members(); got[ids["web-1"]] != awstwin.TargetHealthy || got[ids["web-2"]] != awstwin.TargetHealthy {
		t.Fatalf("web-1 serves again; the target group has %v, want both healthy", got)
	}
	checkCallsAllowed(t, tw)
}
