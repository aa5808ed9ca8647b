package apiserver

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"herd.dev/herd/internal/store/memory"
)

// GET /v1/rtt and GET /v1/front answer what the control plane reports, behind the token, and an
// empty list or front door when it reports nothing.
func TestGlobalRouting(t *testing.T) {
	bare, _ := newServer(t)
	for path, want := range map[string]string{"/v1/rtt": "[]\n", "/v1/front": `{"listeners":[],"synced":false}` + "\n"} {
		if code, body := call(t, bare, token, http.MethodGet, path, ""); code != http.StatusOK || body != want {
			t.Errorf("GET %s without reports: %d %q, want %q", path, code, body, want)
		}
		if code, _ := call(t, bare, "", http.MethodGet, path, ""); code != http.StatusUnauthorized {
			t.Errorf("GET %s without the token: %d, want 401", path, code)
		}
	}
	srv := httptest.NewServer(New(Options{Store: memory.New(), Token: token,
		ClientRTTs: func() []ClientRTT {
			return []ClientRTT{{Network: "10.216.1.0/24", Region: "eu", SRTTms: 10.5, Samples: 2}}
		},
		Front: func() FrontDoor {
			return FrontDoor{Address: "10.216.0.3", Synced: true, Listeners: []FrontListener{{Name: "web/http", Fleet: "web", Port: 8080, Regions: []string{"eu"}}}}
		},
	}))
	t.Cleanup(srv.Close)
	if code, body := call(t, srv, token, http.MethodGet, "/v1/rtt", ""); code != http.StatusOK ||
		body != `[{"network":"10.216.1.0/24","region":"eu","srtt_ms":10.5,"samples":2,"last_seen":"0001-01-01T00:00:00Z"}]`+"\n" {
		t.Errorf("GET /v1/rtt: %d %s", code, body)
	}
	if code, body := call(t, srv, token, http.MethodGet, "/v1/front", ""); code != http.StatusOK ||
		body != `{"address":"10.216.0.3","listeners":[{"name":"web/http","fleet":"web","port":8080,"regions":["eu"]}],"synced":true}`+"\n" {
		t.Errorf("GET /v1/front: %d %s", code, body)
	}
}
