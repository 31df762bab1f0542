package shm_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/shm"
	"github.com/starcomm/starcomm/testkit"
)

// mismatchTimeout is the ranks' CommConfig.Timeout in the mismatch tests:
// a mismatch must fail every rank long before it.
const mismatchTimeout = 20 * time.Second

// mismatchPrompt bounds how long a mismatched collective may take on any
// rank: far below mismatchTimeout, so a rank that only fails through the
// timeout (a hang) is caught.
const mismatchPrompt = 5 * time.Second

// outcome is what one rank's mismatched collective returned.
type outcome struct {
	err     error
	took    time.Duration
	failure *shm.Failure // what OnFailure received, if it was called
}

// runMismatch starts size ranks (chunk bytes per chunk, 0: the default),
// runs warm barriers on every rank (so that call starts at step warm, and
// writes its header in either slot), then call on every rank concurrently,
// and returns each rank's outcome of call. It closes the ranks when the
// test ends.
func runMismatch(t *testing.T, size, chunk, warm int, call func(ctx context.Context, c *shm.Comm) error) []outcome {
	t.Helper()
	outs := make([]outcome, size)
	var mu sync.Mutex
	cs := startRanks(t, size, func(c *shm.CommConfig) {
		c.Timeout = mismatchTimeout
		c.ChunkBytes = chunk
		r := c.Rank
		c.OnFailure = func(f shm.Failure) {
			mu.Lock()
			defer mu.Unlock()
			outs[r].failure = &f
		}
	})
	t.Cleanup(func() { closeAll(cs) })
	var wg sync.WaitGroup
	for r, c := range cs {
		wg.Go(func() {
			for range warm {
				if err := c.Barrier(context.Background()); err != nil {
					outs[r].err = fmt.Errorf("warm-up barrier: %w", err)
					return
				}
			}
			begin := time.Now()
			err := call(context.Background(), c)
			outs[r].err, outs[r].took = err, time.Since(begin)
		})
	}
	wg.Wait()
	for _, o := range outs {
		if o.err == nil {
			return outs // a rank succeeded: its next call would wait for the others
		}
	}
	// Fail-stop: the next call of every rank fails naming the same rank.
	for r, c := range cs {
		err := c.Barrier(context.Background())
		var cf *comm.CollectiveFailedError
		if assert.ErrorAs(t, err, &cf, "rank %d's next call", r) && outs[r].failure != nil {
			assert.Equal(t, outs[r].failure.Blamed, cf.Rank, "rank %d's next call: %v", r, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	return outs
}

// assertBlamed checks every rank's outcome: it failed promptly, OnFailure
// (what the launcher records) blames rank blamed, and the error is either
// a *comm.CollectiveFailedError naming blamed whose *shm.AbortError names
// it too, which wraps shm.ErrMismatch and whose message contains mention,
// or, where lengths allows it for that rank, a
// *comm.InvalidBufferSizeError in bytes. It returns the ranks that got an
// InvalidBufferSizeError, with it.
func assertBlamed(t *testing.T, outs []outcome, blamed int, lengths func(rank int) bool, mention string) map[int]*comm.InvalidBufferSizeError {
	t.Helper()
	ibs := map[int]*comm.InvalidBufferSizeError{}
	for r, o := range outs {
		require.Error(t, o.err, "rank %d returned no error", r)
		assert.Less(t, o.took, mismatchPrompt, "rank %d: a mismatch must fail at once, not through the timeout: %v", r, o.err)
		if assert.NotNil(t, o.failure, "rank %d: OnFailure not called", r) {
			assert.Equal(t, blamed, o.failure.Blamed, "rank %d's OnFailure (the launcher's root cause): %v", r, o.err)
			assert.Equal(t, r, o.failure.Rank)
			assert.Equal(t, o.err, o.failure.Err)
		}
		var size *comm.InvalidBufferSizeError
		if errors.As(o.err, &size) {
			assert.True(t, lengths != nil && lengths(r), "rank %d: unexpected %v", r, o.err)
			assert.Equal(t, "bytes", size.Unit, "rank %d", r)
			ibs[r] = size
			continue
		}
		var cf *comm.CollectiveFailedError
		if !assert.ErrorAs(t, o.err, &cf, "rank %d", r) {
			continue
		}
		assert.ErrorIs(t, o.err, shm.ErrMismatch, "rank %d", r)
		assert.Equal(t, blamed, cf.Rank, "rank %d: %v", r, o.err)
		var ae *shm.AbortError
		if assert.ErrorAs(t, o.err, &ae, "rank %d", r) {
			assert.Equal(t, blamed, ae.Rank, "rank %d: %v", r, o.err)
		}
		assert.Contains(t, o.err.Error(), mention, "rank %d", r)
	}
	return ibs
}

// TestBroadcastRootMismatch: ranks that disagree on a broadcast's root
// fail, every one of them and at once, with ErrMismatch naming the same
// rank: the rank whose root differs from the one most ranks pass (the
// root itself, rank 0, or a non-root as it may be), rank 0's side winning
// a tie. The messages name both roots.
func TestBroadcastRootMismatch(t *testing.T) {
	testkit.CheckGoroutines(t)
	cases := []struct {
		roots       []int // each rank's root
		blamed, ref int   // the rank blamed; the lowest rank of the reference
	}{
		{[]int{1, 1, 2, 1}, 2, 0}, // rank 2 believes it is the root
		{[]int{0, 1, 1, 1}, 0, 1}, // rank 0 is the odd one, believing it is the root
		{[]int{1, 0, 1, 1}, 1, 0}, // the root is the odd one (it believes rank 0 is)
		{[]int{2, 2, 0, 2}, 2, 0}, // the root is the odd one (it believes rank 0 is)
		{[]int{3, 1, 2, 1}, 0, 1}, // three roots: root 1 has most ranks
		{[]int{0, 0, 1, 1}, 2, 0}, // a tie: rank 0's side is the reference
		{[]int{3, 3, 3, 0}, 3, 0}, // the odd one believes rank 0 is the root
		{[]int{0, 1}, 1, 0},       // two ranks: rank 0 is the reference
		{[]int{1, 0}, 1, 0},
		{[]int{2, 2, 2, 2, 2, 2, 2, 5}, 7, 0},
	}
	for _, tc := range cases {
		for _, chunk := range []int{0, 64} { // one step; many steps
			warm := chunk / 64 // the header in either slot
			t.Run(fmt.Sprintf("roots=%v/chunk=%d", tc.roots, chunk), func(t *testing.T) {
				outs := runMismatch(t, len(tc.roots), chunk, warm, func(ctx context.Context, c *shm.Comm) error {
					buf := make([]float64, 100)
					for i := range buf {
						buf[i] = float64(c.Rank())
					}
					return comm.Broadcast(ctx, c, buf, tc.roots[c.Rank()])
				})
				assertBlamed(t, outs, tc.blamed, nil, fmt.Sprintf("rank %d broadcasts from root %d, rank %d from root %d",
					tc.blamed, tc.roots[tc.blamed], tc.ref, tc.roots[tc.ref]))
			})
		}
	}
}

// TestMismatchBlamesTheRankThatDiffers: ranks that disagree on the
// collective, the element type, the operator or a length name, on every
// rank, the rank whose call differs from the one most ranks make (rank 0's
// side on a tie), whichever rank noticed, in the error and in OnFailure.
func TestMismatchBlamesTheRankThatDiffers(t *testing.T) {
	testkit.CheckGoroutines(t)
	allreduce := func(ctx context.Context, c *shm.Comm, n int, op comm.ReduceOp) error {
		return comm.Allreduce(ctx, c, make([]float64, n), make([]float64, n), op)
	}
	t.Run("type", func(t *testing.T) {
		for _, odd := range []int{2, 0} {
			outs := runMismatch(t, 4, 0, odd, func(ctx context.Context, c *shm.Comm) error {
				if c.Rank() == odd {
					return comm.Allreduce(ctx, c, []int64{1, 2}, make([]int64, 2), comm.Sum)
				}
				return allreduce(ctx, c, 2, comm.Sum)
			})
			ref := 0
			if odd == 0 {
				ref = 1
			}
			assertBlamed(t, outs, odd, nil, fmt.Sprintf("rank %d passed int64 elements, rank %d float64", odd, ref))
		}
	})
	t.Run("op", func(t *testing.T) {
		outs := runMismatch(t, 4, 0, 1, func(ctx context.Context, c *shm.Comm) error {
			if c.Rank() == 3 {
				return allreduce(ctx, c, 2, comm.Max)
			}
			return allreduce(ctx, c, 2, comm.Sum)
		})
		assertBlamed(t, outs, 3, nil, fmt.Sprintf("rank 3 reduces with %v, rank 0 with %v", comm.Max, comm.Sum))
	})
	t.Run("collective", func(t *testing.T) {
		for _, tc := range []struct{ size, odd int }{{4, 2}, {4, 0}, {3, 1}, {2, 1}} {
			outs := runMismatch(t, tc.size, 0, tc.odd, func(ctx context.Context, c *shm.Comm) error {
				if c.Rank() == tc.odd {
					return c.Barrier(ctx)
				}
				return allreduce(ctx, c, 2, comm.Sum)
			})
			blamed, mention := tc.odd, fmt.Sprintf("rank %d called barrier", tc.odd)
			if tc.size == 2 { // a tie: rank 0's call is the reference
				blamed, mention = 1, "rank 1 called barrier, rank 0 allreduce"
			}
			assertBlamed(t, outs, blamed, nil, mention)
		}
	})
	t.Run("allreduce-length", func(t *testing.T) {
		outs := runMismatch(t, 4, 0, 3, func(ctx context.Context, c *shm.Comm) error {
			if c.Rank() == 1 {
				return allreduce(ctx, c, 3, comm.Sum)
			}
			return allreduce(ctx, c, 4, comm.Sum)
		})
		ibs := assertBlamed(t, outs, 1, func(int) bool { return true }, "")
		require.Len(t, ibs, 4, "every rank sees a length that disagrees with its own")
		for r, e := range ibs {
			want := comm.InvalidBufferSizeError{Operation: comm.OpAllreduce, Expected: 32, Actual: 24, Unit: "bytes", Detail: "contribution of rank 1"}
			if r == 1 { // the rank blamed names the reference
				want = comm.InvalidBufferSizeError{Operation: comm.OpAllreduce, Expected: 24, Actual: 32, Unit: "bytes", Detail: "contribution of rank 0"}
			}
			assert.Equal(t, want, *e, "rank %d", r)
		}
	})
	t.Run("allgatherv-contribution", func(t *testing.T) {
		// Rank 1 contributes 16 bytes where every other rank expects 8.
		outs := runMismatch(t, 4, 0, 1, func(ctx context.Context, c *shm.Comm) error {
			counts := []int{1, 1, 1, 1}
			if c.Rank() == 1 {
				counts[1] = 2
			}
			displs := []int{0, 1, 2, 3}
			if c.Rank() == 1 {
				displs = []int{0, 1, 3, 4}
			}
			return comm.Allgatherv(ctx, c, make([]float64, counts[c.Rank()]), make([]float64, 5), counts, displs)
		})
		ibs := assertBlamed(t, outs, 1, func(r int) bool { return r != 1 }, "rank 1 passed allgatherv counts that differ from rank 0's")
		require.Len(t, ibs, 3)
		for r, e := range ibs {
			assert.Equal(t, comm.InvalidBufferSizeError{Operation: comm.OpAllgatherv, Expected: 8, Actual: 16, Unit: "bytes", Detail: "contribution of rank 1"}, *e, "rank %d", r)
		}
	})
	t.Run("allgatherv-third-rank", func(t *testing.T) {
		// Rank 3 believes rank 0 contributes 3 elements; rank 0 and the
		// others, 2: only rank 3 sees a contribution disagree with its
		// arguments, yet every rank fails, blaming rank 3.
		outs := runMismatch(t, 4, 64, 2, func(ctx context.Context, c *shm.Comm) error {
			counts := []int{2, 2, 2, 2}
			if c.Rank() == 3 {
				counts[0] = 3
			}
			displs := []int{0, counts[0], counts[0] + 2, counts[0] + 4}
			return comm.Allgatherv(ctx, c, make([]float64, counts[c.Rank()]), make([]float64, counts[0]+6), counts, displs)
		})
		ibs := assertBlamed(t, outs, 3, func(r int) bool { return r == 3 }, "rank 3 passed allgatherv counts that differ from rank 0's")
		require.Len(t, ibs, 1)
		assert.Equal(t, comm.InvalidBufferSizeError{Operation: comm.OpAllgatherv, Expected: 24, Actual: 16, Unit: "bytes", Detail: "contribution of rank 0"}, *ibs[3])
	})
}
