package etcd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"herd.dev/herd/internal/store"
)

// DefaultRequestTimeout bounds one request to etcd. A cluster with a leader answers in
// milliseconds and elects a new one within its election timeout (1 s by default), so a request
// still unanswered after this long is one etcd cannot serve: it has lost its quorum.
const DefaultRequestTimeout = 5 * time.Second

// request bounds one etcd request by the store's RequestTimeout.
func (s *Store) request(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.cfg.RequestTimeout)
}

// NoQuorumError is what a request gets when etcd cannot answer it: no leader, or no answer
// within the request timeout. It is a store.ErrUnavailable (the API answers 503) and says how
// to get out of it.
type NoQuorumError struct {
	Endpoints []string
	Timeout   time.Duration
	Cause     error
}

func (e *NoQuorumError) Error() string {
	return fmt.Sprintf("etcd has no quorum: no answer from a majority of the members at %s within %s (%v): "+
		"start the members that are down (etcdctl endpoint health --cluster names them); herd resumes by itself once a majority answers",
		strings.Join(e.Endpoints, ","), e.Timeout, e.Cause)
}

// Is makes errors.Is(err, store.ErrUnavailable) hold.
func (e *NoQuorumError) Is(target error) bool { return target == store.ErrUnavailable }

func (e *NoQuorumError) Unwrap() error { return e.Cause }

// unavailable returns err as a *NoQuorumError when it says that etcd could not answer (and not
// that the caller gave up: parent is the caller's context), else err unchanged.
func (s *Store) unavailable(parent context.Context, err error) error {
	if err == nil || parent.Err() != nil || !cannotAnswer(err) {
		return err
	}
	return &NoQuorumError{Endpoints: s.cfg.Endpoints, Timeout: s.cfg.RequestTimeout, Cause: err}
}

// cannotAnswer reports whether err is etcd's way of saying that it cannot serve a request now:
// our own deadline ran out (a linearizable read or a write waits for a leader and a quorum), or a
// member answered that it has no leader or timed out waiting for one. A member whose own copy of
// our deadline ran out first answers with code Unknown and the context's message (etcd 3.4 passes
// the error through untranslated), which is the same timeout seen from the other side.
func cannotAnswer(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Code() == codes.Unavailable || ee.Code() == codes.DeadlineExceeded
	}
	st, _ := status.FromError(err)
	switch st.Code() {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	case codes.Unknown:
		return st.Message() == context.DeadlineExceeded.Error()
	}
	return false
}
