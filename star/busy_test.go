package star_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
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
// deadlines on rank 0's word that it was still busy, how many times I/O
// between rank 0 and rank 1 went on past its deadline over a slow link
// (link.slowWrite, link.moving), and how long it took.
func busyJob(t *testing.T, timeout time.Duration, buffer, n int, faults ...faulty.Fault) (errs []error, fired int, busy, slow int64, took time.Duration) {
	var moved, slowed atomic.Int64
	restore := star.SetTestHook(func(rank int, point string) {
		switch {
		case point == star.HookBusy:
			moved.Add(1)
		case (point == star.HookSlowWrite || point == star.HookMoving) && rank <= 1:
			slowed.Add(1)
		}
	})
	defer restore()
	s := faulty.NewScript(faults...)
	comms := startFaulty(t, 4, buffer, timeout, 10*time.Second, s)
	defer testkit.CloseAll(comms)
	sessionsUp(t) // every control session up
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
	return errs, s.Fired(), moved.Load(), slowed.Load(), time.Since(begin)
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
				errs, fired, busy, _, took := busyJob(t, timeout, buffer, n, faults...)
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
		errs, fired, _, _, _ := busyJob(t, timeout, 0, 192<<10, faults...)
		assert.Equal(t, 2, fired, "the stall and the hang")
		for r, err := range errs {
			failedNaming(t, r, err, 1, "the hung rank 1")
		}
	})
}

// TestSlowLinkAcked: rank 0's write to rank 1 of an allgatherv's result
// takes 1.5 timeouts while rank 1's host keeps acknowledging (a slow link
// that moves every byte: an Acked Delay), and every rank completes the
// allgatherv and the barrier after it. Rank 0's write outlives its
// deadline and goes on (link.slowWrite), and rank 1, which waits for its
// result meanwhile, is kept from its own timeout by rank 0's word that it
// is still in the collective (msgBusy, which workers in the collective
// now heed too). Before, rank 0 failed the allgatherv at its write's
// deadline, naming rank 1, and without the word rank 1 failed naming rank
// 0. The same Delay unacknowledged (a peer that takes nothing) still
// fails, naming rank 1.
func TestSlowLinkAcked(t *testing.T) {
	const timeout = 10 * time.Second
	const n = 192 << 10 // float64: 1.5 MiB per rank, a 6 MiB result
	slow := faulty.Fault{Kind: faulty.Delay, Rank: 0, Link: 1, Dir: faulty.Write, Frame: 1, Offset: 1 << 20, Delay: 3 * timeout / 2, Acked: true}
	slowLinkCompletes(t, timeout, n, slow, true, 0, 1<<20)
	t.Run("unacknowledged", func(t *testing.T) {
		testkit.SyncTest(t, func(t *testing.T) {
			stall := faulty.Fault{Kind: faulty.Delay, Rank: 0, Link: 1, Dir: faulty.Write, Frame: 1, Offset: 1 << 20, Delay: 3 * timeout / 2}
			errs, fired, _, slowed, _ := busyJob(t, timeout, 0, n, stall)
			assert.Equal(t, 1, fired, "the stall")
			assert.Zero(t, slowed, "no write went on")
			for r, err := range errs {
				failedNaming(t, r, err, 1, "rank 1")
			}
		})
	})
}

// TestSlowLinkMoving: rank 1 takes an allgatherv's result from rank 0 over
// a slow link, its reads held for 1.5 timeouts while the bytes keep
// moving (an Acked Delay of rank 1's reads), and every rank completes the
// allgatherv and the barrier after it. Rank 1's read outlives its deadline
// and goes on, the data still arriving, and rank 0, whose write went into
// the buffer at once (or, unbuffered, goes on past its deadline) and which
// waits for rank 1 in the barrier, reads on while its data still goes out
// to rank 1 (link.moving): rank 1 reads it before it answers. Before,
// rank 1 failed naming rank 0, and rank 0 failed the barrier naming rank
// 1, a timeout after its arrival.
func TestSlowLinkMoving(t *testing.T) {
	const timeout = 10 * time.Second
	const n = 192 << 10 // float64: 1.5 MiB per rank, a 6 MiB result
	slow := faulty.Fault{Kind: faulty.Delay, Rank: 1, Link: 0, Dir: faulty.Read, Frame: 1, Offset: 1 << 20, Delay: 3 * timeout / 2, Acked: true}
	slowLinkCompletes(t, timeout, n, slow, false, 0, 8<<20)
}

// slowLinkCompletes runs busyJob (an allgatherv of n float64 per rank and
// a barrier) with the slow link slow (an Acked Delay of 1.5 timeouts) once
// per transport buffer size, and checks that every rank completes, that
// the job waited through the slow link, that I/O went on past its
// deadline, and, with wantBusy, that rank 0 told the workers it was busy.
func slowLinkCompletes(t *testing.T, timeout time.Duration, n int, slow faulty.Fault, wantBusy bool, buffers ...int) {
	t.Helper()
	for _, buffer := range buffers {
		t.Run(fmt.Sprintf("buffer=%d", buffer), func(t *testing.T) {
			testkit.SyncTest(t, func(t *testing.T) {
				errs, fired, busy, moved, took := busyJob(t, timeout, buffer, n, slow)
				for r, err := range errs {
					assert.NoError(t, err, "rank %d", r)
				}
				assert.Equal(t, 1, fired, "the slow link")
				assert.GreaterOrEqual(t, took, slow.Delay, "it waited through the slow link")
				assert.Positive(t, moved, "I/O went on past its deadline")
				if wantBusy {
					assert.Positive(t, busy, "workers told that rank 0 was busy")
				}
			})
		})
	}
}

// TestSlowLinkThenLost: rank 0's write to rank 1 of an allgatherv's result
// moves slowly for half a timeout (an Acked Delay), then the peer's host
// stops acknowledging (an unacknowledged Delay that outlasts the write's
// deadline), then takes one byte and hangs. Rank 0's write goes on past
// its deadline while the last acknowledgment is less than a timeout old
// (link.slowWrite), and must fail a timeout (and the slack) after that
// acknowledgment, naming rank 1, on every rank: 15.25 s in (T = 10 s).
// Before, the write went on under a fresh deadline, a timeout after the
// first one passed, and every rank named rank 1 20.5 s in, 15.5 s after
// the last acknowledgment (up to two timeouts and the slacks).
func TestSlowLinkThenLost(t *testing.T) {
	const timeout = 10 * time.Second
	const n = 192 << 10 // float64: 1.5 MiB per rank, a 6 MiB result
	slack := min(timeout/20, 250*time.Millisecond)
	for _, buffer := range []int{0, 1 << 20} {
		t.Run(fmt.Sprintf("buffer=%d", buffer), func(t *testing.T) {
			testkit.SyncTest(t, func(t *testing.T) {
				faults := []faulty.Fault{
					{Kind: faulty.Delay, Rank: 0, Link: 1, Dir: faulty.Write, Frame: 1, Offset: 1<<20 + 100<<10, Delay: timeout / 2, Acked: true},
					{Kind: faulty.Delay, Rank: 0, Link: 1, Dir: faulty.Write, Frame: 1, Offset: 1<<20 + 200<<10, Delay: 2 * timeout},
					{Kind: faulty.Hang, Rank: 0, Link: 1, Dir: faulty.Write, Frame: 1, Offset: 1<<20 + 200<<10 + 1},
				}
				errs, fired, _, slowed, took := busyJob(t, timeout, buffer, n, faults...)
				assert.Equal(t, 3, fired, "the slow link, the silence and the hang")
				assert.Positive(t, slowed, "rank 0's write went on past its first deadline")
				for r, err := range errs {
					failedNaming(t, r, err, 1, "rank 1")
				}
				// The last acknowledgment came half a timeout in.
				assert.LessOrEqual(t, took, timeout/2+timeout+slack+time.Second, "failed a timeout after the last acknowledgment")
			})
		})
	}
}

// failedNaming asserts that err, rank r's, is a *comm.CollectiveFailedError
// naming rank want (who: how the message calls it).
func failedNaming(t *testing.T, r int, err error, want int, who string) {
	t.Helper()
	var cf *comm.CollectiveFailedError
	if assert.True(t, errors.As(err, &cf), "rank %d: got %v, want a CollectiveFailedError", r, err) {
		assert.Equal(t, want, cf.Rank, "rank %d names %s: %v", r, who, err)
	}
}
