package agent

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestRequestKind(t *testing.T) {
	for _, c := range []struct{ method, url, verb, resource string }{
		{"GET", "/api/v1/pods?resourceVersion=0", "list", "pods"},
		{"GET", "/api/v1/pods?watch=true&resourceVersion=5", "watch", "pods"},
		{"GET", "/api/v1/nodes/n1", "get", "nodes"},
		{"GET", "/api/v1/namespaces/kube-system", "get", "namespaces"},
		{"GET", "/api/v1/namespaces/default/pods/p/log?container=c", "get", "pods/log"},
		{"GET", "/apis/apps/v1/namespaces/default/deployments?fieldSelector=metadata.name%3Dhello", "list", "deployments"},
		{"PUT", "/apis/apps/v1/namespaces/default/deployments/hello/status", "update", "deployments/status"},
		{"POST", "/api/v1/namespaces/default/configmaps", "create", "configmaps"},
		{"PATCH", "/apis/apps/v1/namespaces/default/deployments/hello", "patch", "deployments"},
		{"DELETE", "/api/v1/namespaces/default/pods/p", "delete", "pods"},
		{"GET", "/readyz", "get", "/readyz"},
	} {
		verb, resource := requestKind(httptest.NewRequest(c.method, c.url, nil))
		if verb != c.verb || resource != c.resource {
			t.Errorf("%s %s: %s %s, want %s %s", c.method, c.url, verb, resource, c.verb, c.resource)
		}
	}
}

func TestAPICallsCount(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	c := newAPICalls()
	client := &http.Client{Transport: c.wrap(http.DefaultTransport)}
	for range 2 {
		resp, err := client.Get(srv.URL + "/api/v1/pods?watch=true")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if n := testutil.ToFloat64(c.total.WithLabelValues("watch", "pods")); n != 2 {
		t.Errorf("watch pods counted %v times, want 2", n)
	}
}

func TestPodCountsOnlyKeepsWhatIsCounted(t *testing.T) {
	in := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"name": "p", "namespace": "default", "uid": "u1", "resourceVersion": "7",
			"managedFields": []any{map[string]any{"manager": "kubelet"}}},
		"spec": map[string]any{"containers": []any{map[string]any{"name": "c", "image": "i"}}},
		"status": map[string]any{"phase": "Running", "containerStatuses": []any{
			map[string]any{"name": "c", "restartCount": int64(3), "image": "i"},
		}},
	}}
	out, err := podCountsOnly(in)
	if err != nil {
		t.Fatal(err)
	}
	u := out.(*unstructured.Unstructured)
	if u.GetName() != "p" || u.GetNamespace() != "default" || u.GetResourceVersion() != "7" || u.Object["spec"] != nil || u.GetManagedFields() != nil {
		t.Errorf("kept %v", u.Object)
	}
	phases, restarts := podCounts([]unstructured.Unstructured{*u})
	if phases["Running"] != 1 || restarts != 3 {
		t.Errorf("phases %v restarts %d from %v", phases, restarts, u.Object)
	}
}
