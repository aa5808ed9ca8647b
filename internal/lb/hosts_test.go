package lb

import (
	"bytes"
	"net"
	"net/http"
	"strings"
	"testing"
)

// routerConfig is two fleets' listeners and a host router on a port of its own that sends
// api.herd.internal to api's listener (which takes calls from web only) and web.herd.internal to
// web's.
func routerConfig(api, web *backend) Config {
	apiL := httpListener(TargetGroup{Name: "r1", Targets: targets(api)})
	apiL.Name, apiL.Fleet, apiL.AllowFrom = "api/http", "api", []string{"web"}
	webL := httpListener(TargetGroup{Name: "r1", Targets: targets(web)})
	router := Listener{Name: "discovery", Address: "127.0.0.1:0", Routes: []HostRoute{
		{Host: "api.herd.internal", Listener: "api/http"},
		{Host: "web.herd.internal", Listener: "web/http"},
	}}
	return Config{Listeners: []Listener{apiL, webL, router}, Callers: callers}
}

// getHost does a GET on the router with Host host from a client at ip.
func getHost(t *testing.T, lb *LB, ip, host string) (int, string, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+lb.Addr("discovery").String()+"/", nil)
	req.Host = host
	resp, err := clientFrom(ip).Do(req)
	if err != nil {
		t.Fatalf("GET with Host %s: %v", host, err)
	}
	defer resp.Body.Close()
	var body bytes.Buffer
	body.ReadFrom(resp.Body)
	return resp.StatusCode, resp.Header.Get("X-Backend"), body.String()
}

// A host router sends each request to the listener its Host names, with or without a port, in
// any case, with a trailing dot; an unknown Host gets 404 naming it and no route; the routed
// listener's allowFrom holds (403 for batch's instance, 200 for web's).
func TestHostRouter(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e Engine) {
		api, web := newBackend(t, "api-0", nil), newBackend(t, "web-0", nil)
		lb := startLB(t, e, routerConfig(api, web))
		waitHealthy(t, lb, 2)

		for _, tc := range []struct{ host, ip, want string }{
			{"api.herd.internal", "127.0.0.3", "api-0"},
			{"api.herd.internal:80", "127.0.0.3", "api-0"},
			{"API.Herd.Internal", "127.0.0.3", "api-0"},
			{"api.herd.internal.:80", "127.0.0.3", "api-0"},
			{"web.herd.internal", "127.0.0.2", "web-0"},
			{"web.herd.internal", "127.0.0.1", "web-0"},
		} {
			if code, from, body := getHost(t, lb, tc.ip, tc.host); code != http.StatusOK || from != tc.want {
				t.Errorf("Host %s from %s: %d from %q %q, want 200 from %s", tc.host, tc.ip, code, from, body, tc.want)
			}
		}
		code, from, body := getHost(t, lb, "127.0.0.3", "db.herd.internal")
		if code != http.StatusNotFound || from != "" || !strings.Contains(body, `"db.herd.internal"`) || strings.Contains(body, "api") {
			t.Errorf("unknown Host: %d from %q %q, want 404 naming db.herd.internal and no route", code, from, body)
		}
		code, from, body = getHost(t, lb, "127.0.0.2", "api.herd.internal")
		if code != http.StatusForbidden || from != "" || !strings.Contains(body, "fleet batch") {
			t.Errorf("batch's instance to api: %d from %q %q, want 403 naming fleet batch", code, from, body)
		}
		if n := api.hits.Load(); n != 4 {
			t.Errorf("api's target got %d requests, want the 4 routed to it", n)
		}
	})
}

// An absolute-form request target's authority is its Host, for routing too; a request with no
// Host at all (HTTP/1.0) is no known host.
func TestHostRouterRawRequests(t *testing.T) {
	api, web := newBackend(t, "api-0", nil), newBackend(t, "web-0", nil)
	lb := startLB(t, EngineFast, routerConfig(api, web))
	waitHealthy(t, lb, 2)
	addr := lb.Addr("discovery").String()
	if got := rawRequest(t, addr, "GET http://WEB.herd.internal/ HTTP/1.1\r\nHost: api.herd.internal\r\nConnection: close\r\n\r\n"); !strings.Contains(got, "200 OK") || !strings.Contains(got, "web-0") {
		t.Errorf("absolute-form to web: %q, want web's 200", got)
	}
	if got := rawRequest(t, addr, "GET / HTTP/1.0\r\n\r\n"); !strings.HasPrefix(got, "HTTP/1.1 404") {
		t.Errorf("HTTP/1.0 without Host: %q, want 404", got)
	}
}

// A route must name a listener of the config that can serve it, and its host must be a lower-case
// name without a port; the error names the field, and nothing changes.
func TestHostRouterValidation(t *testing.T) {
	web := httpListener(TargetGroup{Name: "r1", Targets: []Target{{ID: "a", Address: "127.0.0.1:1"}}})
	tcp := Listener{Name: "db/tcp", Fleet: "db", Address: "127.0.0.1:0", Protocol: ProtocolTCP}
	for _, tc := range []struct {
		name   string
		routes []HostRoute
		want   string
	}{
		{"no such listener", []HostRoute{{Host: "api.herd.internal", Listener: "api/http"}}, `routes[0].listener: no listener is named "api/http"`},
		{"tcp", []HostRoute{{Host: "db.herd.internal", Listener: "db/tcp"}}, "not an HTTP listener"},
		{"upper case", []HostRoute{{Host: "Web.herd.internal", Listener: "web/http"}}, "routes[0].host"},
		{"port", []HostRoute{{Host: "web.herd.internal:80", Listener: "web/http"}}, "routes[0].host"},
		{"twice", []HostRoute{{Host: "web.herd.internal", Listener: "web/http"}, {Host: "web.herd.internal", Listener: "web/http"}}, "also the host of routes[0]"},
		{"itself", []HostRoute{{Host: "x.herd.internal", Listener: "router"}}, "is a host router itself"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			router := Listener{Name: "router", Address: "127.0.0.1:0", Routes: tc.routes}
			err := New(Options{}).Apply(Config{Listeners: []Listener{web, tcp, router}})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Apply: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// hostKey drops the port and a trailing dot and lowers the case; it keeps an IPv6 literal whole.
func TestHostKey(t *testing.T) {
	for in, want := range map[string]string{
		"api.herd.internal":     "api.herd.internal",
		"API.herd.INTERNAL:80":  "api.herd.internal",
		"api.herd.internal.":    "api.herd.internal",
		"api.herd.internal:":    "api.herd.internal",
		"api.herd.internal:x80": "api.herd.internal:x80",
		"[::1]:80":              "[::1]",
		"[::1]":                 "[::1]",
		"":                      "",
	} {
		var buf [maxHostKey]byte
		if got := hostKey([]byte(in), buf[:]); string(got) != want {
			t.Errorf("hostKey(%q) = %q, want %q", in, got, want)
		}
	}
	var buf [maxHostKey]byte
	if got := hostKey([]byte(strings.Repeat("a", maxHostKey+1)), buf[:]); got != nil {
		t.Errorf("hostKey of %d bytes = %q, want nil", maxHostKey+1, got)
	}
}

// FuzzHostKey checks hostKey, which reads every Host a router gets, against net.SplitHostPort
// and an ASCII lowering: the same name for any Host that is no IPv6 literal, and never a panic.
func FuzzHostKey(f *testing.F) {
	for _, s := range []string{"api.herd.internal", "API.herd.internal:80", "a.:80", "[::1]:80", "x:y:80", ":80", "."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, host string) {
		var buf [maxHostKey]byte
		got := hostKey([]byte(host), buf[:])
		if bytes.ContainsAny(got, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") {
			t.Fatalf("hostKey(%q) = %q has upper case", host, got)
		}
		if strings.ContainsAny(host, "[]") {
			return
		}
		want := host
		if h, port, err := net.SplitHostPort(host); err == nil && allDigits([]byte(port)) {
			want = h
		} else if i := strings.LastIndexByte(host, ':'); i >= 0 && allDigits([]byte(host[i+1:])) {
			want = host[:i] // several colons: SplitHostPort refuses, the last one is the port's
		}
		want = asciiLower(strings.TrimSuffix(want, "."))
		if len(want) > maxHostKey {
			if got != nil {
				t.Fatalf("hostKey(%q) = %q, want nil (too long)", host, got)
			}
			return
		}
		if string(got) != want {
			t.Fatalf("hostKey(%q) = %q, want %q", host, got, want)
		}
	})
}

// asciiLower lowers ASCII letters only, as Host names are compared.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
