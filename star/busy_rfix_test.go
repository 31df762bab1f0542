package star_test

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/star"
	"github.com/starcomm/starcomm/testkit"
	"github.com/starcomm/starcomm/transport/faulty"
)

// TestBusyPastRfix: no process is away, and a worker's read must neither
// spin nor fail. A broadcast of 2 MiB from rank 0: rank 1 takes the first
// MiB, and then its link is slow (an Acked Delay of its reads: the bytes
// keep moving; the rest waits in its socket), and rank 0's write to rank
// 2 is slow too (acked: slowWrite), so rank 0 stays in the broadcast ~30 s
// and tells every worker so (kind 6). Rank 1's control session lags for
// 15 s from t = 9.5 s (a congested thin link; the liveness timeout is 60
// s), so rank 1's read deadline (19.75 s) passes first and link.moving
// sets rfix = 30 s. The words that come at 24.5 s move rank 1's conn
// deadline past rfix (moveDeadlines leaves l.rdl = rfix), and on, until
// rank 0 ends the broadcast. When that moved deadline passes, lateAt
// takes the gap between l.rdl and now for an absence of this process,
// and, rank 0's bytes waiting unread, says "read on", clearing rdl (and,
// now, rfix). Rank 1's link moves throughout (its Delay ends at 69 s):
// every rank completes. Before lateAt cleared rfix, the next arm set the
// passed rfix again, and rank 1 spun forever.
func TestBusyPastRfix(t *testing.T) {
	const timeout = 10 * time.Second
	const n = 256 << 10 // float64: 2 MiB
	// Real time, outside the bubble: in a spin the fake clock stops.
	watchdog := time.AfterFunc(20*time.Second, func() {
		debug.SetTraceback("all")
		panic("TestBusyPastRfix: no progress in 20 s of real time: rank 1 spins on its passed rfix (see link.readFull / lateAt)")
	})
	defer watchdog.Stop()
	testkit.SyncTest(t, func(t *testing.T) {
		var moving, busy atomic.Int64
		restore := star.SetTestHook(func(rank int, point string) {
			switch point {
			case star.HookMoving:
				moving.Add(1)
			case star.HookBusy:
				busy.Add(1)
			}
		})
		defer restore()
		s := faulty.NewScript(
			faulty.Fault{Kind: faulty.Delay, Rank: 1, Link: 0, Dir: faulty.Read, Frame: 2, Offset: 1 << 20, Delay: 6 * timeout, Acked: true},
			faulty.Fault{Kind: faulty.Delay, Rank: 0, Link: 2, Dir: faulty.Write, Frame: 2, Offset: 1 << 20, Delay: 3 * timeout, Acked: true},
			faulty.Fault{Kind: faulty.Delay, Rank: 1, Link: 0, Dir: faulty.Read, Control: true, Delay: 3 * timeout / 2, Manual: true},
		)
		comms := startFaulty(t, 4, 8<<20, timeout, 6*timeout, s)
		defer testkit.CloseAll(comms)
		warmUp(t, comms)
		go func() {
			time.Sleep(9*timeout/10 + timeout/20)
			s.Fire(1) // rank 1's control session lags from 9.5 s
		}()
		errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
			buf := make([]float64, n)
			if c.Rank() == 0 {
				time.Sleep(9 * timeout / 10)
			}
			if err := comm.Broadcast(context.Background(), c, buf, 0); err != nil {
				return fmt.Errorf("broadcast: %w", err)
			}
			if err := c.Barrier(context.Background()); err != nil {
				return fmt.Errorf("barrier: %w", err)
			}
			return nil
		})
		t.Logf("moving hooks %d, busy hooks %d", moving.Load(), busy.Load())
		assert.Equal(t, 3, s.Fired(), "every fault fired")
		for r, err := range errs {
			assert.NoError(t, err, "rank %d", r)
		}
	})
}
