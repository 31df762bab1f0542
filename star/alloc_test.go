package star_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/star"
	"github.com/starcomm/starcomm/testkit"
)

// TestSteadyStateAllocations checks that, after warm-up, allgatherv (small,
// and large enough to be relayed when the control sessions are on and
// the relay is not left out for workers on this host),
// allreduce, broadcast and barrier allocate nothing per operation, on any
// rank, with the control session off and on. It runs over TCP because
// net.Pipe allocates a timer for every deadline it sets. With the control
// session on, the liveness timeout is an hour, so that no heartbeat (a few
// allocations each, by the clock, not per collective) falls in the
// measurement. The collectives run under a context that can be cancelled,
// as a program's usually is, so that its watch is counted too.
func TestSteadyStateAllocations(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping allocation count")
	}
	var relays atomic.Int64
	defer star.SetTestHook(func(_ int, point string) {
		if point == star.HookRelay {
			relays.Add(1)
		}
	})()
	for _, tc := range []struct {
		live  time.Duration
		relay bool // relay on this host (star.SetRelayOnHost)
	}{{-1, true}, {time.Hour, true}, {time.Hour, false}} {
		t.Run(fmt.Sprintf("liveness=%v/relay-on-host=%v", tc.live, tc.relay), func(t *testing.T) {
			if tc.relay {
				defer star.SetRelayOnHost()()
			}
			before := relays.Load()
			steadyStateAllocations(t, 0.1, func(c *star.Config) { c.Liveness = tc.live })
			switch {
			case tc.live < 0:
				require.Equal(t, before, relays.Load(), "no relay without control sessions")
			case tc.relay:
				require.Greater(t, relays.Load(), before+600, "large allgathervs relayed")
			default:
				require.Equal(t, before, relays.Load(), "workers on this host: stored and forwarded")
			}
		})
	}
}

// TestSteadyStateAllocationsStreamed is TestSteadyStateAllocations with
// its allreduce streamed (in 16-byte chunks, so 2 per allreduce): the
// streamed reduction's hand-offs allocate nothing; rank 0's word on each
// control session that it is here (msgHere) does: a goroutine, smux's
// frame, the worker's message. That is at most 30 allocations per worker
// per streamed allreduce (which moves at least 64 MiB in use), here at most
// 18 per collective of the round's five.
func TestSteadyStateAllocationsStreamed(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping allocation count")
	}
	defer star.SetStream(1, 16)()
	counts, restore := countStreams()
	defer restore()
	steadyStateAllocations(t, 18, func(c *star.Config) { c.Liveness = time.Hour })
	require.Greater(t, counts.streams.Load(), int64(600), "the allreduces streamed")
	require.Greater(t, counts.replies.Load(), int64(600), "their replies overlapping the reduction")
}

// steadyStateAllocations runs the rounds and requires fewer than limit
// allocations per collective, all ranks together.
func steadyStateAllocations(t *testing.T, limit float64, tweak func(*star.Config)) {
	const ranks = 4
	comms, err := testkit.StartStar(context.Background(), testkit.NewTCPNetwork(), ranks, tweak)
	require.NoError(t, err)
	defer testkit.CloseAll(comms)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := 25_000
	counts, displs := make([]int, ranks), make([]int, ranks)
	for r := range counts {
		counts[r], displs[r] = n, r*n
	}
	// big: 320 kB per rank, 1.28 MB in all: relayed.
	big := 40_000
	bcounts, bdispls := make([]int, ranks), make([]int, ranks)
	for r := range bcounts {
		bcounts[r], bdispls[r] = big, r*big
	}
	type bufs struct{ send, recv, bsend, brecv, red, redOut, bc []float64 }
	b := make([]bufs, ranks)
	for r := range b {
		b[r] = bufs{make([]float64, n), make([]float64, ranks*n), make([]float64, big), make([]float64, ranks*big),
			make([]float64, 4), make([]float64, 4), make([]float64, 1280)}
	}
	// round runs ops rounds of the four collectives on every rank and
	// returns the mallocs of the whole process meanwhile.
	round := func(ops int) uint64 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
			x := &b[c.Rank()]
			for range ops {
				if err := comm.Allgatherv(ctx, c, x.send, x.recv, counts, displs); err != nil {
					return err
				}
				if err := comm.Allgatherv(ctx, c, x.bsend, x.brecv, bcounts, bdispls); err != nil {
					return err
				}
				if err := comm.Allreduce(ctx, c, x.red, x.redOut, comm.Sum); err != nil {
					return err
				}
				if err := comm.Broadcast(ctx, c, x.bc, ranks-1); err != nil {
					return err
				}
				if err := c.Barrier(ctx); err != nil {
					return err
				}
			}
			return nil
		})
		runtime.ReadMemStats(&after)
		require.NoError(t, errors.Join(errs...))
		return after.Mallocs - before.Mallocs
	}
	round(100) // warm-up: scratch buffers grow, goroutine stacks settle
	// The difference between a short and a long round is what the extra
	// collectives allocated; fixed costs (RunRanks' goroutines, the race
	// detector's bookkeeping) cancel out.
	const short, long = 100, 600
	m1, m2 := round(short), round(long)
	extra := float64(int64(m2)-int64(m1)) / float64((long-short)*5)
	t.Logf("allocations per collective, all %d ranks together: %.4f (mallocs: %d in %d rounds, %d in %d)", ranks, extra, m1, short, m2, long)
	// One allocation in one of a round's five collectives shows 0.2; what
	// is left is the runtime's own (sudog caches refilling under select),
	// about 0.03.
	require.Less(t, extra, limit, "allocations per collective (all ranks together)")
}
