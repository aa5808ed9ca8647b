package dns

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	"herd.dev/herd/internal/global/routes"
)

// syncBuffer is a log sink safe for the follower's goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestFollowKeepsLastRoutes: while the control plane is unreachable, the server keeps answering
// from the last routes it fetched, and picks up new ones when it is back.
func TestFollowKeepsLastRoutes(t *testing.T) {
	s, addr := startServer(t, routes.Table{}, nil)
	var down atomic.Bool
	var calls atomic.Int64
	table := testTable()
	fetch := func(context.Context) (routes.Table, error) {
		calls.Add(1)
		if down.Load() {
			return routes.Table{}, errors.New("connection refused")
		}
		return table, nil
	}
	var logs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Follow(ctx, s, fetch, 10*time.Millisecond, slog.New(slog.NewTextHandler(&logs, nil)))
	}()
	defer func() { cancel(); <-done }()

	waitFor(t, func() bool { return len(query(t, "udp", addr, "fo.herd.test.", mdns.TypeA).Answer) == 1 })
	down.Store(true)
	n := calls.Load()
	waitFor(t, func() bool { return calls.Load() > n+3 }) // several failed fetches
	mustAnswer(t, "fo A with the control plane down", query(t, "udp", addr, "fo.herd.test.", mdns.TypeA), euAddr.String())
	if got := strings.Count(logs.String(), "cannot fetch routes"); got != 1 {
		t.Errorf("%d warnings for one outage, want 1:\n%s", got, logs.String())
	}

	table = withRegions(testTable(), "fo.herd.test", region("eu", false, euAddr), region("us", true, usAddr))
	down.Store(false)
	waitFor(t, func() bool {
		a := addrs(query(t, "udp", addr, "fo.herd.test.", mdns.TypeA))
		return len(a) == 1 && a[0] == usAddr.String()
	})
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
