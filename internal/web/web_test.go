package web

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/apiserver"
	"herd.dev/herd/internal/store"
	"herd.dev/herd/internal/store/memory"
)

const token = "0123456789abcdef0123456789abcdef"

type env struct {
	st  store.Store
	srv *httptest.Server
}

func newEnv(t *testing.T) *env {
	t.Helper()
	st := memory.New()
	t.Cleanup(func() { st.Close() })
	for _, name := range []string{"web", "web-2"} {
		put(t, st, store.Fleets, &v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: name}, Spec: v1alpha1.FleetSpec{Image: "hello"}})
	}
	put(t, st, store.Instances, &v1alpha1.Instance{Metadata: v1alpha1.ObjectMeta{Name: "web-abcde"},
		Spec: v1alpha1.InstanceSpec{Fleet: "web", Region: "local", Revision: "web-1"}, Status: v1alpha1.InstanceStatus{Phase: v1alpha1.PhaseReady}})
	put(t, st, store.Instances, &v1alpha1.Instance{Metadata: v1alpha1.ObjectMeta{Name: "web-2-fghjk"},
		Spec: v1alpha1.InstanceSpec{Fleet: "web-2", Region: "local", Revision: "web-2-1"}, Status: v1alpha1.InstanceStatus{Phase: v1alpha1.PhaseReady}})
	api := apiserver.New(apiserver.Options{Store: st, Token: token})
	h := New(Options{Store: st, Token: token, API: api, SampleEvery: 20 * time.Millisecond,
		LBHealth: func() map[string]string { return map[string]string{"web-abcde": "healthy"} }})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	t.Cleanup(h.Close)
	return &env{st: st, srv: srv}
}

func put(t *testing.T, st store.Store, kind string, obj store.Object) {
	t.Helper()
	if err := store.PutObject(context.Background(), st, kind, obj); err != nil {
		t.Fatal(err)
	}
}

// browser is an HTTP client that keeps cookies and does not follow redirects, as a test of them.
func browser(t *testing.T) *http.Client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, Timeout: 5 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func login(t *testing.T, c *http.Client, base, tok string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("POST", base+"/ui/login", strings.NewReader(url.Values{"token": {tok}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", base)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

func fetch(t *testing.T, c *http.Client, method, u string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, u, nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestLogin(t *testing.T) {
	e := newEnv(t)
	c := browser(t)
	base := e.srv.URL

	// Nothing without a session: pages send to the login form, data is 401 with no data.
	if code, _ := fetch(t, c, "GET", base+"/ui/fleets/web"); code != http.StatusSeeOther {
		t.Errorf("page without a session: %d, want a redirect to the login form", code)
	}
	for _, path := range []string{"/ui/api/stream", "/ui/api/v1/fleets", "/ui/api/stream?token=" + token} {
		if code, body := fetch(t, c, "GET", base+path); code != http.StatusUnauthorized || strings.Contains(body, "web") {
			t.Errorf("GET %s without a session: %d %s, want 401 and no data", path, code, body)
		}
	}
	// A wrong token: back to the form, no cookie.
	resp := login(t, c, base, "wrong")
	if loc := resp.Header.Get("Location"); loc != "/ui/login?failed=1" || len(resp.Cookies()) != 0 {
		t.Fatalf("wrong token: redirect to %q with cookies %v, want the form again and none", loc, resp.Cookies())
	}
	// A login from another site's page is refused.
	req, _ := http.NewRequest("POST", base+"/ui/login", strings.NewReader("token="+token))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "http://evil.example")
	if resp, err := c.Do(req); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("cross-site login: %v %v, want 403", resp, err)
	}
	// The right token: an HttpOnly, SameSite=Strict session cookie that is not the token.
	resp = login(t, c, base, token)
	cookies := resp.Cookies()
	if resp.Header.Get("Location") != "/ui/" || len(cookies) != 1 || !cookies[0].HttpOnly || cookies[0].SameSite != http.SameSiteStrictMode ||
		cookies[0].Value == token || cookies[0].Path != "/ui/" {
		t.Fatalf("login: redirect %q, cookies %+v", resp.Header.Get("Location"), cookies)
	}
	if code, body := fetch(t, c, "GET", base+"/ui/api/v1/fleets"); code != http.StatusOK || !strings.Contains(body, `"web"`) {
		t.Fatalf("fleets with a session: %d %s", code, body)
	}
	// The dashboard only reads the API.
	if code, _ := fetch(t, c, "DELETE", base+"/ui/api/v1/fleets/web"); code != http.StatusMethodNotAllowed {
		t.Errorf("DELETE through the dashboard: %d, want 405", code)
	}
	if _, err := store.GetObject[v1alpha1.Fleet](context.Background(), e.st, store.Fleets, "web"); err != nil {
		t.Fatalf("fleet web after a DELETE through the dashboard: %v", err)
	}
	// Logout ends the session on the server.
	req, _ = http.NewRequest("POST", base+"/ui/logout", nil)
	if resp, err := c.Do(req); err != nil || resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("logout: %v %v", resp, err)
	}
	old := &http.Cookie{Name: cookieName, Value: cookies[0].Value}
	req, _ = http.NewRequest("GET", base+"/ui/api/v1/fleets", nil)
	req.AddCookie(old)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("the old cookie after logout: %v %v, want 401", resp, err)
	}
}

// sse reads Server-Sent Events.
type sse struct{ r *bufio.Reader }

func (s sse) next(t *testing.T) (string, string) {
	t.Helper()
	var event, data string
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			t.Fatalf("stream ended: %v", err)
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "" && event != "":
			return event, data
		case strings.HasPrefix(line, "event: "):
			event = line[len("event: "):]
		case strings.HasPrefix(line, "data: "):
			data = line[len("data: "):]
		}
	}
}

func openStream(t *testing.T, base, query string) sse {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/ui/api/stream"+query, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	return sse{bufio.NewReader(resp.Body)}
}

// TestStreamOfAFleet gets the fleet's snapshot (not the other fleet's, whose name it prefixes),
// then its changes and events, and the health the load balancer reports.
func TestStreamOfAFleet(t *testing.T) {
	e := newEnv(t)
	s := openStream(t, e.srv.URL, "?fleet=web")
	ev, data := s.next(t)
	var snap snapshot
	if err := json.Unmarshal([]byte(data), &snap); ev != "snapshot" || err != nil {
		t.Fatalf("first event %s %s (%v), want the snapshot", ev, data, err)
	}
	if len(snap.Fleets) != 1 || snap.Fleets[0].Metadata.Name != "web" || len(snap.Instances) != 1 || snap.Instances[0].Name != "web-abcde" ||
		snap.Instances[0].LBHealth != "healthy" {
		t.Fatalf("snapshot %s, want fleet web with its one instance, healthy", data)
	}

	put(t, e.st, store.Instances, &v1alpha1.Instance{Metadata: v1alpha1.ObjectMeta{Name: "web-2-zzzzz"}, Spec: v1alpha1.InstanceSpec{Fleet: "web-2"}})
	put(t, e.st, store.Events, &v1alpha1.Event{Metadata: v1alpha1.ObjectMeta{Name: "e1"}, Object: "Instance/web-2-zzzzz", Message: "not web's"})
	put(t, e.st, store.Instances, &v1alpha1.Instance{Metadata: v1alpha1.ObjectMeta{Name: "web-bcdfg"}, Spec: v1alpha1.InstanceSpec{Fleet: "web"},
		Status: v1alpha1.InstanceStatus{Phase: v1alpha1.PhaseBooting}})
	put(t, e.st, store.Events, &v1alpha1.Event{Metadata: v1alpha1.ObjectMeta{Name: "e2"}, Object: "Instance/web-bcdfg", Message: "<b>booting</b>"})
	var got []string
	for len(got) < 2 {
		ev, data := s.next(t)
		switch ev {
		case "instance", "event":
			got = append(got, ev+" "+data)
		case "sample", "health":
		default:
			t.Fatalf("unexpected %s %s", ev, data)
		}
	}
	// Each kind has its own watch: an instance and an event may come in either order.
	sort.Strings(got)
	if !strings.Contains(got[0], `\u003cb\u003ebooting`) || !strings.Contains(got[1], `"type":"ADDED"`) || !strings.Contains(got[1], `"name":"web-bcdfg"`) {
		t.Fatalf("changes %q, want web-bcdfg added and its event (and nothing of web-2)", got)
	}
}

func TestStreamRefusesLongNames(t *testing.T) {
	e := newEnv(t)
	c := &http.Client{Timeout: 5 * time.Second}
	req, _ := http.NewRequest("GET", e.srv.URL+"/ui/api/stream?fleet="+strings.Repeat("a", 64), nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.Do(req)
	if err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a 64-character fleet name: %v %v, want 400", resp, err)
	}
}

func TestScopeMatchesOnlyItsFleetsInstances(t *testing.T) {
	sc := scope{fleet: "web"}
	for obj, want := range map[string]bool{"Fleet/web": true, "Instance/web-abcde": true, "Instance/web-2-abcde": false, "Fleet/web-2": false, "Instance/webx-abcde": false} {
		if got := sc.wantsEvent(&v1alpha1.Event{Object: obj}); got != want {
			t.Errorf("fleet web's page takes an event about %s: %v, want %v", obj, got, want)
		}
	}
}
