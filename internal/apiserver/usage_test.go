package apiserver

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/store"
	"herd.dev/herd/internal/store/memory"
)

func TestUsage(t *testing.T) {
	st := memory.New()
	var got []string // the instances the last report was asked for
	srv := httptest.NewServer(New(Options{Store: st, Token: token, Usage: func(insts []*v1alpha1.Instance) UsageReport {
		got = nil
		r := UsageReport{WindowSeconds: 10}
		for _, in := range insts {
			got = append(got, in.Metadata.Name)
			r.Instances = append(r.Instances, InstanceUsage{Fleet: in.Spec.Fleet, Instance: in.Metadata.Name})
		}
		return r
	}}))
	t.Cleanup(srv.Close)
	for _, f := range []string{"web", "api"} {
		op, _ := store.PutOp(store.Fleets, &v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: f}})
		in := &v1alpha1.Instance{Metadata: v1alpha1.ObjectMeta{Name: f + "-a"}}
		in.Spec.Fleet = f
		op2, _ := store.PutOp(store.Instances, in)
		if _, err := st.Txn(t.Context(), op, op2); err != nil {
			t.Fatal(err)
		}
	}

	code, body := call(t, srv, token, "GET", "/v1/usage?fleet=web", "")
	var r UsageReport
	if code != http.StatusOK || json.Unmarshal([]byte(body), &r) != nil || len(r.Instances) != 1 || strings.Join(got, ",") != "web-a" {
		t.Errorf("GET /v1/usage?fleet=web: %d %s (asked for %v), want web-a's figures", code, body, got)
	}
	if code, _ := call(t, srv, token, "GET", "/v1/usage", ""); code != http.StatusOK || len(got) != 2 {
		t.Errorf("GET /v1/usage: %d, asked for %v; want both instances", code, got)
	}
	if code, body := call(t, srv, token, "GET", "/v1/usage?fleet=nope", ""); code != http.StatusNotFound || !strings.Contains(body, `fleet \"nope\" not found`) {
		t.Errorf("GET /v1/usage?fleet=nope: %d %s, want 404 naming the fleet", code, body)
	}
	if code, body := call(t, srv, "", "GET", "/v1/usage", ""); code != http.StatusUnauthorized || strings.Contains(body, "web") {
		t.Errorf("GET /v1/usage without the token: %d %s", code, body)
	}

	plain, _ := newServer(t)
	if code, body := call(t, plain, token, "GET", "/v1/usage", ""); code != http.StatusNotImplemented {
		t.Errorf("GET /v1/usage of a server without usage: %d %s, want 501", code, body)
	}
}
