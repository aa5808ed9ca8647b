package edge

import (
	"bytes"
	"compress/gzip"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/andybalholm/brotli"
)

// Compression, for behaviors whose policy asks for it: the edge asks the origin for the identity
// representation, stores it, and serves br or gzip to the clients whose Accept-Encoding prefers
// them, compressed once from the stored object and stored beside it as a variant of its own
// (Vary: Accept-Encoding), so that the next client that takes the same coding is served without
// compressing again. The coding, not the client's Accept-Encoding as written, selects the variant:
// three variants at most, however many ways clients spell their preferences.

// The codings the edge makes.
const (
	codingBr   = "br"
	codingGzip = "gzip"
)

// minCompressSize is the smallest body worth compressing: below it the coding's framing eats the
// gain (CloudFront uses the same bound).
const minCompressSize = 1000

// negotiate returns the coding to serve a request with Accept-Encoding h: br or gzip, whichever the
// client gives the higher weight (br on a tie), or "" for the identity (RFC 9110 section 12.5.3).
// A coding the field does not name is acceptable only through "*"; a weight of 0 refuses it.
func negotiate(h http.Header) string {
	weights := map[string]float64{}
	star := -1.0
	for _, v := range h.Values("Accept-Encoding") {
		for _, member := range splitList(v) {
			name, params, _ := strings.Cut(member, ";")
			name = strings.ToLower(strings.TrimSpace(name))
			q := 1.0
			for _, p := range strings.Split(params, ";") {
				k, val, ok := strings.Cut(p, "=")
				if ok && strings.EqualFold(strings.TrimSpace(k), "q") {
					f, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
					if err != nil || f < 0 || f > 1 {
						f = 0 // a malformed weight: the coding is not taken on its word
					}
					q = f
				}
			}
			switch name {
			case "*":
				star = q
			case "x-gzip":
				weights[codingGzip] = q
			default:
				weights[name] = q
			}
		}
	}
	weight := func(c string) float64 {
		if q, ok := weights[c]; ok {
			return q
		}
		return max(star, 0)
	}
	br, gz := weight(codingBr), weight(codingGzip)
	switch {
	case br > 0 && br >= gz:
		return codingBr
	case gz > 0:
		return codingGzip
	}
	return ""
}

// compressible reports whether the edge may serve a response compressed: a 200 of a textual type,
// without a coding of its own, at least minCompressSize long, and not marked no-transform (RFC 9110
// section 7.7 and RFC 9111 section 5.2.2.6: a proxy must not change such a body).
func compressible(status int, h http.Header, bodyLen int, cc directives) bool {
	if status != http.StatusOK || bodyLen < minCompressSize || cc.has("no-transform") {
		return false
	}
	if ce := h.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		return false
	}
	t, _, err := mime.ParseMediaType(h.Get("Content-Type"))
	if err != nil {
		return false
	}
	switch {
	case strings.HasPrefix(t, "text/"), strings.HasSuffix(t, "+json"), strings.HasSuffix(t, "+xml"):
		return true
	}
	switch t {
	case "application/json", "application/javascript", "application/ecmascript", "application/xml",
		"application/wasm", "image/svg+xml", "font/ttf", "font/otf", "application/vnd.ms-fontobject":
		return true
	}
	return false
}

// encode returns o's body in coding, as a new object with the same times, or nil when that does not
// make it smaller.
func encode(o *object, coding string) *object {
	var buf bytes.Buffer
	var w io.WriteCloser
	switch coding {
	case codingBr:
		w = brotli.NewWriterLevel(&buf, brotli.DefaultCompression)
	case codingGzip:
		w = gzip.NewWriter(&buf)
	default:
		return nil
	}
	if _, err := o.writeBody(w); err != nil || w.Close() != nil || buf.Len() >= o.bodyLen() {
		return nil
	}
	header := o.header()
	header.Set("Content-Encoding", coding)
	if etag := codedETag(header.Get("ETag"), coding); etag != "" {
		header.Set("ETag", etag)
	} else {
		header.Del("ETag")
	}
	return newObject(int(o.status), header, buf.Bytes(), o.requestTime(), o.responseTime, o.lifetime)
}

// codedETag is the entity tag of a coded representation: another representation needs another tag
// (RFC 9110 section 8.8.3), so the coding is added inside the quotes; weakness is kept. A malformed
// tag gives "": the coded representation then has none.
func codedETag(etag, coding string) string {
	prefix, tag := "", etag
	if strings.HasPrefix(tag, "W/") {
		prefix, tag = "W/", tag[2:]
	}
	if len(tag) < 2 || tag[0] != '"' || tag[len(tag)-1] != '"' {
		return ""
	}
	return prefix + tag[:len(tag)-1] + "-" + coding + `"`
}

// varyOnEncoding adds Accept-Encoding to h's Vary, so that caches after the edge keep the codings
// apart too.
func varyOnEncoding(h http.Header) {
	for _, v := range h.Values("Vary") {
		for _, name := range splitList(v) {
			if strings.EqualFold(name, "Accept-Encoding") {
				return
			}
		}
	}
	h.Add("Vary", "Accept-Encoding")
}

// encoded returns what to serve a client that takes coding from o, a stored identity object: the
// coded variant, made and stored next to o if o is still what the store holds, or o itself when
// coding is "" or o is not worth compressing.
func (e *Edge) encoded(pk string, o *object, coding string) *object {
	if coding == "" || !o.compressible {
		return o
	}
	c := encode(o, coding)
	if c == nil {
		return o
	}
	e.metrics.compressions.Inc()
	e.store.putCoded(pk, o, c, coding)
	return c
}
