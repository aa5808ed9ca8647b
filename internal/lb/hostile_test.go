package lb

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"
)

// stray is what a misbehaving target sends beyond its answer: a whole response of its own, so that a
// proxy reading it as the answer to the next request would serve it to whoever sent that request.
const stray = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Stray: 1\r\n\r\nstray"

// hostileCase is one way a target misbehaves on the first client's request.
type hostileCase struct {
	name   string
	method string
	// onAccept is written on the first connection as soon as it is accepted, before any request.
	onAccept string
	// answer is the answer to the first client's request; empty means an honest one.
	answer string
	// late is written once the first client holds its answer, so that it reaches the proxy after the
	// proxy has finished with the response.
	late string
}

var hostileCases = []hostileCase{
	{name: "body after a HEAD response", method: http.MethodHead,
		answer: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", late: stray},
	{name: "body after a HEAD response in the same write", method: http.MethodHead,
		answer: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n" + stray},
	{name: "bytes past Content-Length", answer: "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\none", late: stray},
	{name: "bytes past Content-Length in the same write", answer: "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\none" + stray},
	{name: "body after 204", answer: "HTTP/1.1 204 No Content\r\n\r\n", late: stray},
	{name: "body after 304", answer: "HTTP/1.1 304 Not Modified\r\n\r\n", late: stray},
	{name: "bytes after the chunked terminator",
		answer: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\none\r\n0\r\n\r\n", late: stray},
	{name: "bytes after chunked trailers",
		answer: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n3\r\none\r\n0\r\nX-T: 1\r\n\r\n" + stray},
	{name: "two answers to one request", late: stray},
	{name: "interim answer after the final one", late: "HTTP/1.1 100 Continue\r\n\r\n" + stray},
	{name: "unsolicited answer before any request", onAccept: stray},
}

// hostileTarget is a raw HTTP/1.1 target that answers each request with the X-Client header it carries,
// except the first client's ("one"), which it answers as its case says.
type hostileTarget struct {
	ln       net.Listener
	tc       hostileCase
	release  chan struct{} // closed by the test once the first client has its answer
	oneDone  chan struct{} // closed once the target is done with the first client's connection's misdeeds
	oneEnded chan struct{} // closed when the connection that carried the first client's request ends
	once     sync.Once
	endOnce  sync.Once

	mu       sync.Mutex
	accepted int
	conns    []net.Conn
}

func newHostileTarget(t *testing.T, tc hostileCase) *hostileTarget {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &hostileTarget{ln: ln, tc: tc, release: make(chan struct{}), oneDone: make(chan struct{}), oneEnded: make(chan struct{})}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		h.mu.Lock()
		for _, c := range h.conns {
			c.Close()
		}
		h.mu.Unlock()
		h.once.Do(func() { close(h.oneDone) })
		select {
		case <-h.release:
		default:
			close(h.release)
		}
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { h.serve(c) })
		}
	})
	return h
}

func (h *hostileTarget) serve(c net.Conn) {
	var sawOne bool
	defer func() {
		c.Close()
		if sawOne {
			h.endOnce.Do(func() { close(h.oneEnded) })
		}
	}()
	h.mu.Lock()
	h.accepted++
	h.conns = append(h.conns, c)
	first := h.accepted == 1
	h.mu.Unlock()
	if first && h.tc.onAccept != "" {
		io.WriteString(c, h.tc.onAccept)
		sawOne = true // the misdeed is done on this connection, whatever the proxy sends on it
		h.once.Do(func() { close(h.oneDone) })
	}
	br := bufio.NewReader(c)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		io.Copy(io.Discard, req.Body)
		id := req.Header.Get("X-Client")
		if id != "one" {
			body := id
			if req.Method == http.MethodHead {
				body = ""
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: "+strconv.Itoa(len(id))+"\r\n\r\n"+body)
			continue
		}
		sawOne = true
		answer := h.tc.answer
		if answer == "" {
			answer = "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\none"
		}
		io.WriteString(c, answer)
		if h.tc.late != "" {
			<-h.release
			io.WriteString(c, h.tc.late)
		}
		h.once.Do(func() { close(h.oneDone) })
	}
}

// TestMisbehavingTargetNeverAnswersAnotherRequest checks that the bytes a target sends beyond what its
// answer's framing allows never reach another client: the connection that carried them is closed, not
// reused, and the next client gets its own answer.
func TestMisbehavingTargetNeverAnswersAnotherRequest(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e Engine) {
		for _, tc := range hostileCases {
			t.Run(tc.name, func(t *testing.T) {
				target := newHostileTarget(t, tc)
				l := httpListener(TargetGroup{Name: "r1", Targets: []Target{{ID: "evil", Address: target.ln.Addr().String()}}})
				l.HealthCheck = HealthCheck{Disabled: true}
				lb := startLB(t, e, Config{Listeners: []Listener{l}})
				waitHealthy(t, lb, 1)

				// The first client's answer may be the target's lie (an unsolicited answer that arrived
				// first is indistinguishable from a real one); only the next client matters here.
				method := tc.method
				if method == "" {
					method = http.MethodGet
				}
				clientDo(t, method, url(lb, "/"), "one")
				close(target.release)
				select {
				case <-target.oneDone:
				case <-time.After(10 * time.Second):
					t.Fatal("the target never finished with the first request")
				}
				if e == EngineNetHTTP {
					// net/http's transport drops a connection with unsolicited bytes from its read loop,
					// which runs on its own: wait until it has, as a client arriving later would.
					select {
					case <-target.oneEnded:
					case <-time.After(10 * time.Second):
						t.Fatal("the proxy kept the connection that received stray bytes")
					}
				}
				code, body, stray := clientDo(t, http.MethodGet, url(lb, "/"), "two")
				if code != http.StatusOK || body != "two" || stray {
					t.Fatalf("second client got %d %q (stray header %v), want 200 \"two\"", code, body, stray)
				}
			})
		}
	})
}

// clientDo sends one request as a new client, on its own connection, and returns the status, the body
// and whether the answer carried the stray answer's header. A failed request counts as status 0.
func clientDo(t *testing.T, method, u, id string) (int, string, bool) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	req, _ := http.NewRequest(method, u, nil)
	req.Header.Set("X-Client", id)
	resp, err := c.Do(req)
	if err != nil {
		t.Logf("client %s: %v", id, err)
		return 0, "", false
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), resp.Header.Get("X-Stray") != ""
}
