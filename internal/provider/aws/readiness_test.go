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

// A running EC2 instance is only as ready as its agent says, asked with the instance's
// credential at its private address: Booting while the agent boots, Ready once it is, Failed with
// the agent's reason when the boot failed. Terminating the instance tears down what the twin's
// backend runs for it.
func TestReadinessComesFromTheAgent(t *testing.T) {
	keys, err := agentauth.NewKeyring([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	be := &agents{t: t, keys: keys, readyz: map[string]string{}, servers: map[string]*http.Server{}, down: map[string]bool{}}
	tw, opts := setup(t, awstwin.Options{Backend: be})
	p, err := aws.New(aws.Options{Installation: "ready", Credentials: tw.Credentials(), StateDir: t.TempDir(),
		AgentKeys: keys, RateLimit: 200, RateBurst: 20, PollInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
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
	deadline := time.Now().Add(5 * time.Second)
	for {
		be.mu.Lock()
		down := be.down["web-1"]
		be.mu.Unlock()
		if down {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("terminating web-1 did not tear down what the backend ran for it")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
