package h1

import (
	"bufio"
	"bytes"
	"net/http"
	"testing"
)

// FuzzRequestLine parses arbitrary request lines and field lines. A request line taken, with an
// origin-form target, must be one net/http's reader takes too, read the same: method, target and
// version; so must a field line taken, with the same name and value.
// Run: go test ./internal/h1 -run '^$' -fuzz FuzzRequestLine -fuzztime 1m
func FuzzRequestLine(f *testing.F) {
	for _, s := range []struct{ line, field string }{
		{"GET / HTTP/1.1", "Host: a"},
		{"GET /a?b=%zz HTTP/1.0", "X-A:  v \t"},
		{"POST /a%20b HTTP/1.1", "X-A: a\x01b"},
		{"GET /a%zz HTTP/1.1", " folded"},
		{"PRI * HTTP/2.0", "Bad Name: v"},
		{"G(T / HTTP/1.1", "X:"},
		{"GET http://a/ HTTP/1.1", ":v"},
		{"GET  / HTTP/1.1", "X-A: \xff"},
	} {
		f.Add(s.line, s.field)
	}
	f.Fuzz(func(t *testing.T, line, field string) {
		rl, err := ParseRequestLine([]byte(line))
		if err != nil || rl.H2Preface {
			return
		}
		if rl.MethodEnd <= 0 || rl.TargetStart != rl.MethodEnd+1 || rl.TargetEnd <= rl.TargetStart || rl.TargetEnd > len(line) {
			t.Fatalf("bounds %+v of %q", rl, line)
		}
		target := line[rl.TargetStart:rl.TargetEnd]
		if target[0] != '/' {
			return // other forms are each server's to take or refuse
		}
		colon, vs, ve, ferr := CheckField([]byte(field))
		head := line + "\r\nHost: a\r\n"
		if ferr == nil && !EqFold(field[:colon], "host") && !EqFold(field[:colon], "content-length") &&
			!EqFold(field[:colon], "transfer-encoding") && !EqFold(field[:colon], "connection") && !EqFold(field[:colon], "expect") {
			head += field + "\r\n"
		} else {
			ferr = errSkip
		}
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader([]byte(head + "\r\n"))))
		if err != nil {
			t.Fatalf("taken here, refused by net/http (%v): %q", err, head)
		}
		if req.Method != line[:rl.MethodEnd] || req.RequestURI != target || req.ProtoMinor != rl.Minor {
			t.Fatalf("read as %s %s HTTP/1.%d here, %s %s HTTP/1.%d by net/http", line[:rl.MethodEnd], target, rl.Minor, req.Method, req.RequestURI, req.ProtoMinor)
		}
		if ferr == nil {
			if got := req.Header.Get(field[:colon]); got != field[vs:ve] {
				t.Fatalf("field %q read as %q here, %q by net/http", field, field[vs:ve], got)
			}
		}
	})
}

var errSkip = BadRequest("not compared")

// TestRefusals checks the answers to the refusals the servers share.
func TestRefusals(t *testing.T) {
	for _, tc := range []struct {
		line string
		code int
	}{
		{"GET / HTTP/1.1", 0},
		{"GET /a%zz HTTP/1.1", 400},
		{"GET / HTTP/3", 505},
		{"GET / HTTP/2.0", 505},
		{"GET / FTP/1.0", 400},
		{"G(T / HTTP/1.1", 400},
		{"GET /", 400},
	} {
		_, err := ParseRequestLine([]byte(tc.line))
		if code := codeOf(err); code != tc.code {
			t.Errorf("%q: %d, want %d", tc.line, code, tc.code)
		}
	}
	for _, tc := range []struct {
		field string
		code  int
	}{
		{"Host: a", 0},
		{" folded", 400},
		{"Bad Name: v", 400},
		{"X-A: a\x00b", 400},
		{"X-A: a\tb", 0},
	} {
		_, _, _, err := CheckField([]byte(tc.field))
		if code := codeOf(err); code != tc.code {
			t.Errorf("%q: %d, want %d", tc.field, code, tc.code)
		}
	}
	f := Framing{Minor: 1, Hosts: 1, ContentLength: -1}
	f.Field([]byte("Content-Length"), []byte("3"))
	f.Field([]byte("Transfer-Encoding"), []byte("chunked"))
	if code := codeOf(f.Check(1 << 20)); code != 400 {
		t.Errorf("both framings: %d, want 400", code)
	}
	if _, err := (&Framing{ContentLength: -1}).Field([]byte("Transfer-Encoding"), []byte("gzip")); codeOf(err) != 501 {
		t.Errorf("Transfer-Encoding gzip: %v, want 501", err)
	}
}

func codeOf(err error) int {
	if err == nil {
		return 0
	}
	return err.(*Error).Code
}
