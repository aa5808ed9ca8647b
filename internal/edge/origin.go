package edge

import (
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"
)

// hopHeaders belong to one connection and are neither forwarded nor stored (RFC 9110 section 7.6.1).
var hopHeaders = []string{
	"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// dropHop removes the hop-by-hop fields from h, and those its Connection field names.
func dropHop(h http.Header) {
	for _, v := range h.Values("Connection") {
		for _, name := range strings.Split(v, ",") {
			if name = textproto.TrimString(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
}

// conditionalHeaders are the client's preconditions and range: the edge asks the origin for the
// whole representation, so that it can store it, and answers them itself from what it has.
var conditionalHeaders = []string{"If-None-Match", "If-Modified-Since", "If-Match", "If-Unmodified-Since", "If-Range", "Range"}

// originRequest makes the request sent to target for r. A cacheable request (toStore) goes out
// as a plain GET without the client's conditionals, with only the cookies the policy keys on.
// A stored response is validated: its ETag and Last-Modified go out as If-None-Match and
// If-Modified-Since.
func originRequest(r *http.Request, target *url.URL, p Policy, toStore bool, stored *object) *http.Request {
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.URL.Scheme = target.Scheme
	out.URL.Host = target.Host
	if target.Path != "" && target.Path != "/" {
		out.URL.Path = strings.TrimSuffix(target.Path, "/") + r.URL.Path
		out.URL.RawPath = ""
	}
	out.Host = r.Host
	dropHop(out.Header)
	if toStore {
		out.Method = http.MethodGet
		out.Body = nil
		out.ContentLength = 0
		for _, name := range conditionalHeaders {
			out.Header.Del(name)
		}
		if p.Compress {
			// The edge stores the identity and compresses it itself; the transport may still ask
			// for gzip on the way and decode it, which changes nothing stored.
			out.Header.Del("Accept-Encoding")
		}
		cookies := out.Cookies()
		out.Header.Del("Cookie")
		for _, c := range cookies {
			for _, keep := range p.Cookies {
				if c.Name == keep {
					out.AddCookie(c)
				}
			}
		}
		if stored != nil {
			if v := stored.field("ETag"); v != "" {
				out.Header.Set("If-None-Match", v)
			}
			if v := stored.field("Last-Modified"); v != "" {
				out.Header.Set("If-Modified-Since", v)
			}
		}
	}
	if ip, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		if prior := out.Header.Get("X-Forwarded-For"); prior != "" {
			ip = prior + ", " + ip
		}
		out.Header.Set("X-Forwarded-For", ip)
	}
	out.Header.Add("Via", "1.1 herd-edge")
	return out
}

// roundTrip sends r to the behavior's origin, and to its secondary when the primary cannot be
// reached or answers 5xx; only a request without a body is sent twice.
func (e *Edge) roundTrip(r *http.Request, b *Behavior, toStore bool, stored *object) (*http.Response, error) {
	resp, err := e.transport.RoundTrip(originRequest(r, b.Origin.Primary, b.Policy, toStore, stored))
	e.metrics.originRequests.Inc()
	if b.Origin.Secondary == nil || (r.Body != nil && r.Body != http.NoBody && !toStore) {
		return resp, err
	}
	if err == nil && resp.StatusCode < 500 {
		return resp, nil
	}
	if err == nil {
		resp.Body.Close()
	}
	e.log.Debug("primary origin failed, trying the secondary", "origin", b.Origin.Primary.Host, "err", err)
	e.metrics.originFailovers.Inc()
	e.metrics.originRequests.Inc()
	return e.transport.RoundTrip(originRequest(r, b.Origin.Secondary, b.Policy, toStore, stored))
}
