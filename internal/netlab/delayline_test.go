package netlab

import (
	"testing"
	"time"
)

// drain returns the packets of the line in the order they leave.
func drain(l *delayLine) []string {
	var out []string
	for l.Len() > 0 {
		out = append(out, string(l.take().pkt))
	}
	return out
}

func TestDelayLineNearOvertakesFar(t *testing.T) {
	t0 := time.Unix(1700000000, 0)
	var s scheduler
	var l delayLine
	// A client with 50 ms more to the far region sends to it, then to the near region 1 ms later.
	l.add(s.schedule([]byte("far"), t0, 55*time.Millisecond, 50*time.Millisecond))
	l.add(s.schedule([]byte("near"), t0.Add(time.Millisecond), 5*time.Millisecond, 0))
	if at, _ := l.next(); !at.Equal(t0.Add(6 * time.Millisecond)) {
		t.Errorf("first due at +%s, want +6ms: the near packet must not wait for the far one", at.Sub(t0))
	}
	if got := drain(&l); len(got) != 2 || got[0] != "near" || got[1] != "far" {
		t.Errorf("left in order %v, want [near far]", got)
	}
}

func TestDelayLineKeepsClassOrder(t *testing.T) {
	t0 := time.Unix(1700000000, 0)
	var s scheduler
	var l delayLine
	// Jitter gives the second packet of a class a shorter delay: it still leaves after the first,
	// at the same time, while a packet of another class is not held back by either.
	a := s.schedule([]byte("a1"), t0, 30*time.Millisecond, 0)
	b := s.schedule([]byte("a2"), t0.Add(time.Millisecond), 10*time.Millisecond, 0)
	c := s.schedule([]byte("b1"), t0.Add(2*time.Millisecond), 12*time.Millisecond, 7*time.Millisecond)
	if !b.due.Equal(a.due) {
		t.Errorf("a2 due at +%s, want +%s with a1 (never before an earlier packet of its class)", b.due.Sub(t0), a.due.Sub(t0))
	}
	if !c.due.Equal(t0.Add(14 * time.Millisecond)) {
		t.Errorf("b1 due at +%s, want +14ms (another class is not held back)", c.due.Sub(t0))
	}
	for _, d := range []delayed{b, c, a} {
		l.add(d)
	}
	if got := drain(&l); len(got) != 3 || got[0] != "b1" || got[1] != "a1" || got[2] != "a2" {
		t.Errorf("left in order %v, want [b1 a1 a2]", got)
	}
	if _, ok := l.next(); ok {
		t.Error("an empty line has a next packet")
	}
}
