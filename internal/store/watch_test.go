package store

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"
)

const waitTimeout = 20 * time.Second

// events returns the events of revisions from..to, of kind "k".
func events(from, to int64) []Event {
	var es []Event
	for r := from; r <= to; r++ {
		es = append(es, Event{Type: Modified, Record: Record{Kind: "k", Name: "n" + strconv.FormatInt(r, 10), ResourceVersion: r}})
	}
	return es
}

// revisions reads n events from ch and returns their revisions.
func revisions(t *testing.T, ch <-chan Event, n int) []int64 {
	t.Helper()
	var revs []int64
	for range n {
		select {
		case e, ok := <-ch:
			if !ok {
				t.Fatalf("channel closed after %v", revs)
			}
			revs = append(revs, e.Record.ResourceVersion)
		case <-time.After(waitTimeout):
			t.Fatalf("no event after %v", revs)
		}
	}
	return revs
}

func span(from, to int64) []int64 {
	var rs []int64
	for r := from; r <= to; r++ {
		rs = append(rs, r)
	}
	return rs
}

func TestHubWatchWindow(t *testing.T) {
	// A hub opened at revision 10 that remembers 5 events, after revisions 11..17 were published,
	// remembers 13..17: a watch can start from 12 on.
	tests := []struct {
		since   int64
		wantErr error
		want    []int64
	}{
		{since: 9, wantErr: ErrCompacted},
		{since: 11, wantErr: ErrCompacted},
		{since: 12, want: span(13, 17)},
		{since: 15, want: span(16, 17)},
		{since: 17, want: nil},
	}
	for _, tt := range tests {
		t.Run("since "+strconv.FormatInt(tt.since, 10), func(t *testing.T) {
			h := NewHub(10, 5)
			defer h.Close()
			h.Publish(events(11, 14))
			h.Publish(events(15, 17))
			ch, err := h.Watch(context.Background(), "", tt.since)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Watch(%d) error = %v, want %v", tt.since, err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if got := revisions(t, ch, len(tt.want)); !slices.Equal(got, tt.want) {
				t.Errorf("replayed %v, want %v", got, tt.want)
			}
			h.Publish(events(18, 18))
			if got := revisions(t, ch, 1); got[0] != 18 {
				t.Errorf("live event %d, want 18", got[0])
			}
		})
	}
}

func TestHubWatchFromOpeningRevision(t *testing.T) {
	h := NewHub(10, 5)
	defer h.Close()
	if _, err := h.Watch(context.Background(), "", 9); !errors.Is(err, ErrCompacted) {
		t.Errorf("Watch from before the opening revision: error = %v, want ErrCompacted", err)
	}
	ch, err := h.Watch(context.Background(), "", 10)
	if err != nil {
		t.Fatal(err)
	}
	h.Publish(events(11, 12))
	if got := revisions(t, ch, 2); !slices.Equal(got, span(11, 12)) {
		t.Errorf("got %v, want [11 12]", got)
	}
}

func TestHubDropsWatcherThatFallsBehind(t *testing.T) {
	h := NewHub(0, 1000)
	defer h.Close()
	slow, err := h.Watch(context.Background(), "", 0)
	if err != nil {
		t.Fatal(err)
	}
	fast, err := h.Watch(context.Background(), "", 0)
	if err != nil {
		t.Fatal(err)
	}
	// Publish 5,000 events while fast keeps up and slow reads nothing; Publish must never wait.
	for r := int64(1); r <= 5000; r += 100 {
		h.Publish(events(r, r+99))
		if got := revisions(t, fast, 100); got[0] != r || got[99] != r+99 {
			t.Fatalf("fast watcher got %d..%d, want %d..%d", got[0], got[99], r, r+99)
		}
	}
	want := int64(1)
	for e := range slow {
		if e.Record.ResourceVersion != want {
			t.Fatalf("slow watcher got %d, want %d", e.Record.ResourceVersion, want)
		}
		want++
	}
	if want > 1000 {
		t.Errorf("slow watcher got %d events: more than the history, so it was not dropped in time", want-1)
	}
}

func TestHubKindFilter(t *testing.T) {
	h := NewHub(0, 100)
	defer h.Close()
	ch, err := h.Watch(context.Background(), "fleet", 0)
	if err != nil {
		t.Fatal(err)
	}
	var batch []Event
	for r := int64(1); r <= 10; r++ {
		kind := "instance"
		if r%4 == 0 {
			kind = "fleet"
		}
		batch = append(batch, Event{Record: Record{Kind: kind, Name: "x", ResourceVersion: r}})
	}
	h.Publish(batch)
	if got := revisions(t, ch, 2); !slices.Equal(got, []int64{4, 8}) {
		t.Errorf("fleet events at %v, want [4 8]", got)
	}
}

func TestHubCloseClosesEveryChannel(t *testing.T) {
	h := NewHub(0, 10)
	ctx := context.Background()
	var chans []<-chan Event
	for range 3 {
		ch, err := h.Watch(ctx, "", 0)
		if err != nil {
			t.Fatal(err)
		}
		chans = append(chans, ch)
	}
	h.Publish(events(1, 3)) // unread events must not keep a channel open
	h.Close()
	// Close has returned, so every channel is closed: draining the unread events ends.
	for _, ch := range chans {
		for range ch {
		}
	}
	if _, err := h.Watch(ctx, "", 3); !errors.Is(err, ErrClosed) {
		t.Errorf("Watch after Close: error = %v, want ErrClosed", err)
	}
	h.Publish(events(4, 4)) // ignored, not a panic
	h.Close()
}

func TestHubRefusesARevisionOutOfOrder(t *testing.T) {
	tests := []struct {
		name string
		next []Event
	}{
		{"again", events(2, 3)},
		{"after a gap", events(4, 4)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := NewHub(0, 10)
			defer h.Close()
			h.Publish(events(1, 2))
			defer func() {
				if recover() == nil {
					t.Errorf("publishing revisions %d.. after 2 did not panic", tt.next[0].Record.ResourceVersion)
				}
			}()
			h.Publish(tt.next)
		})
	}
}
