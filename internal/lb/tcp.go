package lb

import (
	"context"
	"io"
	"net"
	"time"
)

// proxyTCP connects a client to one target and copies bytes both ways until both sides are done. A
// target that cannot be reached is ejected and, within the retry budget, another one is tried.
func (l *listener) proxyTCP(client net.Conn) {
	defer client.Close()
	start := time.Now()
	st := l.state.Load()
	if st.refusesConn(client) {
		l.stats.observe(Class4xx, 0)
		return
	}
	l.budget.deposit()
	var tried *target
	var backend net.Conn
	var t *target
	for {
		t = st.routes.pick(&pickKey{}, tried)
		if t == nil {
			l.stats.observe(Class5xx, time.Since(start))
			return
		}
		t.stats.inFlight.Add(1)
		c, err := t.dial(context.Background(), st.cfg.Timeouts.Connect.D())
		if err == nil {
			backend = c
			break
		}
		t.stats.inFlight.Add(-1)
		t.setError(err)
		t.observe(0, err, false, st.threshold5xx)
		if tried != nil || !st.retry || !l.budget.take() {
			t.stats.observe(Class5xx, time.Since(start))
			return
		}
		t.stats.retries.Add(1)
		tried = t
	}
	defer t.stats.inFlight.Add(-1)
	defer backend.Close()
	t.stats.observe(Class2xx, time.Since(start))
	t.observe(200, nil, false, st.threshold5xx)

	// Copy between the raw TCP connections so the kernel can splice; closes still go through the wrappers.
	rawClient, rawBackend := unwrap(client), unwrap(backend)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(rawBackend, rawClient)
		closeWrite(rawBackend)
	}()
	_, err := io.Copy(rawClient, rawBackend)
	closeWrite(rawClient)
	if err == nil {
		// The target is done; give the client the idle timeout to finish its side.
		select {
		case <-done:
			return
		case <-time.After(st.cfg.Timeouts.Idle.D()):
		}
	}
	// Tear down both so the other copy ends too.
	client.Close()
	backend.Close()
	<-done
}

func unwrap(c net.Conn) net.Conn {
	switch v := c.(type) {
	case *clientConn:
		return v.Conn
	case *trackedConn:
		return v.Conn
	}
	return c
}

// closeWrite passes a half-close on, so protocols that signal the end of a request by shutting down
// their writing side still work.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	} else {
		_ = c.Close()
	}
}
