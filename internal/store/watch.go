package store

import (
	"context"
	"fmt"
	"sync"
)

// DefaultWatchHistory is how many recent events a Hub remembers. A watch may start from any revision
// within that window, and a watcher may fall that far behind before it is dropped. 10,000 covers a
// status write of 5,000 instances twice over, for under 1 MB of memory plus the values.
const DefaultWatchHistory = 10000

const (
	// watchBuffer is the capacity of each watch channel: enough to keep a consumer busy while the
	// watcher's goroutine fetches the next chunk, small because the history is the real buffer.
	watchBuffer = 128
	// watchChunk bounds how many events a watcher examines per lock of the hub, so that a watcher
	// catching up on a long history never holds writers up for long.
	watchChunk = 512
)

// Hub is the watch machinery the Store implementations share. The store publishes the events of
// each committed transaction; the Hub keeps the most recent ones in a ring and feeds every watcher
// from that ring, each at its own pace.
//
// Every write op consumes one revision, so the events a Hub holds have consecutive revisions and
// the event of revision r sits at a known place in the ring. A watcher is just a cursor (the next
// revision it wants) and a goroutine that copies events from the ring to the watcher's channel.
// Replay and live delivery are therefore the same code path: no event can fall between "replayed"
// and "subscribed", none is sent twice, and writers never wait for a watcher. A watcher whose
// cursor falls out of the ring (a consumer more than the history behind) has its channel closed.
type Hub struct {
	mu sync.Mutex
	// ring holds the remembered events; the oldest, of revision first, is at ring[start].
	ring  []Event
	start int
	n     int
	first int64
	// notify is closed, and replaced, whenever events are added: idle watchers wait on it.
	notify chan struct{}
	closed bool
	done   chan struct{}
	wg     sync.WaitGroup
}

// NewHub returns a Hub for a store whose revision is rev, remembering up to history events
// (DefaultWatchHistory if history <= 0). Watches from before rev fail with ErrCompacted: the
// changes that led to rev are not in memory.
func NewHub(rev int64, history int) *Hub {
	if history <= 0 {
		history = DefaultWatchHistory
	}
	return &Hub{
		ring:   make([]Event, history),
		first:  rev + 1,
		notify: make(chan struct{}),
		done:   make(chan struct{}),
	}
}

// last is the revision of the newest published event (the store's revision as watchers see it).
// Callers hold h.mu.
func (h *Hub) last() int64 { return h.first + int64(h.n) - 1 }

// Publish hands the Hub the events of committed writes, in commit order: their revisions must
// follow on from the last ones published, without a gap. Stores publish from one goroutine at a
// time (the memory store under its lock, the bolt store from its committer), after the commit and
// before the writers' Txns return. Publish never blocks on watchers.
func (h *Hub) Publish(events []Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || len(events) == 0 {
		return
	}
	for _, e := range events {
		if e.Record.ResourceVersion != h.last()+1 {
			// A store bug, and one that would break every watcher's guarantees: refuse loudly.
			panic(fmt.Sprintf("store: watch hub: revision %d published after %d: revisions must follow on without a gap",
				e.Record.ResourceVersion, h.last()))
		}
		if h.n < len(h.ring) {
			h.ring[(h.start+h.n)%len(h.ring)] = e
			h.n++
			continue
		}
		h.ring[h.start] = e
		h.start = (h.start + 1) % len(h.ring)
		h.first++
	}
	close(h.notify)
	h.notify = make(chan struct{})
}

// Watch implements Store.Watch on the remembered events; see there for the contract. A since
// beyond the newest published revision is allowed: events up to since are skipped. (A store's
// List may also read a revision a moment before it is published; the watch then simply waits.)
func (h *Hub) Watch(ctx context.Context, kind string, since int64) (<-chan Event, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("watch %s from revision %d: %w", kindOrAll(kind), since, err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, fmt.Errorf("watch %s: %w", kindOrAll(kind), ErrClosed)
	}
	if since < h.first-1 {
		return nil, fmt.Errorf("watch %s from revision %d: the oldest change remembered is revision %d: %w",
			kindOrAll(kind), since, h.first, ErrCompacted)
	}
	out := make(chan Event, watchBuffer)
	h.wg.Add(1)
	go h.feed(ctx, kind, since+1, out)
	return out, nil
}

// feed copies the events of kind from revision next on into out until ctx ends, the Hub closes or
// the watcher falls out of the history, and then closes out.
func (h *Hub) feed(ctx context.Context, kind string, next int64, out chan<- Event) {
	defer h.wg.Done()
	defer close(out)
	var chunk []Event
	for {
		h.mu.Lock()
		if h.closed || next < h.first {
			// Closed, or the events this watcher needs next are gone: it fell too far behind.
			h.mu.Unlock()
			return
		}
		if next > h.last() {
			wait := h.notify
			h.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return
			case <-h.done:
				return
			}
		}
		chunk = chunk[:0]
		for examined := 0; examined < watchChunk && next <= h.last(); examined++ {
			e := h.ring[(h.start+int(next-h.first))%len(h.ring)]
			next++
			if kind == "" || e.Record.Kind == kind {
				chunk = append(chunk, e)
			}
		}
		h.mu.Unlock()
		for _, e := range chunk {
			select {
			case out <- e:
			case <-ctx.Done():
				return
			case <-h.done:
				return
			}
		}
	}
}

// Close closes every watch channel and refuses new watches. When it returns, every channel the Hub
// handed out is closed.
func (h *Hub) Close() {
	h.mu.Lock()
	if !h.closed {
		h.closed = true
		close(h.done)
	}
	h.mu.Unlock()
	h.wg.Wait()
}

func kindOrAll(kind string) string {
	if kind == "" {
		return "all kinds"
	}
	return kind
}
