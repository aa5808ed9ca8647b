package autoscaler

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

type step struct {
	at   float64 // seconds from t0
	in   Sample  // Time is filled from at
	want int
}

func TestDecide(t *testing.T) {
	rps := Config{Metric: RequestsPerSecond, Target: 100, Min: 1, Max: 10, ScaleInStabilization: 60 * time.Second}
	tests := []struct {
		name  string
		cfg   Config
		steps []step
	}{
		{"on target stays", rps, []step{
			{0, Sample{Value: 300, Desired: 3, Ready: 3}, 3},
			{5, Sample{Value: 320, Desired: 3, Ready: 3}, 3}, // within 10% tolerance
		}},
		{"4x load scales out once sustained", rps, []step{
			{0, Sample{Value: 100, Desired: 1, Ready: 1}, 1},
			{1, Sample{Value: 400, Desired: 1, Ready: 1}, 1}, // breach starts
			{1.5, Sample{Value: 400, Desired: 1, Ready: 1}, 1},
			{2, Sample{Value: 400, Desired: 1, Ready: 1}, 4}, // sustained 1 s
		}},
		{"booting capacity is not doubled", rps, []step{
			{0, Sample{Value: 400, Desired: 1, Ready: 1}, 1},
			{1, Sample{Value: 400, Desired: 1, Ready: 1}, 4},
			{2, Sample{Value: 400, Desired: 4, Ready: 1, Booting: 3}, 4},
			{5, Sample{Value: 400, Desired: 4, Ready: 1, Booting: 3}, 4},
		}},
		{"clamped to max", rps, []step{
			{0, Sample{Value: 5000, Desired: 2, Ready: 2}, 2},
			{1, Sample{Value: 5000, Desired: 2, Ready: 2}, 10},
		}},
		{"a short spike is not sustained", rps, []step{
			{0, Sample{Value: 900, Desired: 2, Ready: 2}, 2},
			{0.5, Sample{Value: 150, Desired: 2, Ready: 2}, 2},
			{1.5, Sample{Value: 900, Desired: 2, Ready: 2}, 2},
		}},
		{"scale-in waits for the window and follows its highest recommendation", rps, []step{
			{0, Sample{Value: 400, Desired: 4, Ready: 4}, 4},
			{30, Sample{Value: 250, Desired: 4, Ready: 4}, 4},
			{59, Sample{Value: 50, Desired: 4, Ready: 4}, 4}, // window not yet full
			{61, Sample{Value: 50, Desired: 4, Ready: 4}, 3}, // 400 has left the window; 250 -> 3
			{95, Sample{Value: 50, Desired: 3, Ready: 3}, 1}, // everything in the window asks for 1
		}},
		{"a lull inside the window does not scale in", rps, []step{
			{0, Sample{Value: 300, Desired: 3, Ready: 3}, 3},
			{61, Sample{Value: 300, Desired: 3, Ready: 3}, 3},
			{70, Sample{Value: 10, Desired: 3, Ready: 3}, 3},
		}},
		{"scale to zero when idle for the window", Config{Metric: RequestsPerSecond, Target: 100, Min: 0, Max: 5, ScaleInStabilization: 10 * time.Second}, []step{
			{0, Sample{Value: 0, Desired: 1, Ready: 1}, 1},
			{11, Sample{Value: 0, Desired: 1, Ready: 1}, 0},
		}},
		{"queued requests scale from zero at once", Config{Metric: RequestsPerSecond, Target: 100, Min: 0, Max: 5}, []step{
			{0, Sample{Value: 0, Desired: 0, Queued: 3}, 1},
		}},
		{"held requests keep the first instance while it boots", Config{Metric: RequestsPerSecond, Target: 100, Min: 0, Max: 5, ScaleInStabilization: 2 * time.Second}, []step{
			{0, Sample{Value: 0, Desired: 1, Ready: 1}, 1},
			{3, Sample{Value: 0, Desired: 1, Ready: 1}, 0},
			{4, Sample{Value: 0, Desired: 0, Queued: 1}, 1},
			{8, Sample{Value: 0, Desired: 1, Booting: 1, Queued: 1}, 1}, // a whole window with no finished request
		}},
		{"cpu scales by ratio of the serving count", Config{Metric: CPU, Target: 50, Min: 1, Max: 20}, []step{
			{0, Sample{Value: 100, Desired: 3, Ready: 3}, 3},
			{1, Sample{Value: 100, Desired: 3, Ready: 3}, 6},
			{2, Sample{Value: 100, Desired: 6, Ready: 3, Booting: 3}, 6}, // same ratio on the same ready count
		}},
		{"latency above target scales out", Config{Metric: LatencyP95, Target: 200, Min: 1, Max: 20}, []step{
			{0, Sample{Value: 500, Desired: 2, Ready: 2}, 2},
			{2, Sample{Value: 500, Desired: 2, Ready: 2}, 5},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New(tt.cfg)
			for i, st := range tt.steps {
				st.in.Time = at(st.at)
				got := s.Decide(st.in)
				if got.Desired != st.want {
					t.Fatalf("step %d (t=%gs, %+v): desired %d (%s), want %d", i, st.at, st.in, got.Desired, got.Reason, st.want)
				}
				if got.Reason == "" {
					t.Fatalf("step %d: no reason given", i)
				}
			}
		})
	}
}
