//go:build !linux

package busypoll

import (
	"errors"
	"sync/atomic"
	"time"
)

// poller is empty where there is no epoll to watch.
type poller struct {
	handoffs, parks atomic.Uint64
	wake            wake
}

// Start fails: busy polling watches the runtime's epoll descriptor, which only Linux has.
func Start(time.Duration) (stop func(), err error) {
	return nil, errors.New("busy polling needs Linux")
}
