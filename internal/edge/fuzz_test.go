package edge

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"
)

// FuzzResponseHeaders feeds arbitrary Cache-Control, Expires, Date, Last-Modified, Age and Vary
// values through the parsing and freshness paths: they must not panic, a lifetime is never
// negative, and what no-store or private forbids is never storable.
func FuzzResponseHeaders(f *testing.F) {
	f.Add(200, "max-age=60, s-maxage=\"30\"", "", "", "", "", "")
	f.Add(404, "no-store, private=\"Set-Cookie, X\"", "0", "Mon, 02 Jan 2006 15:04:05 GMT", "", "5", "Accept")
	f.Add(302, "public,,max-age=99999999999999999999", "Mon, 02 Jan 2006 15:04:05 GMT", "", "Sun, 01 Jan 2006 15:04:05 GMT", "-1", "*")
	f.Add(200, "stale-while-revalidate=10, stale-if-error, must-revalidate", "", "garbage", "garbage", "x", "a, b ,, c")
	f.Fuzz(func(t *testing.T, status int, cc, expires, date, lm, age, vary string) {
		h := http.Header{}
		for name, v := range map[string]string{"Cache-Control": cc, "Expires": expires, "Date": date, "Last-Modified": lm, "Age": age, "Vary": vary} {
			if v != "" {
				h.Set(name, v)
			}
		}
		d := parseCacheControl(h)
		now := time.Now()
		for _, p := range []Policy{{}, {DefaultTTL: time.Minute, MinTTL: time.Second, MaxTTL: time.Hour}} {
			life, explicit := freshnessLifetime(status, h, d, now, p)
			if life < 0 {
				t.Fatalf("negative lifetime %v", life)
			}
			req := &http.Request{Header: http.Header{}}
			reason := storable(req, directives{}, status, h, d, life, explicit)
			if (d.has("no-store") || d.has("private")) && reason == "" {
				t.Fatalf("storable despite %q", cc)
			}
			o := newObject(status, h, nil, now, now, life)
			if o.age(now.Add(time.Second)) < time.Second {
				t.Fatal("age less than the time resident")
			}
			o.freshFor(d, time.Second)
			o.staleWithin("stale-if-error", d, time.Second)
		}
		varyNames(h)
	})
}

// FuzzCacheKey feeds arbitrary targets, hosts, header and cookie values to the key functions: they
// must not panic, must be deterministic, must separate hosts, and must leave the query out when the
// policy does.
func FuzzCacheKey(f *testing.F) {
	f.Add("example.com", "/a/b?x=1&y=2", "gzip, br", "tier=gold; a=b")
	f.Add("EXAMPLE.com:80", "/%2F?", "", "tier=\"q\"")
	f.Add("h:8080", "//x/../y?q=%zz", "a,\"b,c\"", ";;=")
	f.Fuzz(func(t *testing.T, host, target, accept, cookie string) {
		u, err := url.ParseRequestURI(target)
		if err != nil {
			return
		}
		r := &http.Request{Host: host, URL: u, Header: http.Header{"Accept-Encoding": {accept}, "Cookie": {cookie}}}
		p := Policy{QueryString: true, Headers: []string{"Accept-Encoding"}, Cookies: []string{"tier"}}
		k1, k2 := primaryKey(r, p), primaryKey(r, p)
		if k1 != k2 {
			t.Fatal("primary key not deterministic")
		}
		if !strings.HasPrefix(k1, strings.ToLower(host)) && !strings.Contains(host, ":") {
			t.Fatalf("key %q does not start with host %q", k1, host)
		}
		other := &http.Request{Host: host + "x", URL: u}
		if primaryKey(other, p) == k1 && !strings.ContainsAny(host, "/:") {
			t.Fatalf("hosts %q and %q share key %q", host, other.Host, k1)
		}
		if k := primaryKey(r, Policy{}); strings.Contains(k, "?") && !strings.Contains(u.EscapedPath(), "?") && !strings.Contains(host, "?") {
			t.Fatalf("query in key %q with the query off", k)
		}
		if secondaryKey(r, []string{"Accept-Encoding"}, p) != secondaryKey(r, []string{"Accept-Encoding"}, p) {
			t.Fatal("secondary key not deterministic")
		}
		sameOrigin(r, target, p)
	})
}

// FuzzMatchPath checks the path matcher against a regular expression built from the pattern.
func FuzzMatchPath(f *testing.F) {
	f.Add("/static/*", "/static/a/b.css")
	f.Add("*a*a*a*a*b", strings.Repeat("a", 64))
	f.Add("/a?c", "/abc")
	f.Fuzz(func(t *testing.T, pattern, path string) {
		var re strings.Builder
		re.WriteString(`^(?s)`)
		for _, c := range pattern {
			switch c {
			case '*':
				re.WriteString(".*")
			case '?':
				re.WriteString(".")
			default:
				re.WriteString(regexp.QuoteMeta(string(c)))
			}
		}
		re.WriteString("$")
		want := regexp.MustCompile(re.String()).MatchString(path)
		if !utf8Clean(pattern) || !utf8Clean(path) {
			return // '?' is one byte to MatchPath, one rune to the expression
		}
		if got := MatchPath(pattern, path); got != want {
			t.Fatalf("MatchPath(%q, %q) = %v, want %v", pattern, path, got, want)
		}
	})
}

func utf8Clean(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
