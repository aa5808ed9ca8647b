package lb

import (
	"bufio"
	"bytes"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"herd.dev/herd/internal/h1"
)

// FuzzH1ParserVsNetHTTP reads the same bytes as a request head with the fast engine's parser and with
// net/http's server (the other engine). Where net/http refuses a request, the fast engine must refuse it
// too; where both take it, they must agree on method, target, version, Host and how the body is framed.
// A disagreement there is how requests are smuggled past proxies. The fast engine may refuse more than
// net/http: see fastOnlyRefusal for what it refuses on purpose.
// Run: go test ./internal/lb -run '^$' -fuzz FuzzH1ParserVsNetHTTP -fuzztime 3m
func FuzzH1ParserVsNetHTTP(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 01\r\n\r\nx",
		"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: +1\r\n\r\nx",
		"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a b\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\n X-Folded: 1\r\n\r\n",
		"GET / HTTP/1.1\nHost: a\n\n",
		"GET  / HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET / HTTP/1.1\r\nHost : a\r\n\r\n",
		"GET http://a@b/ HTTP/1.1\r\nHost: c\r\n\r\n",
		"GET http:/// HTTP/1.1\r\nHost: c\r\n\r\n",
		"GET /a#b HTTP/1.1\r\nHost: c\r\n\r\n",
		"GET http://a#b/ HTTP/1.1\r\nHost: c\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	ref := newNetHTTPReader(f)
	st := &listenerState{
		cfg:     Listener{Limits: Limits{MaxHeaderBytes: 1 << 20}},
		routes:  &routes{},
		maxBody: 1 << 40, maxHeaders: 1 << 10,
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		h := &h1conn{br: bufio.NewReaderSize(bytes.NewReader(raw), h1BufSize)}
		fastErr := h.readRequest(st)
		if fastErr == nil && h.req.h2Preface {
			return // handed to net/http's HTTP/2 server as it is
		}
		want, netErr := ref.read(raw)
		if netErr == errAnsweredItself {
			return // taken, but not to be compared
		}
		switch {
		case fastErr != nil && netErr != nil:
			return
		case fastErr != nil:
			if why := fastOnlyRefusal(raw, want); why != "" {
				return
			}
			t.Fatalf("only the fast engine refuses it (%v), net/http reads %+v\ninput: %q", fastErr, want, raw)
		case netErr != nil:
			if why := netOnlyRefusal(raw); why != "" {
				return
			}
			t.Fatalf("only net/http refuses it (%v)\ninput: %q", netErr, raw)
		}
		if got := fastView(&h.req); got != want {
			t.Fatalf("the engines read it differently:\nfast:     %+v\nnet/http: %+v\ninput: %q", got, want, raw)
		}
	})
}

// reqView is what both engines must agree on in a request head.
type reqView struct {
	method, target, host string
	minor                int
	chunked              bool
	length               int64 // of the body when not chunked
}

// fastView is the fast engine's view of a parsed request: the target as the request line has it, the
// Host it forwards.
func fastView(r *reqHead) reqView {
	line := r.raw[:bytes.IndexByte(r.raw, '\n')]
	if len(bytes.TrimRight(line, "\r")) == 0 { // the one empty line tolerated before a request
		rest := r.raw[len(line)+1:]
		line = rest[:bytes.IndexByte(rest, '\n')]
	}
	line = bytes.TrimRight(line, "\r")
	v := reqView{
		method: string(r.method.in(r.raw)),
		target: string(line[bytes.IndexByte(line, ' ')+1 : bytes.LastIndexByte(line, ' ')]),
		minor:  r.minor, chunked: r.Chunked, length: max(r.ContentLength, 0),
	}
	if r.Chunked {
		v.length = -1
	}
	switch {
	case r.hasAbsHost:
		v.host = string(r.absHost.in(r.raw))
	default:
		for _, hl := range r.hdrs {
			if h1.EqFold(hl.name.in(r.raw), "host") {
				_, vs, ve, _ := h1.SplitField(hl.line.in(r.raw))
				v.host = string(hl.line.in(r.raw)[vs:ve])
			}
		}
	}
	return v
}

// fastOnlyRefusal says why the fast engine refuses, on purpose, a request net/http's server reads, or ""
// if it should not.
func fastOnlyRefusal(raw []byte, nv reqView) string {
	head := strings.ToLower(string(raw[:max(bytes.Index(raw, []byte("\r\n\r\n")), bytes.Index(raw, []byte("\n\n")), 0)]))
	switch {
	case nv.method == http.MethodConnect:
		return "CONNECT is not proxied (405)"
	case strings.Contains(head, "\nexpect:") || strings.Contains(head, "\nexpect :"):
		return "an Expect other than 100-continue is refused (417); net/http leaves it to the handler"
	case nv.chunked && strings.Contains(head, "\ncontent-length:"):
		return "Content-Length with Transfer-Encoding is refused (400); net/http drops the length, as RFC 9112 section 6.3 allows an intermediary"
	case strings.Count(head, "\ncontent-length:") > 1:
		return "repeated Content-Length is refused (400) even when the values agree; net/http merges them"
	case nv.minor == 0 && strings.Contains(head, "\ntransfer-encoding:"):
		return "Transfer-Encoding in HTTP/1.0 is refused (400); net/http ignores it and frames by Content-Length"
	case !strings.HasPrefix(nv.target, "/") && nv.target != "*" && !h1.HasPrefixFold([]byte(nv.target), "http://") &&
		!h1.HasPrefixFold([]byte(nv.target), "https://"):
		return "a target in neither origin, asterisk nor http(s) absolute form is refused (400)"
	case !strings.HasPrefix(nv.target, "/") && nv.target != "*" && !h1.ValidAuthority([]byte(nv.host)):
		return "an absolute-form target whose authority is not host[:port] of RFC 3986 bytes, without percent-encoding, is refused (400)"
	case strings.Contains(authorityOf(nv.target), "%"):
		return "percent-encoding in an absolute-form target's authority (user info included) is refused (400)"
	case nv.target == "*" && nv.method != http.MethodOptions:
		return "* outside OPTIONS is refused (400)"
	case bytes.Contains(raw, []byte("\n ")) || bytes.Contains(raw, []byte("\n\t")):
		return "obsolete line folding is refused (400), as RFC 9112 section 5.2 allows; net/http unfolds it"
	case nv.minor > 1:
		return "HTTP/1.2 and later minors are refused (505); net/http serves them as HTTP/1.1"
	}
	return ""
}

// authorityOf returns the authority of an absolute-form target, or "".
func authorityOf(target string) string {
	_, rest, ok := strings.Cut(target, "://")
	if !ok || strings.HasPrefix(target, "/") {
		return ""
	}
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		rest = rest[:i]
	}
	return rest
}

// netOnlyRefusal says why the fast engine may take a request net/http's server refuses, or "".
func netOnlyRefusal(raw []byte) string {
	if bytes.HasPrefix(raw, []byte("\r\n")) || bytes.HasPrefix(raw, []byte("\n")) {
		return "one empty line before a request is tolerated (RFC 9112 section 2.2); net/http refuses it"
	}
	return ""
}

// netHTTPReader reads request heads with a real net/http server, whose checks go beyond
// http.ReadRequest (Host is required and validated, header values are checked).
type netHTTPReader struct {
	conns *h1.ConnQueue
	got   chan *http.Request
}

func newNetHTTPReader(f *testing.F) *netHTTPReader {
	r := &netHTTPReader{got: make(chan *http.Request, 1)}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			r.got <- req
			w.Header().Set("Connection", "close")
		}),
		MaxHeaderBytes: 1 << 20,
	}
	srv.SetKeepAlivesEnabled(false)
	ln := h1.NewConnQueue(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 80})
	r.conns = ln
	go srv.Serve(ln)
	f.Cleanup(func() { srv.Close() })
	return r
}

var (
	errNetHTTPRefused = &httpError{Code: 400, Why: "net/http refused the request"}
	errAnsweredItself = &httpError{Code: 200, Why: "net/http answered the request itself"}
)

// read serves raw to the server, as one client connection that ends after it, and returns the server's
// view of the first request, or an error when the server refused it (or waited for more).
func (r *netHTTPReader) read(raw []byte) (reqView, error) {
	c := &endConn{fakeConn: fakeConn{in: bytes.NewReader(raw), out: &bytes.Buffer{}}, closed: make(chan struct{})}
	r.conns.Put(c)
	select {
	case <-c.closed:
	case <-time.After(10 * time.Second):
		panic("net/http never closed the connection")
	}
	if bytes.HasPrefix(raw, []byte("OPTIONS * ")) && bytes.Contains(c.out.Bytes(), []byte(" 200 OK\r\n")) {
		// net/http's server answers OPTIONS * itself, without calling the handler.
		return reqView{method: http.MethodOptions, target: "*"}, errAnsweredItself
	}
	select {
	case req := <-r.got:
		v := reqView{method: req.Method, target: req.RequestURI, host: req.Host, minor: req.ProtoMinor, length: req.ContentLength}
		if len(req.TransferEncoding) > 0 {
			v.chunked, v.length = true, -1
		}
		return v, nil
	default:
		return reqView{}, errNetHTTPRefused
	}
}

// endConn is a fakeConn that tells when it is closed.
type endConn struct {
	fakeConn
	once   sync.Once
	closed chan struct{}
}

func (c *endConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return nil
}
