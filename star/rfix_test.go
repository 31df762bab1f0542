package star_test

import (
	"context"
	"fmt"
	"runtime/debug"
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

// relayThenBarriers runs, on a fresh 4-rank star (pipes with buffer bytes
// of buffer, the timeout, control sessions), an allgatherv of n float64
// per rank (relayed: every worker has a control session), then, after
// each rank sleeps pause[rank], `more` barriers. It returns every rank's
// error and how many times link.moving fired on rank 0's link to rank 1.
func relayThenBarriers(t *testing.T, timeout time.Duration, buffer, n int, pause []time.Duration, more int, faults ...faulty.Fault) (errs []error, moving int64) {
	var mv atomic.Int64
	restore := star.SetTestHook(func(rank int, point string) {
		if point == star.HookMoving && rank == 1 {
			mv.Add(1)
		}
	})
	defer restore()
	s := faulty.NewScript(faults...)
	comms := startFaulty(t, 4, buffer, timeout, 10*time.Second, s)
	defer testkit.CloseAll(comms)
	synctest.Wait()
	counts, displs := []int{n, n, n, n}, []int{0, n, 2 * n, 3 * n}
	errs = testkit.RunRanks(comms, func(c comm.Communicator) error {
		send := make([]float64, n)
		recv := make([]float64, 4*n)
		if err := comm.Allgatherv(context.Background(), c, send, recv, counts, displs); err != nil {
			return fmt.Errorf("allgatherv: %w", err)
		}
		time.Sleep(pause[c.Rank()])
		for i := range more {
			if err := c.Barrier(context.Background()); err != nil {
				return fmt.Errorf("barrier %d: %w", i, err)
			}
		}
		return nil
	})
	return errs, mv.Load()
}

// TestStaleRfixRelay: rank 1's region of a relayed allgatherv comes
// over a slow link (its write held 1.5 timeouts while the bytes move: an
// Acked Delay), so rank 0's relay reader reads on past its deadline
// (link.moving sets l.rfix = 20.5 s), then the rest comes. Rank 1
// computes 0.6 T, rank 0 0.7 T, and every rank completes the barriers
// after. Before relayRead cleared rfix once bytes came (only readFull
// did), the next collective's reads of link 1 were armed at the stale
// rfix, which had passed: rank 1's barrier frame waited unread when rank
// 0 arrived (22 s), every Read failed at once, lateAt said "read on"
// (bytes unread, the deadline seen long after it passed) and cleared rdl
// but not rfix, and the next arm set the passed rfix again: rank 0 spun in
// readFull forever, while its kind 6 words kept every worker waiting. In
// such a spin the fake clock stops (nothing ever blocks); a real-time
// watchdog reports it.
func TestStaleRfixRelay(t *testing.T) {
	const timeout = 10 * time.Second
	const n = 192 << 10 // 1.5 MiB per rank: relayed
	// Real time, outside the bubble: in a spin the fake clock stops.
	watchdog := time.AfterFunc(20*time.Second, func() {
		debug.SetTraceback("all")
		panic("TestStaleRfixRelay: no progress in 20 s of real time: rank 0 spins in readFull on its stale rfix (see the goroutine in link.readFull / lateAt)")
	})
	defer watchdog.Stop()
	testkit.SyncTest(t, func(t *testing.T) {
		slow := faulty.Fault{Kind: faulty.Delay, Rank: 1, Link: 0, Dir: faulty.Write, Frame: 1, Offset: 1 << 19, Delay: 3 * timeout / 2, Acked: true}
		pause := []time.Duration{7 * timeout / 10, 6 * timeout / 10, 0, 0}
		errs, moving := relayThenBarriers(t, timeout, 8<<20, n, pause, 2, slow)
		assert.Positive(t, moving, "rank 0's relay reader read on over the slow link")
		for r, err := range errs {
			assert.NoError(t, err, "rank %d", r)
		}
	})
}

// TestStaleRfixShortens: as TestStaleRfixRelay, but rank 1's
// barrier frame is not there yet when rank 0 arrives (ranks 0, 2 and 3
// compute 0.3 T, rank 1 1.2 T): rank 1 comes 0.9 T after rank 0, which waits for
// it a timeout from its arrival without the slow allgatherv before (case
// fast), and so after it (case slow). Before every read path cleared
// rfix once bytes came, a stale rfix from the allgatherv fired at once,
// and moving's new one counted from the link's last movement: rank 0
// failed rank 1.
func TestStaleRfixShortens(t *testing.T) {
	const timeout = 10 * time.Second
	const n = 192 << 10
	pause := []time.Duration{3 * timeout / 10, 12 * timeout / 10, 3 * timeout / 10, 3 * timeout / 10}
	for _, slowLink := range []bool{false, true} {
		name := "fast"
		if slowLink {
			name = "slow"
		}
		t.Run(name, func(t *testing.T) {
			testkit.SyncTest(t, func(t *testing.T) {
				var faults []faulty.Fault
				if slowLink {
					faults = append(faults, faulty.Fault{Kind: faulty.Delay, Rank: 1, Link: 0, Dir: faulty.Write, Frame: 1, Offset: 1 << 19, Delay: 3 * timeout / 2, Acked: true})
				}
				errs, _ := relayThenBarriers(t, timeout, 8<<20, n, pause, 1, faults...)
				for r, err := range errs {
					assert.NoError(t, err, "rank %d", r)
				}
			})
		})
	}
}
