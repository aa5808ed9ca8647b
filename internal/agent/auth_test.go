package agent

import (
	"fmt"
	"net/http"
	"testing"

	"herd.dev/herd/internal/agentauth"
)

// testCredential is the credential the agents of these tests are started with.
const testCredential = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// TestEndpointsRefuseWithoutTheCredential: the agent's port answers only requests that carry the
// instance's credential, on every endpoint, and its answers prove that it holds it.
func TestEndpointsRefuseWithoutTheCredential(t *testing.T) {
	r := startRun(t, &fakeDistro{name: "upstream", node: newFakeNode()}, makeBundle(t, "upstream", map[string]string{"a.yaml": okManifest}), nil)
	r.waitLive(t)
	for _, path := range []string{"/livez", "/readyz", "/metrics"} {
		for _, cred := range []string{"", "Bearer", "not-the-credential"} {
			req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d%s", r.cfg.Port, path), nil)
			if cred != "" {
				agentauth.Authorize(req, cred)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("GET %s with credential %q: %s, want 401", path, cred, resp.Status)
			}
		}
	}
}
