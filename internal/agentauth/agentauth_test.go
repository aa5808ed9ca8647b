package agentauth_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"herd.dev/herd/internal/agentauth"
)

func TestOpenKeepsOneKeyForEveryone(t *testing.T) {
	dir := t.TempDir()
	creds := make([]string, 8)
	var wg sync.WaitGroup
	for i := range creds {
		wg.Go(func() {
			k, err := agentauth.Open(dir)
			if err != nil {
				t.Error(err)
				return
			}
			creds[i] = k.Credential("web-1")
		})
	}
	wg.Wait()
	for _, c := range creds {
		if c != creds[0] || c == "" {
			t.Fatalf("processes opening one data directory got different credentials: %q", creds)
		}
	}
	k, _ := agentauth.Open(dir)
	if k.Credential("web-2") == creds[0] {
		t.Fatal("two instances got the same credential")
	}
	other, _ := agentauth.Open(t.TempDir())
	if other.Credential("web-1") == creds[0] {
		t.Fatal("another data directory's key gave the same credential")
	}
}

func TestRequireRefusesWithoutTheCredentialAndProvesItself(t *testing.T) {
	k, err := agentauth.NewKeyring([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	cred := k.Credential("web-1")
	srv := httptest.NewServer(agentauth.Require(cred, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	})))
	defer srv.Close()
	get := func(credential string, set bool) (*http.Response, func(*http.Response) error) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/readyz", nil)
		verify := func(*http.Response) error { return nil }
		if set {
			verify = agentauth.Authorize(req, credential)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp, verify
	}
	if resp, _ := get("", false); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("without a credential: %s, want 401", resp.Status)
	}
	if resp, verify := get(k.Credential("web-2"), true); resp.StatusCode != http.StatusUnauthorized || verify(resp) == nil {
		t.Fatalf("with another instance's credential: %s, want 401 and a failed check", resp.Status)
	}
	resp, verify := get(cred, true)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("with the credential: %s, want 200", resp.Status)
	}
	if err := verify(resp); err != nil {
		t.Fatalf("the agent's answer was not taken as proof: %v", err)
	}
	// An impostor that answers 200 to anything does not pass for the agent.
	impostor := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer impostor.Close()
	req, _ := http.NewRequest(http.MethodGet, impostor.URL, nil)
	verify = agentauth.Authorize(req, cred)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if verify(resp) == nil {
		t.Fatal("an answer without the proof was taken for the agent's")
	}
}
