package h1

import "bytes"

// SplitField splits a "name: value" field line at its colon and bounds its value, trimmed of spaces
// and tabs, by vs and ve; ok is false when the name is not a token.
func SplitField(line []byte) (colon, vs, ve int, ok bool) {
	colon = bytes.IndexByte(line, ':')
	if colon <= 0 || !IsToken(line[:colon]) {
		return 0, 0, 0, false
	}
	vs, ve = colon+1, len(line)
	for vs < ve && (line[vs] == ' ' || line[vs] == '\t') {
		vs++
	}
	for ve > vs && (line[ve-1] == ' ' || line[ve-1] == '\t') {
		ve--
	}
	return colon, vs, ve, true
}

// ValidValue reports whether a field value is free of control characters (tabs aside).
func ValidValue(value []byte) bool {
	for _, c := range value {
		if (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// IsToken reports whether b is an RFC 9110 token (method or header name).
func IsToken(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if int(c) >= len(tokenChars) || !tokenChars[c] {
			return false
		}
	}
	return true
}

var tokenChars = asciiSet("!#$%&'*+-.^_`|~")

// asciiSet is a lookup table of the ASCII letters, digits and the bytes of extra.
func asciiSet(extra string) [128]bool {
	var t [128]bool
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for _, c := range extra {
		t[c] = true
	}
	return t
}

// CommaToken returns the bounds of the element of a comma-separated header value that starts at
// i, trimmed of spaces and tabs, and where the next element starts.
func CommaToken(value []byte, i int) (a, b, next int) {
	a, b = i, i
	for b < len(value) && value[b] != ',' {
		b++
	}
	next = b + 1
	for a < b && (value[a] == ' ' || value[a] == '\t') {
		a++
	}
	for b > a && (value[b-1] == ' ' || value[b-1] == '\t') {
		b--
	}
	return a, b, next
}

// EqFold compares ASCII case-insensitively without allocating.
func EqFold[T string | []byte](b T, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		c, d := b[i], s[i]
		if c == d {
			continue
		}
		if lc := c | 0x20; lc < 'a' || lc > 'z' || lc != d|0x20 {
			return false
		}
	}
	return true
}

// HasPrefixFold is bytes.HasPrefix, ASCII case-insensitive.
func HasPrefixFold(b []byte, prefix string) bool {
	return len(b) >= len(prefix) && EqFold(b[:len(prefix)], prefix)
}

// ParseLength parses a Content-Length: decimal digits only, no sign, no overflow.
func ParseLength(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// IsHex reports whether c is a hexadecimal digit.
func IsHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// ValidHost reports whether a Host value holds only bytes that may appear in a URI host and port (RFC
// 3986 section 3.2.2), as net/http checks it (golang.org/x/net/http/httpguts.ValidHostHeader).
func ValidHost(h []byte) bool {
	for _, c := range h {
		if int(c) >= len(hostChars) || !hostChars[c] {
			return false
		}
	}
	return true
}

var hostChars = asciiSet("!$%&'()*+,-.:;=[]_~")

// ValidAuthority reports whether an absolute-form target's authority is a host and optional decimal
// port: a name of host bytes, or an IPv6 literal in brackets. Percent-encoding has no use in a host a
// proxy forwards to, and net/http reads it its own way: it is refused.
func ValidAuthority(a []byte) bool {
	if !ValidHost(a) || bytes.IndexByte(a, '%') >= 0 {
		return false
	}
	host, port := a, []byte(nil)
	if len(a) > 0 && a[0] == '[' {
		end := bytes.IndexByte(a, ']')
		if end < 0 {
			return false
		}
		host, port = a[1:end], a[end+1:]
		if len(port) > 0 && port[0] != ':' {
			return false
		}
	} else if i := bytes.LastIndexByte(a, ':'); i >= 0 {
		host, port = a[:i], a[i:]
		if bytes.ContainsAny(host, ":") {
			return false
		}
	}
	if bytes.ContainsAny(host, "[]") {
		return false
	}
	for _, c := range port[min(1, len(port)):] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// ValidUserinfo reports whether the user info of an absolute-form target, which is not forwarded,
// holds only the bytes RFC 3986 allows there, as net/http checks it; percent-encoding is refused.
func ValidUserinfo(u []byte) bool {
	for _, c := range u {
		if c != '@' && (c == '%' || c == '[' || c == ']' || int(c) >= len(hostChars) || !hostChars[c]) {
			return false
		}
	}
	return true
}
