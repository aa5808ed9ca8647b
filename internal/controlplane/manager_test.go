package controlplane

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
)

// TestManagerStopsStagesInReverse: on a part's failure every part stops, the later stages before
// the earlier ones, and run returns the failure with the part's name.
func TestManagerStopsStagesInReverse(t *testing.T) {
	var mu sync.Mutex
	var stopped []string
	waiter := func(name string) runnable {
		return runnable{name, func(ctx context.Context) error {
			<-ctx.Done()
			mu.Lock()
			defer mu.Unlock()
			stopped = append(stopped, name)
			return nil
		}}
	}
	fail := make(chan struct{})
	var m manager
	m.stage(waiter("first"))
	m.stage(waiter("second"), runnable{"broken", func(context.Context) error {
		<-fail
		return errors.New("boom")
	}})
	m.stage(waiter("third"))
	m.started = func() { close(fail) }
	err := m.run(context.Background())
	if err == nil || err.Error() != "broken: boom" {
		t.Fatalf("run = %v, want broken: boom", err)
	}
	if want := []string{"third", "second", "first"}; !slices.Equal(stopped, want) {
		t.Fatalf("stopped in order %v, want %v", stopped, want)
	}
}
