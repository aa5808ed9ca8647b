package edge

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// directives are the parsed Cache-Control directives of one message (RFC 9111 section 5.2): names
// lowercased, values unquoted. A directive that appears twice keeps its first value. A slice, not a
// map: a message has a handful, and a request's are made for every request.
type directives []directive

type directive struct{ name, value string }

// get returns the directive's first value, and whether it is present.
func (d directives) get(name string) (string, bool) {
	for _, m := range d {
		if m.name == name {
			return m.value, true
		}
	}
	return "", false
}

// parseCacheControl reads every Cache-Control field line of h. Malformed members are skipped rather
// than rejected: a cache must not fail a request because of a directive it does not understand.
// Without a Cache-Control field it is nil, which reads as empty: most requests have none, and the
// hit path makes nothing for them.
func parseCacheControl(h http.Header) directives {
	lines := h.Values("Cache-Control")
	if len(lines) == 0 {
		return nil
	}
	var d directives
	for _, line := range lines {
		for _, member := range splitList(line) {
			name, value, _ := strings.Cut(member, "=")
			name = strings.ToLower(strings.TrimSpace(name))
			if name == "" {
				continue
			}
			value = strings.TrimSpace(value)
			if len(value) >= 2 && value[0] == '"' && value[len(value)-1] == '"' {
				value = value[1 : len(value)-1]
			}
			d = append(d, directive{name, value}) // a repeat is kept, and never read: get finds the first
		}
	}
	return d
}

// has reports whether the directive is present, with or without a value.
func (d directives) has(name string) bool {
	_, ok := d.get(name)
	return ok
}

// seconds returns a delta-seconds directive's value. A value that is not a non-negative integer is
// treated as absent, except that an overflowing one means "very long" (RFC 9111 section 1.2.2).
func (d directives) seconds(name string) (time.Duration, bool) {
	v, ok := d.get(name)
	if !ok || v == "" {
		return 0, false
	}
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n > maxDeltaSeconds {
		n = maxDeltaSeconds
	}
	return time.Duration(n) * time.Second, true
}

// maxDeltaSeconds is 2^31, the value RFC 9111 section 1.2.2 says an overflowing delta stands for.
const maxDeltaSeconds = 1 << 31

// splitList splits a comma-separated field value, leaving commas inside quoted strings alone.
func splitList(v string) []string {
	var out []string
	quoted := false
	start := 0
	for i := 0; i < len(v); i++ {
		switch v[i] {
		case '"':
			quoted = !quoted
		case '\\':
			if quoted {
				i++
			}
		case ',':
			if !quoted {
				out = append(out, strings.TrimSpace(v[start:i]))
				start = i + 1
			}
		}
	}
	if s := strings.TrimSpace(v[start:]); s != "" || len(out) > 0 {
		out = append(out, s)
	}
	return out
}

// requestDirectives are the Cache-Control directives of a request, with the obsolete
// "Pragma: no-cache" read as "no-cache" when there is no Cache-Control (RFC 9111 section 5.4).
func requestDirectives(h http.Header) directives {
	d := parseCacheControl(h)
	if len(h.Values("Cache-Control")) == 0 {
		for _, p := range h.Values("Pragma") {
			for _, m := range splitList(p) {
				if strings.EqualFold(m, "no-cache") {
					if !d.has("no-cache") {
						d = append(d, directive{name: "no-cache"})
					}
				}
			}
		}
	}
	return d
}

// httpDate parses an HTTP-date; an invalid one reports false.
func httpDate(v string) (time.Time, bool) {
	if v == "" {
		return time.Time{}, false
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return time.Time{}, false
	}
	return t, true
}
