package health

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"syscall"
	"testing"

	"herd.dev/herd/internal/promtest"
)

// network answers dials per address: "ok" connects, "refused" refuses, anything else waits for
// the probe's deadline, as a partitioned link does.
type network struct {
	mu     sync.Mutex
	answer map[string]string
	dialed []string
}

func (n *network) set(addr, a string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.answer[addr] = a
}

func (n *network) dial(ctx context.Context, _, addr string) (net.Conn, error) {
	n.mu.Lock()
	a := n.answer[addr]
	n.dialed = append(n.dialed, addr)
	n.mu.Unlock()
	switch a {
	case "ok":
		c1, c2 := net.Pipe()
		c2.Close()
		return c1, nil
	case "refused":
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

func TestThresholdsAndChanges(t *testing.T) {
	n := &network{answer: map[string]string{"10.216.0.1:8080": "ok", "10.216.0.2:9": "refused"}}
	targets := []Target{
		{Region: "eu", Address: netip.MustParseAddr("10.216.0.1"), Port: 8080},
		{Region: "us", Address: netip.MustParseAddr("10.216.0.2")}, // no listener: the fallback port
	}
	var mu sync.Mutex
	var changes []string
	c, err := New(Options{
		Targets:  func() []Target { return targets },
		Dial:     n.dial,
		OnChange: func(r string) { mu.Lock(); changes = append(changes, r); mu.Unlock() },
		Timeout:  20e6, // 20ms
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	state := func() string {
		out := ""
		for _, r := range []string{"eu", "us"} {
			if _, down := c.RegionUnreachable(r); down {
				out += r + ":down "
			} else {
				out += r + ":up "
			}
		}
		return out
	}
	steps := []struct {
		eu   string
		want string
	}{
		{"ok", "eu:up us:up "},        // a refusal is an answer
		{"cut", "eu:up us:up "},       // one failure is not enough
		{"cut", "eu:down us:up "},     // two are
		{"ok", "eu:down us:up "},      // one success is not enough
		{"cut", "eu:down us:up "},     // and a failure starts over
		{"ok", "eu:down us:up "},      //
		{"ok", "eu:up us:up "},        // two in a row are
		{"lossy", "eu:up us:up "},     // (set below: one of three dials answers)
		{"lossy", "eu:up us:up "},     //
		{"cut", "eu:up us:up "},       //
		{"ok", "eu:up us:up "},        //
		{"cut", "eu:up us:up "},       //
		{"cut", "eu:down us:up "},     //
		{"forget", "eu:up us:up "},    // a region no longer probed is not unreachable
		{"ok", "eu:up us:up "},        // and comes back with its first probe's verdict
		{"cut", "eu:up us:up "},       //
		{"cut", "eu:down us:up "},     //
		{"cut", "eu:down us:up "},     //
		{"ok", "eu:down us:up "},      //
		{"ok", "eu:up us:up "},        //
		{"refused", "eu:up us:up "},   //
		{"cut", "eu:up us:up "},       //
		{"refused", "eu:up us:up "},   //
		{"cut", "eu:up us:up "},       //
		{"cut", "eu:down us:up "},     //
		{"refused", "eu:down us:up "}, //
	}
	lossy := &lossyDial{n: n, addr: "10.216.0.1:8080"}
	for i, s := range steps {
		c.opts.Dial = n.dial
		targets = targets[:0]
		targets = append(targets, Target{Region: "eu", Address: netip.MustParseAddr("10.216.0.1"), Port: 8080}, Target{Region: "us", Address: netip.MustParseAddr("10.216.0.2")})
		switch s.eu {
		case "lossy":
			n.set("10.216.0.1:8080", "ok")
			c.opts.Dial = lossy.dial
		case "forget":
			targets = targets[1:]
		default:
			n.set("10.216.0.1:8080", s.eu)
		}
		c.ProbeAll(ctx)
		if got := state(); got != s.want {
			t.Fatalf("step %d (%s): %q, want %q", i, s.eu, got, s.want)
		}
		if why, down := c.RegionUnreachable("eu"); down && why == "" {
			t.Fatalf("step %d: unreachable without a reason", i)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	// eu went down, up, down, forgotten (up), down, up, down.
	if want := []string{"eu", "eu", "eu", "eu", "eu", "eu", "eu"}; !slices.Equal(changes, want) {
		t.Fatalf("changes %v, want %v", changes, want)
	}
	promtest.Want(t, promtest.Gather(t, c.Collector()), map[string]map[string]float64{
		"herd_region_reachable": {"region=eu": 0, "region=us": 1},
	})
}

// lossyDial lets one dial in three through, as a link that drops most packets.
// lossyDial loses two of every three dials to addr, as a lossy link does; other addresses are
// dialed as usual. Counting addr's dials alone makes one of each probe's three dials answer,
// whichever order the probes of several regions run in.
type lossyDial struct {
	mu   sync.Mutex
	i    int
	n    *network
	addr string
}

func (l *lossyDial) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if addr != l.addr {
		return l.n.dial(ctx, network, addr)
	}
	l.mu.Lock()
	l.i++
	pass := l.i%3 == 0
	l.mu.Unlock()
	if !pass {
		<-ctx.Done()
		return nil, fmt.Errorf("lost: %w", ctx.Err())
	}
	return l.n.dial(ctx, network, addr)
}

func TestNewNeedsTargetsAndDial(t *testing.T) {
	if _, err := New(Options{}); err == nil {
		t.Fatal("New without Targets and Dial succeeded")
	}
}
