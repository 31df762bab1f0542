package shm_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/shm"
)

// Benchmarks run every rank as a goroutine of this process, each with its
// own mapping of the segment; an op's time is from the first rank's start
// to the last rank's end. SetBytes is the data every rank ends up with. The
// real-process figures come from starbench -n 4 --backend shm.

func runAll(b *testing.B, cs []*shm.Comm, f func(c *shm.Comm) error) {
	b.Helper()
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	b.ResetTimer()
	for r, c := range cs {
		wg.Go(func() {
			for i := 0; i < b.N; i++ {
				if err := f(c); err != nil {
					errs[r] = err
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	for r, err := range errs {
		if err != nil {
			b.Fatalf("rank %d: %v", r, err)
		}
	}
}

func benchRanks(b *testing.B, size int) []*shm.Comm {
	cs := startRanks(b, size, nil)
	b.Cleanup(func() { closeAll(cs) })
	return cs
}

func BenchmarkAllgatherv(b *testing.B) {
	for _, ranks := range []int{2, 4} {
		for _, per := range []int{200_000, 2 << 20, 16 << 20} {
			b.Run(fmt.Sprintf("ranks=%d/bytes=%d", ranks, per), func(b *testing.B) {
				cs := benchRanks(b, ranks)
				n := per / 8
				counts, displs := make([]int, ranks), make([]int, ranks)
				for r := range counts {
					counts[r], displs[r] = n, r*n
				}
				sends, recvs := make([][]float64, ranks), make([][]float64, ranks)
				for r := range sends {
					sends[r], recvs[r] = make([]float64, n), make([]float64, n*ranks)
				}
				b.SetBytes(int64(per * ranks))
				runAll(b, cs, func(c *shm.Comm) error {
					return comm.Allgatherv(context.Background(), c, sends[c.Rank()], recvs[c.Rank()], counts, displs)
				})
			})
		}
	}
}

func BenchmarkAllreduce(b *testing.B) {
	for _, ranks := range []int{2, 4} {
		b.Run(fmt.Sprintf("ranks=%d/bytes=32", ranks), func(b *testing.B) {
			cs := benchRanks(b, ranks)
			sends, recvs := make([][]float64, ranks), make([][]float64, ranks)
			for r := range sends {
				sends[r], recvs[r] = []float64{1, 2, 3, 4}, make([]float64, 4)
			}
			b.SetBytes(32)
			runAll(b, cs, func(c *shm.Comm) error {
				return comm.Allreduce(context.Background(), c, sends[c.Rank()], recvs[c.Rank()], comm.Sum)
			})
		})
	}
}

func BenchmarkBroadcast(b *testing.B) {
	for _, ranks := range []int{2, 4} {
		b.Run(fmt.Sprintf("ranks=%d/bytes=10240", ranks), func(b *testing.B) {
			cs := benchRanks(b, ranks)
			bufs := make([][]uint8, ranks)
			for r := range bufs {
				bufs[r] = make([]uint8, 10240)
			}
			b.SetBytes(10240)
			runAll(b, cs, func(c *shm.Comm) error {
				return comm.Broadcast(context.Background(), c, bufs[c.Rank()], ranks-1)
			})
		})
	}
}

func BenchmarkBarrier(b *testing.B) {
	for _, ranks := range []int{2, 4} {
		b.Run(fmt.Sprintf("ranks=%d", ranks), func(b *testing.B) {
			cs := benchRanks(b, ranks)
			runAll(b, cs, func(c *shm.Comm) error { return c.Barrier(context.Background()) })
		})
	}
}
