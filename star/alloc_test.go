package star_test

import (
	"context"
	"errors"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/testkit"
)

// TestSteadyStateAllocations checks that, after warm-up, allgatherv,
// allreduce, broadcast and barrier allocate nothing per operation, on any
// rank. It runs over TCP because net.Pipe allocates a timer for every
// deadline it sets.
func TestSteadyStateAllocations(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping allocation count")
	}
	const ranks, ops = 4, 200
	comms, err := testkit.StartStar(context.Background(), testkit.NewTCPNetwork(), ranks, nil)
	require.NoError(t, err)
	defer testkit.CloseAll(comms)
	ctx := context.Background()
	n := 25_000
	counts, displs := make([]int, ranks), make([]int, ranks)
	for r := range counts {
		counts[r], displs[r] = n, r*n
	}
	type bufs struct{ send, recv, red, redOut, bc []float64 }
	b := make([]bufs, ranks)
	for r := range b {
		b[r] = bufs{make([]float64, n), make([]float64, ranks*n), make([]float64, 4), make([]float64, 4), make([]float64, 1280)}
	}
	round := func() {
		errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
			x := &b[c.Rank()]
			for range ops {
				if err := comm.Allgatherv(ctx, c, x.send, x.recv, counts, displs); err != nil {
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
		require.NoError(t, errors.Join(errs...))
	}
	round() // warm-up: scratch buffers grow, goroutine stacks settle
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	round()
	runtime.ReadMemStats(&after)
	perOp := float64(after.Mallocs-before.Mallocs) / float64(ops*4)
	// RunRanks itself starts one goroutine per rank; allow for that and
	// for the runtime's own rare allocations, never one per operation.
	require.Less(t, perOp, 0.1, "allocations per collective (all ranks together): %.3f", perOp)
	t.Logf("allocations per collective, all %d ranks together: %.4f", ranks, perOp)
}
