package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestRootNamesInstanceAndRevision(t *testing.T) {
	c, err := loadConfig(env(map[string]string{"NODE_NAME": "hello-abc", "POD_NAME": "hello-1", "REVISION": "v2"}))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(handler(c, func() bool { return false }))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got reply
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || got.Instance != "hello-abc" || got.Pod != "hello-1" || got.Revision != "v2" {
		t.Fatalf("got %d %+v", resp.StatusCode, got)
	}
}

func TestInjectedFailureAndHealth(t *testing.T) {
	c, err := loadConfig(env(map[string]string{"FAIL_PERCENT": "100"}))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(handler(c, func() bool { return true }))
	defer srv.Close()
	for path, want := range map[string]int{"/": 500, "/healthz": 200, "/nope": 404} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, want)
		}
	}
}

func TestLoadConfig(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		wantErr bool
		check   func(config) bool
	}{
		{"defaults", nil, false, func(c config) bool {
			return c.port == "8080" && c.revision == "dev" && c.failPercent == 0 && c.delay == 0
		}},
		{"knobs", map[string]string{"FAIL_PERCENT": "12.5", "DELAY": "20ms", "PORT": "9000"}, false, func(c config) bool {
			return c.failPercent == 12.5 && c.delay == 20*time.Millisecond && c.port == "9000"
		}},
		{"fail percent too high", map[string]string{"FAIL_PERCENT": "101"}, true, nil},
		{"fail percent not a number", map[string]string{"FAIL_PERCENT": "lots"}, true, nil},
		{"bad delay", map[string]string{"DELAY": "soon"}, true, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := loadConfig(env(tt.env))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if tt.check != nil && !tt.check(c) {
				t.Fatalf("config %+v", c)
			}
		})
	}
}

func TestUpstreamRelaysAnotherService(t *testing.T) {
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTeapot)
		_, _ = w.Write([]byte(`{"revision":"other"}`))
	}))
	defer other.Close()
	for _, tt := range []struct {
		upstream string
		status   int
		body     string
	}{
		{other.URL + "/", http.StatusTeapot, `{"revision":"other"}`},
		{"", http.StatusNotFound, "no UPSTREAM is set\n"},
		{"http://127.0.0.1:1/", http.StatusBadGateway, ""},
	} {
		c, err := loadConfig(env(map[string]string{"UPSTREAM": tt.upstream}))
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(handler(c, func() bool { return false }))
		resp, err := http.Get(srv.URL + "/upstream")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		srv.Close()
		if resp.StatusCode != tt.status || (tt.body != "" && string(body) != tt.body) {
			t.Errorf("UPSTREAM=%q: GET /upstream = %d %q, want %d %q", tt.upstream, resp.StatusCode, body, tt.status, tt.body)
		}
	}
}

func TestGetPrintsStatusAndBody(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "not from "+r.Host, http.StatusForbidden)
	}))
	defer srv.Close()
	var out strings.Builder
	if err := get(srv.URL+"/", "api.herd.internal", &out); err != nil {
		t.Fatal(err)
	}
	if want := "403 Forbidden\nnot from api.herd.internal\n"; out.String() != want {
		t.Errorf("get printed %q, want %q", out.String(), want)
	}
	if err := get("http://127.0.0.1:1/", "", &out); err == nil {
		t.Error("get of a closed port: no error")
	}
}
