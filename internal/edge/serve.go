package edge

import (
	"io"
	"net/http"
	"strconv"
	"time"
)

// serveObject answers r from a stored response. A 200 goes through http.ServeContent, which
// answers the client's conditional request with 304 (RFC 9110 section 13), a Range request with 206,
// and HEAD without a body, from the stored ETag, Last-Modified and body.
func (e *Edge) serveObject(w http.ResponseWriter, r *http.Request, o *object, now time.Time, xcache string) {
	h := w.Header()
	o.setFields(h)
	h.Set("Age", strconv.FormatInt(int64(o.age(now)/time.Second), 10))
	h.Set("X-Cache", xcache)
	h.Set("Content-Length", strconv.Itoa(o.bodyLen()))
	if o.status != http.StatusOK {
		w.WriteHeader(int(o.status))
		if r.Method != http.MethodHead {
			e.count(o.writeBody(w))
		}
		return
	}
	if !conditionalOrRange(r.Header) {
		// Nothing for ServeContent to decide: the stored response as it is.
		h["Accept-Ranges"] = acceptRanges
		w.WriteHeader(http.StatusOK)
		if r.Method != http.MethodHead {
			e.count(o.writeBody(w))
		}
		return
	}
	if _, ok := h["Content-Type"]; !ok {
		h["Content-Type"] = nil // the origin sent none: do not make one up by sniffing
	}
	modTime, _ := httpDate(h.Get("Last-Modified"))
	cw := &countingWriter{ResponseWriter: w}
	http.ServeContent(cw, r, "", modTime, o.bodyReader())
	e.metrics.bytesServed.Add(float64(cw.n))
}

// acceptRanges is the Accept-Ranges of a stored 200, shared by every hit.
var acceptRanges = []string{"bytes"}

// conditionalOrRange reports whether a request has a precondition or a Range, which ServeContent
// answers from the stored validators and body.
func conditionalOrRange(h http.Header) bool {
	for _, name := range conditionalHeaders {
		if _, ok := h[name]; ok {
			return true
		}
	}
	return false
}

// stream copies a response the edge does not store to the client, starting with the body bytes
// already read. A body that breaks midway aborts the client's connection, so that the client sees
// an error rather than a short response that looks whole.
func (e *Edge) stream(w http.ResponseWriter, r *http.Request, resp *http.Response, prefix []byte, xcache string) {
	// The origin's hop-by-hop fields go before the copy, so that those the client's connection has
	// already been given (the listener's Connection: close) are kept.
	dropHop(resp.Header)
	h := w.Header()
	for k, vs := range resp.Header {
		h[k] = vs
	}
	h.Set("X-Cache", xcache)
	w.WriteHeader(resp.StatusCode)
	if r.Method == http.MethodHead {
		return
	}
	e.count(w.Write(prefix))
	n, err := io.Copy(w, resp.Body)
	e.metrics.bytesServed.Add(float64(n))
	if err != nil {
		e.log.Warn("origin response broke while streaming", "err", err)
		panic(http.ErrAbortHandler)
	}
}

func (e *Edge) count(n int, _ error) {
	e.metrics.bytesServed.Add(float64(n))
}

// countingWriter counts the body bytes written through it.
type countingWriter struct {
	http.ResponseWriter
	n int
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.ResponseWriter.Write(p)
	c.n += n
	return n, err
}

// refreshed is the stored object after a 304: its fields updated with the 304's (RFC 9111 section
// 4.3.4) except those that describe the body, and its age restarted from this exchange.
func (o *object) refreshed(h http.Header, reqTime, respTime time.Time, p Policy) *object {
	header := o.header() // without an Age: the 304's, if it has one, is the one that counts
	fresh := h.Clone()
	dropHop(fresh)
	for _, name := range []string{"Content-Length", "Content-Encoding", "Content-Range", "Content-Type"} {
		fresh.Del(name)
	}
	for k, vs := range fresh {
		header[k] = vs
	}
	life, _ := freshnessLifetime(int(o.status), header, parseCacheControl(header), respTime, p)
	return newObject(int(o.status), header, o.body(), reqTime, respTime, life)
}
