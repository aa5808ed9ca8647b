package apiserver

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestInstanceLogsAreTagged(t *testing.T) {
	e := newKubeEnv(t)
	code, body := call(t, e.srv, token, "GET", "/v1/instances/web-1/logs?tail=5", "")
	if code != http.StatusOK {
		t.Fatalf("%d %s", code, body)
	}
	var got []LogLine
	for _, line := range strings.Split(strings.TrimSpace(body), "\n") {
		var l LogLine
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		got = append(got, l)
	}
	want := LogLine{Fleet: "web", Region: "local", Revision: "r1", Instance: "web-1", Namespace: "default", Pod: "hello-abc",
		Container: "hello", Time: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), Message: "hello: serving on :8080"}
	if len(got) != 2 || got[0] != want || got[1].Message != "second line tail=5" {
		t.Fatalf("got %+v\nwant the kube-system pod left out and first %+v, then the second line with tail=5", got, want)
	}
}

func TestInstanceLogsBadInput(t *testing.T) {
	e := newKubeEnv(t)
	for _, tc := range []struct {
		path string
		code int
		want string
	}{
		{"/v1/instances/nope/logs", http.StatusNotFound, "see herd get instances"},
		{"/v1/instances/web-1/logs?pod=missing", http.StatusNotFound, "its pods: default/hello-abc, kube-system/coredns-1"},
		{"/v1/instances/web-1/logs?container=sidecar", http.StatusNotFound, "its containers (pod/container): hello-abc/hello"},
		{"/v1/instances/web-1/logs?since=yesterday", http.StatusBadRequest, "--since"},
		{"/v1/instances/web-1/logs?tail=-2", http.StatusBadRequest, "--tail"},
	} {
		code, body := call(t, e.srv, token, "GET", tc.path, "")
		if code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("GET %s: %d %s, want %d with %q", tc.path, code, body, tc.code, tc.want)
		}
	}
	// A pod named by namespace/name is found; the stand-in has no log for it, which its stream
	// reports as an error line of that pod.
	code, body := call(t, e.srv, token, "GET", "/v1/instances/web-1/logs?pod=kube-system/coredns-1", "")
	if code != http.StatusOK || !strings.Contains(body, `"pod":"coredns-1"`) || !strings.Contains(body, `"error":`) {
		t.Errorf("a pod named by namespace/name: %d %s, want 200 and an error line of coredns-1", code, body)
	}
}
