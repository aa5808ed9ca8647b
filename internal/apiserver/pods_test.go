package apiserver

import (
	"encoding/json"
	"net/http"
	"testing"
)

func TestInstancePods(t *testing.T) {
	e := newKubeEnv(t)
	code, body := call(t, e.srv, token, "GET", "/v1/instances/web-1/pods", "")
	if code != http.StatusOK {
		t.Fatalf("%d %s", code, body)
	}
	var pods []PodSummary
	if err := json.Unmarshal([]byte(body), &pods); err != nil {
		t.Fatal(err)
	}
	want := PodSummary{Namespace: "default", Name: "hello-abc", Phase: "Running", Ready: 1, Containers: 1, Restarts: 2, PodIP: "10.0.0.5"}
	if len(pods) != 2 || pods[0] != want || pods[1].Namespace != "kube-system" || pods[1].Ready != 0 {
		t.Fatalf("pods = %+v, want %+v then kube-system's coredns-1, not ready", pods, want)
	}
	if code, body := call(t, e.srv, token, "GET", "/v1/instances/nope/pods", ""); code != http.StatusNotFound {
		t.Errorf("pods of a missing instance: %d %s, want 404", code, body)
	}
	if code, _ := call(t, e.srv, "wrong", "GET", "/v1/instances/web-1/pods", ""); code != http.StatusUnauthorized {
		t.Errorf("pods with a wrong token: %d, want 401", code)
	}
}
