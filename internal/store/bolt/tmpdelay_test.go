package bolt_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"herd.dev/herd/internal/store"
	"herd.dev/herd/internal/store/bolt"
)

func BenchmarkTmpPool(b *testing.B) {
	for _, d := range []time.Duration{100 * time.Microsecond, 500 * time.Microsecond, 2 * time.Millisecond, 10 * time.Millisecond} {
		for _, workers := range []int{8, 32, 128} {
			b.Run(fmt.Sprintf("%v/%d", d, workers), func(b *testing.B) {
				const n = 5000
				s := open(b, filepath.Join(b.TempDir(), "herd.db"), bolt.WithBatchDelay(d))
				ctx := context.Background()
				for b.Loop() {
					var wg sync.WaitGroup
					var next atomic.Int64
					for range workers {
						wg.Add(1)
						go func() {
							defer wg.Done()
							for i := next.Add(1); i <= n; i = next.Add(1) {
								if _, err := s.Txn(ctx, store.Op{Type: store.OpPut, Kind: "instance", Name: fmt.Sprintf("web-%05d", i), Value: statusValue}); err != nil {
									b.Error(err)
								}
							}
						}()
					}
					wg.Wait()
				}
				b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "writes/s")
			})
		}
	}
}
