package lb

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"time"
)

// checker probes targets. It is shared by all targets so probes reuse keep-alive connections.
type checker struct {
	http1 *http.Client
	h2c   *http.Client
}

func newChecker() *checker {
	mk := func(h2c bool) *http.Client {
		tr := &http.Transport{
			MaxIdleConnsPerHost: 1,
			IdleConnTimeout:     30 * time.Second,
			DisableCompression:  true,
		}
		tr.Protocols = new(http.Protocols)
		if h2c {
			tr.Protocols.SetUnencryptedHTTP2(true)
		} else {
			tr.Protocols.SetHTTP1(true)
		}
		return &http.Client{
			Transport: tr,
			// A redirect is an answer: 3xx passes without following it.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	return &checker{http1: mk(false), h2c: mk(true)}
}

func (c *checker) close() {
	c.http1.CloseIdleConnections()
	c.h2c.CloseIdleConnections()
}

// startChecks (re)configures the target's active checks, keeping its current verdict; they run only
// once run is true (the load balancer started). With checks disabled the target counts as healthy.
func (t *target) startChecks(c *checker, hc HealthCheck, backend BackendProtocol, run bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ejectCfg = hc
	same := t.checkCfg == hc && t.checkBackend == backend
	t.checkCfg, t.checkBackend = hc, backend
	if t.stopCheck != nil {
		if same {
			return
		}
		t.stopCheck()
		t.stopCheck = nil
	}
	if hc.Disabled {
		t.checked.Store(true)
		t.healthy.Store(true)
		t.noteStateLocked()
		return
	}
	if run {
		t.launchChecksLocked(c)
	}
}

// resumeChecks starts the configured checks of a target applied before the load balancer started.
func (t *target) resumeChecks(c *checker) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopCheck == nil && !t.checkCfg.Disabled {
		t.launchChecksLocked(c)
	}
}

func (t *target) launchChecksLocked(c *checker) {
	ctx, cancel := context.WithCancel(context.Background())
	t.stopCheck = cancel
	client := c.http1
	if t.checkBackend == BackendH2C {
		client = c.h2c
	}
	go t.runChecks(ctx, client, t.checkCfg)
}

func (t *target) runChecks(ctx context.Context, client *http.Client, hc HealthCheck) {
	tick := time.NewTicker(hc.Interval.D())
	defer tick.Stop()
	var passes, fails int
	for {
		err := t.probe(ctx, client, hc)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			passes, fails = passes+1, 0
		} else {
			passes, fails = 0, fails+1
			t.setError(err)
		}
		t.judge(err, passes, fails, hc)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// judge turns probe results into the healthy flag: the first probe decides, then thresholds apply.
func (t *target) judge(err error, passes, fails int, hc HealthCheck) {
	was := t.healthy.Load()
	now := was
	switch {
	case !t.checked.Load():
		now = err == nil
	case was && fails >= hc.UnhealthyThreshold:
		now = false
	case !was && passes >= hc.HealthyThreshold:
		now = true
	}
	t.healthy.Store(now)
	if was && !now && hc.CloseOnUnhealthy {
		// Requests waiting on the target would wait out their timeouts: break them off, so the
		// proxy core retries the idempotent ones on another target now.
		t.flushH1()
		t.conns.closeAll()
	}
	first := t.checked.CompareAndSwap(false, true)
	t.mu.Lock()
	t.noteStateLocked()
	t.mu.Unlock()
	switch {
	case now && (!was || first):
		t.log.Info("target healthy")
	case !now && (was || first):
		t.log.Warn("target unhealthy", "error", err)
	}
}

// measureRTT folds the kernel's round-trip time of a connection to the target into the target's.
func (t *target) measureRTT(c net.Conn) {
	d, ok := socketRTT(c)
	if !ok {
		return
	}
	old := t.rtt.Load()
	if old != 0 {
		d = time.Duration(old) + time.Duration(targetRTTWeight*float64(d-time.Duration(old)))
	}
	t.rtt.Store(int64(d))
}

// targetRTTWeight is the weight of a new probe's round trip in a target's moving average: enough to
// follow a region whose distance changed within a few probes, not so much that one slow handshake
// moves traffic.
const targetRTTWeight = 0.3

func (t *target) probe(ctx context.Context, client *http.Client, hc HealthCheck) error {
	ctx, cancel := context.WithTimeout(ctx, hc.Timeout.D())
	defer cancel()
	addr := t.key.addr
	if hc.Port != 0 {
		host, _, _ := net.SplitHostPort(addr)
		addr = net.JoinHostPort(host, strconv.Itoa(hc.Port))
	}
	if hc.Path == "" {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return fmt.Errorf("health check: %w", err)
		}
		t.measureRTT(c) // the handshake's round trip
		return c.Close()
	}
	// The probe's connection tells the target's round-trip time (GroupNearest): a kept-alive one
	// carries the kernel's average over every probe so far.
	var conn net.Conn
	trace := &httptrace.ClientTrace{GotConn: func(ci httptrace.GotConnInfo) { conn = ci.Conn }}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodGet, "http://"+addr+hc.Path, nil)
	if err != nil {
		return fmt.Errorf("health check: %w", err)
	}
	req.Header.Set("User-Agent", "herd-lb-health-check")
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("health check: %w", err)
	}
	if conn != nil {
		t.measureRTT(conn)
	}
	// Drain a little so the connection can be reused, but never read a huge body.
	_, _ = io.CopyN(io.Discard, resp.Body, 4096)
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 399 {
		return fmt.Errorf("health check: GET %s answered %d", hc.Path, resp.StatusCode)
	}
	return nil
}
