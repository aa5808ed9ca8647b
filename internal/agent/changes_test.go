package agent

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// An idle monitor asks the API server nothing: it evaluates (reads the node and the workloads)
// when a watch reports a change, not on a timer. The server lists nothing, holds each watch open,
// and sends the node's ADDED event only when the test says so.
func TestMonitorEvaluatesOnAWatchEvent(t *testing.T) {
	var mu sync.Mutex
	gets := map[string]int{}      // path -> GETs of one object
	watching := map[string]bool{} // collection path -> a watch is open
	send := make(chan struct{})
	types := map[string]string{ // collection path -> the type of its objects
		"/api/v1/nodes": `"apiVersion":"v1","kind":"Node"`,
		"/apis/apps/v1/namespaces/default/deployments": `"apiVersion":"apps/v1","kind":"Deployment"`,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		switch {
		case q.Get("watch") == "true":
			mu.Lock()
			watching[r.URL.Path] = true
			mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			if q.Get("sendInitialEvents") == "true" {
				// An informer's list as one watch (client-go's watch-list, which Kubernetes
				// 1.32 and later serve): the initial events, none here, end with this bookmark.
				fmt.Fprintf(w, `{"type":"BOOKMARK","object":{%s,"metadata":{"resourceVersion":"1","annotations":{"k8s.io/initial-events-end":"true"}}}}`+"\n", types[r.URL.Path])
			}
			w.(http.Flusher).Flush()
			if r.URL.Path == "/api/v1/nodes" {
				select {
				case <-send:
					fmt.Fprintln(w, `{"type":"ADDED","object":{"apiVersion":"v1","kind":"Node","metadata":{"name":"n1","resourceVersion":"2"}}}`)
					w.(http.Flusher).Flush()
				case <-r.Context().Done():
					return
				}
			}
			<-r.Context().Done()
		case q.Has("fieldSelector"): // an informer's list
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintln(w, `{"apiVersion":"v1","kind":"List","metadata":{"resourceVersion":"1"},"items":[]}`)
		default:
			mu.Lock()
			gets[r.URL.Path]++
			mu.Unlock()
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	a := helloAgent(t, srv.URL)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.monitor(ctx, newFakeNode(), time.Hour) }()

	until := func(what string, cond func() bool) {
		t.Helper()
		err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			mu.Lock()
			defer mu.Unlock()
			return cond(), nil
		})
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	until("the monitor's watches", func() bool {
		return watching["/api/v1/nodes"] && watching["/apis/apps/v1/namespaces/default/deployments"]
	})
	mu.Lock()
	before := gets["/api/v1/nodes/n1"]
	mu.Unlock()
	if before != 0 {
		t.Errorf("the monitor read the node %d times with nothing changed", before)
	}
	close(send)
	until("a read of the node after its watch's event", func() bool { return gets["/api/v1/nodes/n1"] > 0 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if l := a.live.Load(); l == nil || l.ready {
		t.Errorf("monitor's verdict %+v, want not ready (the node's GET found nothing)", l)
	}
}
