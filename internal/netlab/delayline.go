package netlab

import (
	"container/heap"
	"time"
)

// The delay line: the order in which a link relay lets its packets go.
//
// Packets leave when they are due, not in the order they came: a client network with an extra
// 100 ms to one region and none to another sends to both at once, and a packet to the near region
// must not wait behind one to the far region that came a moment before it (a FIFO would add the far
// region's latency to the near one whenever both are in use). Within one peer latency class the
// packets keep their order, even with jitter: TCP reads reordering as loss.

// delayed is a packet held until it is due.
type delayed struct {
	pkt []byte
	due time.Time
	seq uint64 // arrival order, to break ties between packets due at once
}

// scheduler gives each packet its due time, on the reading side of one direction of a link.
type scheduler struct {
	seq  uint64
	last map[time.Duration]time.Time // the latest due time given, per peer latency class
}

// schedule returns the packet that came now, delayed by delay, and with the peer latency class
// class (the extra latency of its peer, 0 for none). It is never due before an earlier packet of
// its class.
func (s *scheduler) schedule(pkt []byte, now time.Time, delay, class time.Duration) delayed {
	if s.last == nil {
		s.last = map[time.Duration]time.Time{}
	}
	due := now.Add(delay)
	if last := s.last[class]; due.Before(last) {
		due = last // jitter never reorders a class's packets
	}
	s.last[class] = due
	s.seq++
	return delayed{pkt: pkt, due: due, seq: s.seq}
}

// delayLine holds the packets in flight on the writing side, earliest due first.
type delayLine []delayed

func (l delayLine) Len() int { return len(l) }
func (l delayLine) Less(i, j int) bool {
	if !l[i].due.Equal(l[j].due) {
		return l[i].due.Before(l[j].due)
	}
	return l[i].seq < l[j].seq
}
func (l delayLine) Swap(i, j int) { l[i], l[j] = l[j], l[i] }
func (l *delayLine) Push(x any)   { *l = append(*l, x.(delayed)) }
func (l *delayLine) Pop() any {
	old := *l
	d := old[len(old)-1]
	*l = old[:len(old)-1]
	return d
}

// add holds a packet until it is due.
func (l *delayLine) add(d delayed) { heap.Push(l, d) }

// next returns when the earliest packet is due, and false when none is held.
func (l delayLine) next() (time.Time, bool) {
	if len(l) == 0 {
		return time.Time{}, false
	}
	return l[0].due, true
}

// take removes and returns the earliest packet; the line must not be empty.
func (l *delayLine) take() delayed { return heap.Pop(l).(delayed) }
