package cpmetrics

import (
	"testing"

	"k8s.io/client-go/util/workqueue"

	"herd.dev/herd/internal/promtest"
)

// A real client-go queue made with QueueMetrics reports its depth, adds, retries and the time
// keys waited and were worked on, under the queue's name.
func TestQueueMetricsFollowAQueue(t *testing.T) {
	m := NewQueueMetrics()
	q := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "fleets", MetricsProvider: m})
	defer q.ShutDown()
	q.Add("a")
	q.Add("b")
	q.Add("a") // already waiting: not added twice
	key, _ := q.Get()
	q.Done(key)
	q.AddRateLimited("c")

	got := promtest.Gather(t, m)
	for name, want := range map[string]float64{
		"herd_workqueue_depth":                  1, // b
		"herd_workqueue_adds_total":             2, // a and b; c waits for its delay
		"herd_workqueue_retries_total":          1,
		"herd_workqueue_queue_duration_seconds": 1, // a waited, then was taken
		"herd_workqueue_work_duration_seconds":  1,
	} {
		if v, ok := got[name]["name=fleets"]; !ok || v != want {
			t.Errorf("%s{name=fleets} = %v (present %v), want %v; all: %v", name, v, ok, want, got[name])
		}
	}
}
