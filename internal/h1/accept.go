package h1

import "time"

// AcceptBackoff is how long a server waits before its next Accept after one failed with its
// listener still open (out of file descriptors, most often), given the last wait (0 after a
// success): from 5 ms, doubling, at most a second, as net/http's server waits. Returning would stop
// serving for good; retrying at once would spin.
func AcceptBackoff(last time.Duration) time.Duration {
	return min(max(2*last, 5*time.Millisecond), time.Second)
}
