package netlab

import (
	"math/rand/v2"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

func FuzzParseShape(f *testing.F) {
	for _, s := range []string{"40ms", "-1s", "1%", "0.5", "100%", "1e309", "NaN", "%", ""} {
		f.Add(s, s, s)
	}
	f.Fuzz(func(t *testing.T, latency, jitter, loss string) {
		s, errs := ParseShape(field.NewPath("options"), map[string]string{"latency": latency, "jitter": jitter, "loss": loss})
		if len(errs) > 0 {
			return
		}
		if s.Latency < 0 || s.Latency > MaxShapeDelay || s.Jitter < 0 || s.Jitter > MaxShapeDelay || !(s.Loss >= 0 && s.Loss <= 1) {
			t.Fatalf("accepted an out-of-range shape %+v", s)
		}
	})
}

func TestShapeDelaysAndDrops(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	s := Shape{Latency: 40 * time.Millisecond, Jitter: 10 * time.Millisecond}
	for range 1000 {
		if d := s.oneWayDelay(rnd); d < 15*time.Millisecond || d > 25*time.Millisecond {
			t.Fatalf("one-way delay %s outside 20ms ± 5ms", d)
		}
	}
	if d := (Shape{Latency: time.Millisecond, Jitter: time.Second}).oneWayDelay(rnd); d < 0 {
		t.Fatalf("negative delay %s", d)
	}
	dropped := 0
	for range 10000 {
		if (Shape{Loss: 0.2}).drops(rnd) {
			dropped++
		}
	}
	if dropped < 1500 || dropped > 2500 {
		t.Errorf("loss 20%% dropped %d of 10000", dropped)
	}
	if (Shape{}).drops(rnd) || !(Shape{Loss: 1}).drops(rnd) {
		t.Error("loss 0 drops, or loss 1 passes")
	}
}
