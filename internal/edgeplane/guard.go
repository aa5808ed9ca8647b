package edgeplane

import (
	"log/slog"
	"net/http"
	"time"

	"herd.dev/herd/internal/edge"
)

// The limits an edge listener holds its clients to: the load balancer's listeners' defaults, so that
// a request the load balancer refuses is refused at the edge too.
const (
	maxHeaderBytes = 64 << 10
	maxHeaders     = 100
	maxBodyBytes   = 32 << 20
	idleTimeout    = 2 * time.Minute
)

// readHeaderTimeout is how long a client has to send a request's headers; a variable so that a test
// of it takes less.
var readHeaderTimeout = 10 * time.Second

// serverOptions are an edge listener's server's: the engine reads request heads with the load
// balancer's rules (package h1), net/http's reader refuses most hostile requests handed over to it
// (400 for a malformed request line, header line, method or Host, differing Content-Lengths, control
// characters; 431 past maxHeaderBytes; 501 for a Transfer-Encoding other than chunked; 417 for an
// unknown Expect), the read-header timeout cuts off clients that trickle their headers, and guard adds
// the rest of the load balancer's rules for what goes through the handler.
func serverOptions(h http.Handler, log *slog.Logger) edge.ServerOptions {
	return edge.ServerOptions{Handler: guard{h}, ReadHeaderTimeout: readHeaderTimeout, IdleTimeout: idleTimeout,
		MaxHeaderBytes: maxHeaderBytes, MaxHeaders: maxHeaders, Logger: log}
}

// guard refuses what net/http's server lets through and the load balancer does not.
type guard struct{ next http.Handler }

func (g guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case len(r.Header) > maxHeaders:
		refuse(w, "too many header fields", http.StatusRequestHeaderFieldsTooLarge)
		return
	case r.ContentLength > maxBodyBytes:
		refuse(w, "request body too large", http.StatusRequestEntityTooLarge)
		return
	case r.Method == http.MethodConnect:
		refuse(w, "CONNECT is not proxied", http.StatusMethodNotAllowed)
		return
	}
	if r.ContentLength < 0 {
		r.Body = http.MaxBytesReader(w, r.Body, maxBodyBytes)
	}
	// net/http takes a request with both Content-Length and Transfer-Encoding as chunked, dropping the
	// length (RFC 9112 section 6.1), and an HTTP/1.0 request's Transfer-Encoding is ignored for its
	// length; the header is gone by now in both cases, so that such a request cannot be told from an
	// honest one. A front that framed it the other way would have sent the bytes past the body as part
	// of it: closing the connection after the answer, as section 6.1 requires, makes sure they are
	// never read as a request of their own.
	if r.ProtoMajor == 1 && (len(r.TransferEncoding) > 0 || (r.ProtoMinor == 0 && r.ContentLength != 0)) {
		w.Header().Set("Connection", "close")
	}
	g.next.ServeHTTP(w, r)
}

// refuse answers a request the edge will not serve and closes its connection, as net/http does after
// the requests it cannot parse, since what a hostile client sends next on it is not to be trusted.
func refuse(w http.ResponseWriter, why string, code int) {
	w.Header().Set("Connection", "close")
	http.Error(w, why, code)
}
