package etcd

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"herd.dev/herd/internal/store"
)

// watchBuffer is the capacity of each watch channel; the watcher's queue behind it holds up to
// WatchHistory more events before the watcher is dropped.
const watchBuffer = 128

// Watch implements store.Store with an etcd watch from since+1.
func (s *Store) Watch(ctx context.Context, kind string, since int64) (<-chan store.Event, error) {
	what := "all kinds"
	if kind != "" {
		what = kind
	}
	if s.closed.Load() {
		return nil, fmt.Errorf("watch %s: %w", what, store.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("watch %s from revision %d: %w", what, since, err)
	}
	// etcd reports a compacted start revision only on the watch channel, after the fact; a read
	// at that revision says so now, which is when the contract wants ErrCompacted. (A revision
	// not reached yet is fine: the watch waits for it.)
	rctx, cancelRead := s.request(ctx)
	_, err := s.cli.Get(rctx, s.cfg.Prefix, clientv3.WithRev(since+1), clientv3.WithCountOnly())
	cancelRead()
	err = s.unavailable(ctx, err)
	switch {
	case errors.Is(err, rpctypes.ErrCompacted):
		return nil, fmt.Errorf("watch %s from revision %d: etcd has compacted it away: %w", what, since, store.ErrCompacted)
	case err != nil && !errors.Is(err, rpctypes.ErrFutureRev):
		return nil, fmt.Errorf("watch %s from revision %d: %w", what, since, err)
	}

	wctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.stop, cancel)
	// Requiring a leader makes a member cut off from the others end the watch instead of leaving
	// it silent; the caller then lists again through a member that has one.
	wch := s.cli.Watch(clientv3.WithRequireLeader(wctx), s.kindPrefix(kind),
		clientv3.WithPrefix(), clientv3.WithRev(since+1), clientv3.WithPrevKV())
	out := make(chan store.Event, watchBuffer)
	s.watches.Add(1)
	go func() {
		defer s.watches.Done()
		defer stop()
		defer cancel()
		defer close(out)
		s.feed(wctx, kind, wch, out)
	}()
	return out, nil
}

// feed copies the events of wch to out until ctx ends, etcd ends the watch (compaction, no
// leader) or the consumer falls more than WatchHistory events behind. It always reads wch at
// once, so that etcd's client never buffers for a slow consumer.
func (s *Store) feed(ctx context.Context, kind string, wch clientv3.WatchChan, out chan<- store.Event) {
	var queue []store.Event
	for {
		var send chan<- store.Event
		var head store.Event
		if len(queue) > 0 {
			send, head = out, queue[0]
		}
		select {
		case resp, ok := <-wch:
			if !ok {
				return
			}
			if err := resp.Err(); err != nil || resp.Canceled {
				s.log.Info("watch ended by etcd: the watcher lists again", "kind", kind, "err", err,
					"compactRevision", resp.CompactRevision)
				return
			}
			for _, ev := range resp.Events {
				queue = append(queue, s.event(kind, ev))
			}
			if len(queue) > s.cfg.WatchHistory {
				s.log.Info("watcher fell behind: dropped, it lists again", "kind", kind, "behind", len(queue))
				return
			}
		case send <- head:
			queue[0] = store.Event{}
			queue = queue[1:]
		case <-ctx.Done():
			return
		}
	}
}

// event converts one etcd event on a key under the watched prefix.
func (s *Store) event(kind string, ev *clientv3.Event) store.Event {
	k, name := kind, string(ev.Kv.Key[len(s.kindPrefix(kind)):])
	if kind == "" {
		k, name, _ = strings.Cut(name, "/")
	}
	rec := store.Record{Kind: k, Name: name, Value: ev.Kv.Value, ResourceVersion: ev.Kv.ModRevision}
	switch {
	case ev.Type == mvccpb.DELETE:
		if ev.PrevKv != nil {
			rec.Value = ev.PrevKv.Value
		}
		return store.Event{Type: store.Deleted, Record: rec}
	case ev.IsCreate():
		return store.Event{Type: store.Added, Record: rec}
	default:
		return store.Event{Type: store.Modified, Record: rec}
	}
}
