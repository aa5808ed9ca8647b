//go:build !linux

package busypoll

import (
	"errors"
	"time"
)

// poller only has what Activity reads where there is no epoll to watch.
type poller struct {
	wake wake
}

// Start fails: busy polling watches the runtime's epoll descriptor, which only Linux has.
func Start(time.Duration) (stop func(), err error) {
	return nil, errors.New("busy polling needs Linux")
}
