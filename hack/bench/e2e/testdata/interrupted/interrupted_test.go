// Package interrupted is a test that waits to be interrupted, for bench-e2e's own test: its
// cleanup, registered with localtest.CleanupOnInterrupt, writes "cleaned up" to $INTERRUPTED_OUT.
package interrupted

import (
	"os"
	"testing"
	"time"

	"herd.dev/herd/internal/provider/local/localtest"
)

func TestInterrupted(t *testing.T) {
	out := os.Getenv("INTERRUPTED_OUT")
	localtest.CleanupOnInterrupt(t, func() { os.WriteFile(out, []byte("cleaned up"), 0o600) })
	if err := os.WriteFile(out+".running", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Minute) // until interrupted
}
