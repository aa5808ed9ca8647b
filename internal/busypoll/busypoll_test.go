//go:build linux

package busypoll

import (
	"context"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

func TestStartRefusesManyProcs(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	if stop, err := Start(50 * time.Microsecond); err != ErrNotOneProc {
		if stop != nil {
			stop()
		}
		t.Fatalf("Start with GOMAXPROCS=2: err %v, want ErrNotOneProc", err)
	}
	if running.Load() != nil {
		t.Fatal("a refused Start left a poller running")
	}
}

func TestStartRefusesBadWindow(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	if _, err := Start(0); err == nil {
		t.Fatal("Start(0) succeeded")
	}
}

// TestPollerHandsOffAndParks runs an echo exchange under the poller: the poller must find the
// network ready and hand it to the scheduler while requests flow, park when they stop, and resume
// on Activity; and every exchange must complete while it does.
func TestPollerHandsOffAndParks(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	stop, err := Start(time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if _, err := Start(time.Millisecond); err == nil {
		t.Fatal("a second Start succeeded while a poller runs")
	}

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	buf := make([]byte, 4)
	for i := range 2000 {
		Activity()
		if _, err := c.Write([]byte("ping")); err != nil {
			t.Fatalf("exchange %d: %v", i, err)
		}
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
			t.Fatalf("exchange %d: read %q, %v", i, buf, err)
		}
	}
	p := running.Load()
	if p.handoffs.Load() == 0 {
		t.Fatalf("2000 exchanges, and the poller never found the network ready (%d parks)", p.parks.Load())
	}

	// Idle: the poller gives up within its window and parks.
	parks := p.parks.Load()
	waitFor(t, "the poller to park when idle", func() bool { return p.parks.Load() > parks && p.wake.parked.Load() })
	Activity()
	waitFor(t, "Activity to resume the poller", func() bool { return !p.wake.parked.Load() })

	stop()
	if running.Load() != nil {
		t.Fatal("stop left the poller registered")
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}
