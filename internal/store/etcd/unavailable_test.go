package etcd

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"herd.dev/herd/internal/store"
)

func TestCannotAnswer(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"our deadline", fmt.Errorf("get: %w", context.DeadlineExceeded), true},
		{"no leader", rpctypes.ErrNoLeader, true},
		{"server timeout", rpctypes.ErrTimeout, true},
		{"grpc unavailable", status.Error(codes.Unavailable, "connection refused"), true},
		{"member's copy of our deadline", status.Error(codes.Unknown, "context deadline exceeded"), true},
		{"other unknown error", status.Error(codes.Unknown, "something else"), false},
		{"compacted", rpctypes.ErrCompacted, false},
		{"request too large", rpctypes.ErrRequestTooLarge, false},
		{"caller canceled", context.Canceled, false},
	} {
		if got := cannotAnswer(tc.err); got != tc.want {
			t.Errorf("%s: cannotAnswer(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

func TestUnavailableKeepsTheCallersOwnEnd(t *testing.T) {
	s := &Store{cfg: Config{Endpoints: []string{"http://127.0.0.1:2379"}, RequestTimeout: DefaultRequestTimeout}}
	timeout := status.Error(codes.Unknown, "context deadline exceeded")
	if err := s.unavailable(context.Background(), timeout); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("a timeout with the caller still waiting: %v, want store.ErrUnavailable", err)
	}
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.unavailable(gone, timeout); errors.Is(err, store.ErrUnavailable) {
		t.Errorf("a caller that gave up: %v, want its own error, not store.ErrUnavailable", err)
	}
}
