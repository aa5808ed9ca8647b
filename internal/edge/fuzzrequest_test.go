package edge

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"
)

// FuzzRequestHeaders feeds arbitrary client fields (Cache-Control, Pragma, Accept-Encoding, Range,
// If-Range, If-None-Match, If-Modified-Since) through the request-side parsers and the answer from a
// stored object: they must not panic, a coding is only one the edge makes, an answer is one the
// standard allows with a body taken from the stored one, and the stored object is left as it was.
func FuzzRequestHeaders(f *testing.F) {
	f.Add("max-age=0, max-stale", "no-cache", "br;q=0.5, gzip;q=1", "bytes=0-3", "", `"v1"`, "")
	f.Add("", "no-cache", "*;q=0, identity", "bytes=2-1,5-", `"v1"`, "", "Mon, 02 Jan 2006 15:04:05 GMT")
	f.Add("min-fresh=99999999999999999999", "", "gzip;q=nan, x-gzip", "bytes=-1", "garbage", "*", "garbage")
	f.Fuzz(func(t *testing.T, cc, pragma, accept, rng, ifRange, inm, ims string) {
		r := httptest.NewRequest(http.MethodGet, "/o", nil)
		for name, v := range map[string]string{"Cache-Control": cc, "Pragma": pragma, "Accept-Encoding": accept,
			"Range": rng, "If-Range": ifRange, "If-None-Match": inm, "If-Modified-Since": ims} {
			if v != "" {
				r.Header.Set(name, v)
			}
		}
		d := requestDirectives(r.Header)
		for _, name := range []string{"max-age", "max-stale", "min-fresh"} {
			if s, ok := d.seconds(name); ok && s < 0 {
				t.Fatalf("negative %s from %q", name, cc)
			}
		}
		if c := negotiate(r.Header); c != "" && c != codingBr && c != codingGzip {
			t.Fatalf("coding %q from %q", c, accept)
		}
		body := []byte("0123456789abcdef")
		h := http.Header{"Etag": {`"v1"`}, "Last-Modified": {"Mon, 02 Jan 2006 15:04:05 GMT"}, "Content-Type": {"text/plain"}}
		now := time.Now()
		o := newObject(http.StatusOK, h, body, now, now, time.Minute)
		if !reflect.DeepEqual(o.header(), h) {
			t.Fatalf("stored fields %v, want the origin's %v", o.header(), h)
		}
		before := bytes.Clone(o.data)
		w := httptest.NewRecorder()
		fuzzEdge.serveObject(w, r, o, now, "Hit")
		if !bytes.Equal(o.data, before) {
			t.Fatalf("serving changed the stored response: %q, was %q", o.data, before)
		}
		got := w.Body.Bytes()
		switch w.Code {
		case http.StatusOK:
			if !bytes.Equal(got, body) {
				t.Fatalf("200 with body %q", got)
			}
		case http.StatusPartialContent:
			if !strings.HasPrefix(w.Header().Get("Content-Type"), "multipart/") && !bytes.Contains(body, got) {
				t.Fatalf("206 with body %q, not a part of the stored one", got)
			}
		case http.StatusNotModified, http.StatusPreconditionFailed, http.StatusRequestedRangeNotSatisfiable:
		default:
			t.Fatalf("status %d", w.Code)
		}
	})
}

// fuzzEdge answers from stored objects; its origin is never asked.
var fuzzEdge = func() *Edge {
	e, err := New(Config{Behaviors: []Behavior{{PathPattern: "*", Origin: Origin{Primary: &url.URL{Scheme: "http", Host: "127.0.0.1:1"}},
		AllowedMethods: []string{"GET", "HEAD"}}}}, slog.New(slog.DiscardHandler))
	if err != nil {
		panic(err)
	}
	return e
}()
