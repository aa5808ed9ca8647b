package lb

import (
	"net/http"
	"strings"
	"sync"
	"testing"
)

// TestAbsoluteFormTarget checks that a request with an absolute-form target reaches the target with
// the Host named in it, not the client's Host header (RFC 9112 section 3.2.2), and with the path and
// query only.
func TestAbsoluteFormTarget(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e Engine) {
		var mu sync.Mutex
		var host, uri string
		b := newBackend(t, "b0", func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			host, uri = r.Host, r.RequestURI
			mu.Unlock()
		})
		lb := startLB(t, e, Config{Listeners: []Listener{httpListener(TargetGroup{Name: "r1", Targets: targets(b)})}})
		waitHealthy(t, lb, 1)
		cases := []struct{ target, host, wantHost, wantURI string }{
			{"http://example.com/x?y=1", "Host: other.example\r\n", "example.com", "/x?y=1"},
			{"HTTP://example.com:8080/x", "Host: other.example\r\n", "example.com:8080", "/x"},
			{"http://example.com", "Host: other.example\r\n", "example.com", "/"},
			{"http://example.com?y=1", "Host: other.example\r\n", "example.com", "/?y=1"},
			{"http://user@example.com/x", "Host: other.example\r\n", "example.com", "/x"},
		}
		for _, c := range cases {
			t.Run(c.target, func(t *testing.T) {
				mu.Lock()
				host, uri = "", ""
				mu.Unlock()
				got := rawRequest(t, lb.Addr("web/http").String(), "GET "+c.target+" HTTP/1.1\r\n"+c.host+"Connection: close\r\n\r\n")
				if !strings.HasPrefix(got, "HTTP/1.1 200 ") {
					t.Fatalf("answer %q, want 200", got)
				}
				mu.Lock()
				defer mu.Unlock()
				if host != c.wantHost || uri != c.wantURI {
					t.Fatalf("target saw Host %q and target %q, want %q and %q", host, uri, c.wantHost, c.wantURI)
				}
			})
		}
	})
}
