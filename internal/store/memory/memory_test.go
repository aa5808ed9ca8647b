package memory_test

import (
	"testing"

	"herd.dev/herd/internal/store"
	"herd.dev/herd/internal/store/memory"
	"herd.dev/herd/internal/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s := memory.New()
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}
