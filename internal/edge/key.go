package edge

import (
	"net"
	"net/http"
	"slices"
	"strings"
)

// primaryKey is the cache key of a request's target URI: host (lowercased, without the port, so that
// one site's listeners, cleartext and HTTPS, share their objects), path, and the raw query when the
// policy keys on it. The method is not part of it: GET fills the entry, and HEAD is served from it.
func primaryKey(r *http.Request, p Policy) string {
	return primaryKeyOf(r.Host, r.URL.EscapedPath(), r.URL.RawQuery, p)
}

// primaryKeyOf is primaryKey from the request's Host, escaped path and raw query.
func primaryKeyOf(host, path, query string, p Policy) string {
	host = strings.ToLower(host)
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if path == "" {
		path = "/"
	}
	var b strings.Builder
	b.Grow(len(host) + len(path) + len(query) + 2)
	b.WriteString(host)
	b.WriteString(path)
	if p.QueryString && query != "" {
		b.WriteByte('?')
		b.WriteString(query)
	}
	return b.String()
}

// varyNames reads the header names a response's Vary lists, canonical and sorted, without repeats.
func varyNames(h http.Header) []string {
	var names []string
	for _, v := range h.Values("Vary") {
		for _, n := range splitList(v) {
			if n == "" || n == "*" {
				continue
			}
			names = append(names, http.CanonicalHeaderKey(n))
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// secondaryKey selects a variant within an entry: the request's values of the headers the stored
// response varies on, then of the headers and cookies the policy keys on. Values are normalised as
// RFC 9111 section 4.1 allows: field lines combined, whitespace around list members dropped.
func secondaryKey(r *http.Request, vary []string, p Policy) string {
	if len(vary) == 0 && len(p.Headers) == 0 && len(p.Cookies) == 0 {
		return ""
	}
	var b strings.Builder
	writeHeaders := func(tag byte, names []string) {
		for _, n := range names {
			b.WriteByte(tag)
			b.WriteString(n)
			b.WriteByte('=')
			for i, v := range r.Header.Values(n) {
				if i > 0 {
					b.WriteByte(',')
				}
				for j, m := range splitList(v) {
					if j > 0 {
						b.WriteByte(',')
					}
					b.WriteString(m)
				}
			}
			b.WriteByte('\n')
		}
	}
	writeHeaders('v', vary)
	writeHeaders('h', p.Headers)
	for _, name := range p.Cookies {
		b.WriteString("c")
		b.WriteString(name)
		b.WriteByte('=')
		if c, err := r.Cookie(name); err == nil {
			b.WriteString(c.Value)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// sameOrigin resolves a Location or Content-Location value against the request and returns its
// primary key when it names the same host, so that an unsafe method invalidates it too (RFC 9111
// section 4.4); another host's URI is never invalidated, as that would let one origin purge another.
func sameOrigin(r *http.Request, ref string, p Policy) (string, bool) {
	if ref == "" {
		return "", false
	}
	u, err := r.URL.Parse(ref)
	if err != nil {
		return "", false
	}
	if u.Host != "" && !strings.EqualFold(u.Host, r.Host) {
		return "", false
	}
	target := &http.Request{Host: r.Host, URL: u}
	return primaryKey(target, p), true
}
