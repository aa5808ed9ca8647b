package cli

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/apiserver"
	"herd.dev/herd/internal/client"
)

// logsAPI stands in for herd up's API: fleet web's instances as the test sets them, and each
// instance's log as one line, then (with follow) nothing more until the client goes.
type logsAPI struct {
	mu        sync.Mutex
	instances []v1alpha1.Instance
}

func (a *logsAPI) add(name string, phase v1alpha1.InstancePhase) {
	a.mu.Lock()
	defer a.mu.Unlock()
	in := v1alpha1.Instance{Metadata: v1alpha1.ObjectMeta{Name: name}}
	in.Spec.Fleet, in.Status.Phase = "web", phase
	a.instances = append(a.instances, in)
}

func (a *logsAPI) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/fleets/web", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: "web"}})
	})
	mux.HandleFunc("GET /v1/instances", func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		defer a.mu.Unlock()
		_ = json.NewEncoder(w).Encode(a.instances)
	})
	mux.HandleFunc("GET /v1/instances/{name}/logs", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		_ = json.NewEncoder(w).Encode(apiserver.LogLine{Instance: name, Pod: "hello", Container: "hello", Message: "hello from " + name})
		w.(http.Flusher).Flush()
		if r.URL.Query().Get("follow") == "true" {
			<-r.Context().Done()
		}
	})
	return mux
}

// syncBuilder is a strings.Builder safe to read while the command writes.
type syncBuilder struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuilder) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuilder) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestLogsFollowFleetPicksUpNewInstances starts `herd logs fleet/web -f` with one instance and
// checks that an instance that becomes Ready later is followed too, and a booting one not yet.
func TestLogsFollowFleetPicksUpNewInstances(t *testing.T) {
	old := followInterval
	followInterval = 20 * time.Millisecond
	t.Cleanup(func() { followInterval = old })
	api := &logsAPI{}
	api.add("web-aaaaa", v1alpha1.PhaseReady)
	srv := httptest.NewServer(api.handler())
	t.Cleanup(srv.Close)
	config := filepath.Join(t.TempDir(), "config")
	if err := client.SaveConfig(config, &client.Config{Server: srv.URL, Token: "0123456789abcdef0123456789abcdef"}); err != nil {
		t.Fatal(err)
	}

	var out, errOut syncBuilder
	cmd := NewRootCmd(&out, &errOut)
	cmd.SetArgs([]string{"--config", config, "logs", "fleet/web", "-f"})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()

	waitFor := func(want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(out.String(), want) {
			if time.Now().After(deadline) {
				t.Fatalf("no %q after 10s; output:\n%s\nerrors:\n%s", want, out.String(), errOut.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitFor("web-aaaaa hello/hello hello from web-aaaaa")
	api.add("web-bbbbb", v1alpha1.PhaseBooting)
	api.add("web-ccccc", v1alpha1.PhaseReady)
	waitFor("web-ccccc hello/hello hello from web-ccccc")
	if strings.Contains(out.String(), "web-bbbbb") {
		t.Errorf("a booting instance was followed before it was Ready:\n%s", out.String())
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("herd logs -f ended with %v after Ctrl-C, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("herd logs -f did not end after its context did")
	}
	if n := strings.Count(out.String(), "hello from web-ccccc"); n != 1 {
		t.Errorf("web-ccccc followed %d times, want once:\n%s", n, out.String())
	}
	if e := errOut.String(); e != "" {
		t.Errorf("warnings: %s", e)
	}
}
