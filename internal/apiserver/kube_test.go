package apiserver

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/events/eventstest"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/store"
	"herd.dev/herd/internal/store/memory"
)

// adminToken is the credential herd up holds for the instances' API servers.
const adminToken = "instance-admin-secret"

// kubeAPI is a stand-in for instances' API servers: it answers pods, their logs and
// /api/v1/namespaces, and keeps the Authorization header each request came with.
type kubeAPI struct {
	srv  *httptest.Server
	mu   sync.Mutex
	auth []string
}

func newKubeAPI(t *testing.T) *kubeAPI {
	k := &kubeAPI{}
	// It speaks HTTP/2 over TLS, as kube-apiserver does.
	k.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k.mu.Lock()
		k.auth = append(k.auth, r.Header.Get("Authorization"))
		k.mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer "+adminToken {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/api/v1/namespaces/default/pods/hello-abc/exec":
			echoUpgrade(w, r)
		case r.URL.Path == "/api/v1/pods":
			fmt.Fprint(w, `{"kind":"PodList","apiVersion":"v1","items":[
				{"metadata":{"name":"hello-abc","namespace":"default"},"spec":{"containers":[{"name":"hello"}]},
				 "status":{"phase":"Running","podIP":"10.0.0.5","containerStatuses":[{"name":"hello","ready":true,"restartCount":2}]}},
				{"metadata":{"name":"coredns-1","namespace":"kube-system"},"spec":{"containers":[{"name":"coredns"}]}}]}`)
		case r.URL.Path == "/api/v1/namespaces/default/pods/hello-abc/log":
			w.Header().Set("Content-Type", "text/plain")
			fmt.Fprintf(w, "2026-01-02T03:04:05.000000006Z hello: serving on :8080\n2026-01-02T03:04:06Z second line tail=%s\n", r.URL.Query().Get("tailLines"))
		case r.URL.Path == "/api/v1/namespaces":
			fmt.Fprint(w, `{"kind":"NamespaceList","apiVersion":"v1","items":[]}`)
		default:
			http.NotFound(w, r)
		}
	}))
	k.srv.EnableHTTP2 = true
	k.srv.StartTLS()
	t.Cleanup(k.srv.Close)
	return k
}

// echoUpgrade switches an HTTP/1.1 request's connection to the protocol it asks for, as kubectl
// exec's are, and echoes what comes on it.
func echoUpgrade(w http.ResponseWriter, r *http.Request) {
	proto := r.Header.Get("Upgrade")
	if r.ProtoMajor != 1 || proto == "" {
		http.Error(w, "want an HTTP/1.1 upgrade", http.StatusBadRequest)
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	defer conn.Close()
	fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\n", proto)
	if brw.Flush() == nil {
		_, _ = io.Copy(conn, brw)
	}
}

func (k *kubeAPI) seen() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.auth...)
}

// kubeconfig is what the provider gives herd up for an instance.
func (k *kubeAPI) kubeconfig() []byte {
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: k.srv.Certificate().Raw})
	return fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters: [{name: i, cluster: {server: %q, certificate-authority-data: %q}}]
users: [{name: admin, user: {token: %q}}]
contexts: [{name: i, context: {cluster: i, user: admin}}]
current-context: i
`, k.srv.URL, base64.StdEncoding.EncodeToString(ca), adminToken)
}

// accessor is a provider.KubeAccessor for the instances named in it.
type accessor struct {
	k     *kubeAPI
	names map[string]bool
}

func (a accessor) Kubeconfig(ctx context.Context, name string) ([]byte, error) {
	if !a.names[name] {
		return nil, fmt.Errorf("test: %s: %w", name, provider.ErrNotFound)
	}
	return a.k.kubeconfig(), nil
}

// kubeEnv is an API with two stored instances, web-1 and web-2, whose API server is kube.
type kubeEnv struct {
	srv    *httptest.Server
	st     store.Store
	kube   *kubeAPI
	clock  *clocktesting.FakeClock
	events *eventstest.Recorder
}

func newKubeEnv(t *testing.T) *kubeEnv {
	e := &kubeEnv{st: memory.New(), kube: newKubeAPI(t), clock: clocktesting.NewFakeClock(time.Now()), events: &eventstest.Recorder{}}
	for _, name := range []string{"web-1", "web-2"} {
		in := &v1alpha1.Instance{Metadata: v1alpha1.ObjectMeta{Name: name},
			Spec: v1alpha1.InstanceSpec{Fleet: "web", Revision: "r1", Region: "local", Provider: "local"}}
		op, err := store.PutOp(store.Instances, in)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.st.Txn(context.Background(), op); err != nil {
			t.Fatal(err)
		}
	}
	e.srv = httptest.NewServer(New(Options{Store: e.st, Token: token, Clock: e.clock, Events: e.events,
		KubeAccess: map[string]provider.KubeAccessor{"local": accessor{k: e.kube, names: map[string]bool{"web-1": true, "web-2": true}}}}))
	t.Cleanup(e.srv.Close)
	return e
}

func (e *kubeEnv) issue(t *testing.T, name string) KubeconfigResponse {
	t.Helper()
	code, body := call(t, e.srv, token, "POST", "/v1/instances/"+name+"/kubeconfig", "")
	if code != http.StatusOK {
		t.Fatalf("issue a kubeconfig for %s: %d %s", name, code, body)
	}
	var kr KubeconfigResponse
	if err := json.Unmarshal([]byte(body), &kr); err != nil {
		t.Fatal(err)
	}
	return kr
}

func TestKubeProxyForwardsWithHerdsCredentials(t *testing.T) {
	e := newKubeEnv(t)
	kr := e.issue(t, "web-1")
	if kr.Path != "/v1/instances/web-1/kube" || !strings.HasPrefix(kr.Token, kubeTokenPrefix) {
		t.Fatalf("response %+v", kr)
	}
	code, body := call(t, e.srv, kr.Token, "GET", kr.Path+"/api/v1/namespaces", "")
	if code != http.StatusOK || !strings.Contains(body, "NamespaceList") {
		t.Fatalf("GET through the proxy: %d %s", code, body)
	}
	for _, a := range e.kube.seen() {
		if a != "Bearer "+adminToken {
			t.Fatalf("the instance's API server saw Authorization %q, want herd's own credentials only", a)
		}
	}
	if n := e.events.Count(EventKubeconfigIssued); n != 1 {
		t.Fatalf("%d %s events, want 1", n, EventKubeconfigIssued)
	}
	for _, ev := range e.events.Events() {
		if strings.Contains(ev.Message, kr.Token) || ev.Object != "Instance/web-1" {
			t.Fatalf("event %+v: want it on Instance/web-1, naming no token", ev)
		}
	}
}

// TestKubeProxyUpgrades passes the connection upgrades of kubectl exec, attach and port-forward
// (websockets, and SPDY that kubectl falls back to) to an instance's API server that speaks
// HTTP/2, and what is written on the upgraded connection both ways.
func TestKubeProxyUpgrades(t *testing.T) {
	e := newKubeEnv(t)
	kr := e.issue(t, "web-1")
	for _, proto := range []string{"websocket", "SPDY/3.1"} {
		t.Run(proto, func(t *testing.T) {
			conn, err := net.DialTimeout("tcp", strings.TrimPrefix(e.srv.URL, "http://"), 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			fmt.Fprintf(conn, "POST %s/api/v1/namespaces/default/pods/hello-abc/exec?command=date HTTP/1.1\r\nHost: herd\r\n"+
				"Authorization: Bearer %s\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\n", kr.Path, kr.Token, proto)
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Upgrade") != proto {
				body, _ := io.ReadAll(resp.Body)
				t.Fatalf("upgrade to %s through the proxy: %s %s, want 101 Switching Protocols", proto, resp.Status, body)
			}
			fmt.Fprint(conn, "ping\n")
			if line, err := br.ReadString('\n'); err != nil || line != "ping\n" {
				t.Fatalf("the upgraded connection echoed %q, %v; want ping", line, err)
			}
		})
	}
}

func TestKubeProxyRefusesBadTokens(t *testing.T) {
	e := newKubeEnv(t)
	kr1 := e.issue(t, "web-1")
	kr2 := e.issue(t, "web-2")
	for _, tc := range []struct {
		name, tok, path string
		want            int
	}{
		{"none", "", kr1.Path + "/api/v1/namespaces", http.StatusUnauthorized},
		{"wrong", kubeTokenPrefix + strings.Repeat("0", 64), kr1.Path + "/api/v1/namespaces", http.StatusUnauthorized},
		{"herd's own token", token, kr1.Path + "/api/v1/namespaces", http.StatusUnauthorized},
		{"another instance's", kr2.Token, kr1.Path + "/api/v1/namespaces", http.StatusForbidden},
		{"kube token elsewhere in the API", kr1.Token, "/v1/fleets", http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(e.kube.seen())
			if code, body := call(t, e.srv, tc.tok, "GET", tc.path, ""); code != tc.want {
				t.Fatalf("GET %s: %d %s, want %d", tc.path, code, body, tc.want)
			}
			if n := len(e.kube.seen()); n != before {
				t.Fatalf("a refused request reached the instance's API server")
			}
		})
	}
	t.Run("expired", func(t *testing.T) {
		e.clock.Step(DefaultKubeTokenTTL - time.Second)
		if code, body := call(t, e.srv, kr1.Token, "GET", kr1.Path+"/api/v1/namespaces", ""); code != http.StatusOK {
			t.Fatalf("a second before expiry: %d %s", code, body)
		}
		e.clock.Step(time.Second)
		if code, _ := call(t, e.srv, kr1.Token, "GET", kr1.Path+"/api/v1/namespaces", ""); code != http.StatusUnauthorized {
			t.Fatalf("at expiry: %d, want 401", code)
		}
	})
}

func TestKubeconfigOfUnknownInstance(t *testing.T) {
	e := newKubeEnv(t)
	code, body := call(t, e.srv, token, "POST", "/v1/instances/nope/kubeconfig", "")
	if code != http.StatusNotFound || !strings.Contains(body, "herd get instances") {
		t.Fatalf("%d %s, want 404 naming herd get instances", code, body)
	}
	if e.events.Count(EventKubeconfigIssued) != 0 {
		t.Fatal("an event was recorded for a refused request")
	}
}

func TestKubeRoute(t *testing.T) {
	for _, tc := range []struct {
		path, name, rest string
		ok               bool
	}{
		{"/v1/instances/web-1/kube/api/v1/pods", "web-1", "/api/v1/pods", true},
		{"/v1/instances/web-1/kube", "web-1", "/", true},
		{"/v1/instances/web-1/kubeconfig", "", "", false},
		{"/v1/instances/web-1/logs", "", "", false},
		{"/v1/instances/Bad_Name/kube/api", "", "", false},
		{"/v1/fleets/web/kube/api", "", "", false},
	} {
		name, rest, ok := kubeRoute(tc.path)
		if name != tc.name || rest != tc.rest || ok != tc.ok {
			t.Errorf("kubeRoute(%q) = %q %q %v, want %q %q %v", tc.path, name, rest, ok, tc.name, tc.rest, tc.ok)
		}
	}
}
