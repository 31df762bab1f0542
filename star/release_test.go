package star_test

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"weak"

	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/testkit"
)

// TestCallerMemoryReleased checks that no rank keeps a reference to the
// caller's slices (send, recv, counts, displs, the broadcast buffer) once
// a collective has returned, after success and after failure: the garbage
// collector reclaims them. It runs over TCP, with control sessions, so that
// the small, the polled, the relayed and the failing paths all run.
func TestCallerMemoryReleased(t *testing.T) {
	const ranks = 4
	comms, err := testkit.StartStar(context.Background(), testkit.NewTCPNetwork(), ranks, nil)
	require.NoError(t, err)
	defer testkit.CloseAll(comms)
	ctx := context.Background()

	// run calls op on every rank with buffers only op's closure holds and
	// returns weak pointers to them and every rank's error.
	run := func(op func(c comm.Communicator, rank int, keep func(*float64), keepInt func(*int)) error) ([]weak.Pointer[float64], []weak.Pointer[int], []error) {
		var mu sync.Mutex
		var wf []weak.Pointer[float64]
		var wi []weak.Pointer[int]
		errs := make([]error, ranks)
		var wg sync.WaitGroup
		for r, c := range comms {
			wg.Go(func() {
				errs[r] = op(c, r,
					func(p *float64) { mu.Lock(); wf = append(wf, weak.Make(p)); mu.Unlock() },
					func(p *int) { mu.Lock(); wi = append(wi, weak.Make(p)); mu.Unlock() })
			})
		}
		wg.Wait()
		return wf, wi, errs
	}
	collected := func(what string, wf []weak.Pointer[float64], wi []weak.Pointer[int]) {
		t.Helper()
		runtime.GC()
		runtime.GC()
		for i, w := range wf {
			require.Nil(t, w.Value(), "%s: buffer %d still referenced after the collective returned", what, i)
		}
		for i, w := range wi {
			require.Nil(t, w.Value(), "%s: counts or displs %d still referenced after the collective returned", what, i)
		}
	}
	allgatherv := func(n int, bad bool) func(c comm.Communicator, rank int, keep func(*float64), keepInt func(*int)) error {
		return func(c comm.Communicator, rank int, keep func(*float64), keepInt func(*int)) error {
			counts, displs := make([]int, ranks), make([]int, ranks)
			for r := range counts {
				counts[r], displs[r] = n, r*n
			}
			if bad && rank == 2 {
				counts[2]++ // its frame is too long: rank 0 fails it, and so every rank
				displs[3]++
			}
			send, recv := make([]float64, counts[rank]), make([]float64, displs[ranks-1]+counts[ranks-1])
			keep(&send[0])
			keep(&recv[0])
			keepInt(&counts[0])
			keepInt(&displs[0])
			return comm.Allgatherv(ctx, c, send, recv, counts, displs)
		}
	}
	for _, n := range []int{4, 25_000, 40_000} { // small, polled, relayed (1.28 MB)
		wf, wi, errs := run(allgatherv(n, false))
		for r, err := range errs {
			require.NoError(t, err, "allgatherv of %d per rank, rank %d", n, r)
		}
		collected("allgatherv", wf, wi)
	}
	wf, wi, errs := run(func(c comm.Communicator, rank int, keep func(*float64), _ func(*int)) error {
		buf := make([]float64, 1280)
		keep(&buf[0])
		return comm.Broadcast(ctx, c, buf, 1)
	})
	for r, err := range errs {
		require.NoError(t, err, "broadcast, rank %d", r)
	}
	collected("broadcast", wf, wi)
	wf, wi, errs = run(func(c comm.Communicator, rank int, keep func(*float64), _ func(*int)) error {
		send, recv := make([]float64, 4), make([]float64, 4)
		keep(&send[0])
		keep(&recv[0])
		return comm.Allreduce(ctx, c, send, recv, comm.Sum)
	})
	for r, err := range errs {
		require.NoError(t, err, "allreduce, rank %d", r)
	}
	collected("allreduce", wf, wi)

	// Last, a failing allgatherv (the communicators are unusable after it).
	wf, wi, errs = run(allgatherv(40_000, true))
	for r, err := range errs {
		require.Error(t, err, "mismatched allgatherv, rank %d", r)
	}
	collected("failed allgatherv", wf, wi)
}
