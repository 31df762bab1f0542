package star_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/star"
	"github.com/starcomm/starcomm/testkit"
	"github.com/starcomm/starcomm/transport/faulty"
)

// busyJob runs, on every rank of a fresh 4-rank star (pipes with buffer
// bytes of buffer, the timeout, control sessions), an allgatherv of n
// float64 per rank, checked, and then a barrier, while rank 0's writes to
// rank 1 of the allgatherv's result meet faults. It returns every rank's
// error, how many faults fired, how many times a worker moved its
// deadlines on rank 0's word that it was still busy, and how long it took.
func busyJob(t *testing.T, timeout time.Duration, buffer, n int, faults ...faulty.Fault) (errs []error, fired int, busy int64, took time.Duration) {
	var moved atomic.Int64
	restore := star.SetTestHook(func(rank int, point string) {
		if point == star.HookBusy {
			moved.Add(1)
		}
	})
	defer restore()
	s := faulty.NewScript(faults...)
	comms := startFaulty(t, 4, buffer, timeout, 10*time.Second, s)
	defer testkit.CloseAll(comms)
	synctest.Wait() // every control session up
	begin := time.Now()
	counts, displs := []int{n, n, n, n}, []int{0, n, 2 * n, 3 * n}
	errs = testkit.RunRanks(comms, func(c comm.Communicator) error {
		send := make([]float64, n)
		for i := range send {
			send[i] = float64(c.Rank()*n + i)
		}
		recv := make([]float64, 4*n)
		if err := comm.Allgatherv(context.Background(), c, send, recv, counts, displs); err != nil {
			return fmt.Errorf("allgatherv: %w", err)
		}
		for i, v := range recv {
			if v != float64(i) {
				return fmt.Errorf("allgatherv: recv[%d] = %v, want %v", i, v, float64(i))
			}
		}
		if err := c.Barrier(context.Background()); err != nil {
			return fmt.Errorf("barrier: %w", err)
		}
		return nil
	})
	return errs, s.Fired(), moved.Load(), time.Since(begin)
}

// TestBusyWithSlowRank: rank 0 sends an allgatherv's result to rank 1
// slowly (its writes stall for 0.9 timeouts in the first 4 MiB and 0.5
// in the next, each within the timeout that rank 0 gives a 4 MiB chunk of
// a write on a pipe, but 1.4 timeouts in all), while ranks 2 and 3,
// which have their result, wait for rank 0 in the barrier after it. Rank
// 0 tells them on their control sessions that it is still in the
// allgatherv (msgBusy), and every rank completes both collectives. Before,
// ranks 2 and 3 waited a timeout from their arrival in the barrier and
// failed it naming rank 0, which was serving rank 1's slow link, and then
// every rank failed naming rank 0. A relayed allgatherv, 1.5 MiB per
// rank.
func TestBusyWithSlowRank(t *testing.T) {
	const timeout = 10 * time.Second
	const n = 192 << 10 // float64: 1.5 MiB per rank, a 6 MiB result
	for _, buffer := range []int{0, 1 << 20} {
		t.Run(fmt.Sprintf("buffer=%d", buffer), func(t *testing.T) {
			testkit.SyncTest(t, func(t *testing.T) {
				faults := []faulty.Fault{
					{Kind: faulty.Delay, Rank: 0, Link: 1, Dir: faulty.Write, Frame: 1, Offset: 1 << 20, Delay: 9 * timeout / 10},
					{Kind: faulty.Delay, Rank: 0, Link: 1, Dir: faulty.Write, Frame: 1, Offset: 5 << 20, Delay: timeout / 2},
				}
				errs, fired, busy, took := busyJob(t, timeout, buffer, n, faults...)
				for r, err := range errs {
					assert.NoError(t, err, "rank %d", r)
				}
				assert.Equal(t, 2, fired, "the two stalls")
				assert.GreaterOrEqual(t, took, 14*timeout/10, "it waited through the stalls")
				assert.Positive(t, busy, "workers told that rank 0 was busy")
			})
		})
	}
}

// TestBusyThenHungNamesHungRank: as TestBusyWithSlowRank, but rank 0's
// write to rank 1 stalls for 0.9 timeouts in the first 4 MiB and then hangs: rank 0 times
// out on rank 1 and every rank fails naming rank 1. Ranks 2 and 3, waiting
// in the barrier meanwhile, are kept from their own timeout by rank 0's
// word that it is busy, which stops with the allgatherv; before, they
// failed first, naming rank 0.
func TestBusyThenHungNamesHungRank(t *testing.T) {
	const timeout = 10 * time.Second
	testkit.SyncTest(t, func(t *testing.T) {
		faults := []faulty.Fault{
			{Kind: faulty.Delay, Rank: 0, Link: 1, Dir: faulty.Write, Frame: 1, Offset: 1 << 20, Delay: 9 * timeout / 10},
			{Kind: faulty.Hang, Rank: 0, Link: 1, Dir: faulty.Write, Frame: 1, Offset: 5 << 20},
		}
		errs, fired, _, _ := busyJob(t, timeout, 0, 192<<10, faults...)
		assert.Equal(t, 2, fired, "the stall and the hang")
		for r, err := range errs {
			var cf *comm.CollectiveFailedError
			if !assert.True(t, errors.As(err, &cf), "rank %d: got %v, want a CollectiveFailedError", r, err) {
				continue
			}
			assert.Equal(t, 1, cf.Rank, "rank %d names the hung rank 1: %v", r, err)
		}
	})
}
