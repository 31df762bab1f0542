package star_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/star"
	"github.com/starcomm/starcomm/testkit"
)

// TestReduceOpMismatchBlame: an allreduce whose ranks disagree on the
// operator (seen on the wire, without the desync check) fails every rank
// naming the rank that differs from the others, rank 0 included; on a tie
// rank 0's operator is the reference.
func TestReduceOpMismatchBlame(t *testing.T) {
	for _, tc := range []struct {
		size, odd, blamed int
		want              string
	}{
		{4, 2, 2, "rank 2 called allreduce with max; ranks 0,1,3 with sum"},
		{4, 0, 0, "rank 0 called allreduce with max; ranks 1,2,3 with sum"},
		{3, 0, 0, "rank 0 called allreduce with max; ranks 1,2 with sum"},
		{2, 0, 1, "rank 1 called allreduce with sum; rank 0 with max"},
	} {
		t.Run(fmt.Sprintf("size=%d/odd=%d", tc.size, tc.odd), func(t *testing.T) {
			testkit.SyncTest(t, func(t *testing.T) {
				comms := inBubble(t, tc.size, func(c *star.Config) { c.Timeout = time.Minute })
				defer testkit.CloseAll(comms)
				ctx := context.Background()
				errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
					op := comm.Sum
					if c.Rank() == tc.odd {
						op = comm.Max
					}
					return comm.Allreduce(ctx, c, []float64{1}, make([]float64, 1), op)
				})
				for r, err := range errs {
					cf := collectiveFailed(t, err, tc.blamed)
					assert.ErrorIs(t, err, star.ErrReduceOpMismatch, "rank %d", r)
					assert.Contains(t, cf.Error(), tc.want, "rank %d", r)
				}
			})
		})
	}
}

// TestCountsMismatchSeenByOneRank: rank 2's counts differ from the others'
// for rank 1's region only. Without the desync check the wire shows it only
// to rank 2, as the length of rank 0's reply: rank 2 gets an
// InvalidBufferSizeError naming rank 0's frame, the others' allgatherv
// succeeds and their next collective fails on rank 2's Abort. With the
// desync check every rank fails in the allgatherv itself, naming rank 2 (as
// the README's "A bad frame" says).
func TestCountsMismatchSeenByOneRank(t *testing.T) {
	const size, odd = 4, 2
	run := func(c comm.Communicator) error {
		counts, displs := []int{3, 3, 3, 3}, []int{0, 4, 8, 12}
		if c.Rank() == odd {
			counts[1] = 4
		}
		return comm.Allgatherv(context.Background(), c, make([]float64, counts[c.Rank()]), make([]float64, 16), counts, displs)
	}
	t.Run("check=off", func(t *testing.T) {
		testkit.SyncTest(t, func(t *testing.T) {
			comms := inBubble(t, size, func(c *star.Config) { c.Timeout = time.Minute })
			defer testkit.CloseAll(comms)
			errs := testkit.RunRanks(comms, run)
			for r, err := range errs {
				if r != odd {
					assert.NoError(t, err, "rank %d: nothing it reads disagrees", r)
					continue
				}
				var ibs *comm.InvalidBufferSizeError
				if assert.ErrorAs(t, err, &ibs) {
					assert.Equal(t, 13*8, ibs.Expected)
					assert.Equal(t, 12*8, ibs.Actual)
					assert.Contains(t, ibs.Detail, "AllgathervRecv frame from rank 0; ranks disagree on the buffer sizes")
				}
			}
			errs = testkit.RunRanks(comms, func(c comm.Communicator) error { return c.Barrier(context.Background()) })
			for r, err := range errs {
				if r != odd {
					collectiveFailed(t, err, 0)
					assert.Contains(t, err.Error(), "aborted by rank 2", "rank %d", r)
				}
			}
		})
	})
	t.Run("check=on", func(t *testing.T) {
		testkit.SyncTest(t, func(t *testing.T) {
			comms := inBubble(t, size, func(c *star.Config) { c.Timeout, c.CheckCollectives = time.Minute, true })
			defer testkit.CloseAll(comms)
			for r, err := range testkit.RunRanks(comms, run) {
				collectiveFailed(t, err, odd)
				assert.ErrorIs(t, err, star.ErrDesync, "rank %d", r)
				assert.Contains(t, err.Error(), "rank 2 called allgatherv(float64, counts=[3,4,3,3]); ranks 0,1,3 called allgatherv(float64, counts=[3,3,3,3])", "rank %d", r)
			}
		})
	})
}

// TestAllreduceLengthMismatchSaysDataBytes: rank 2 allreduces 5 float64,
// the others 4. Rank 0 reads rank 2's AllreduceSend frame, whose payload is
// the op byte and the data: the error's lengths are the payload's (33 and
// 41 bytes), and its Detail gives the data's (32 and 40), so that the
// figures match the callers' buffers.
func TestAllreduceLengthMismatchSaysDataBytes(t *testing.T) {
	testkit.SyncTest(t, func(t *testing.T) {
		comms := inBubble(t, 3, func(c *star.Config) { c.Timeout = time.Minute })
		defer testkit.CloseAll(comms)
		errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
			n := 4
			if c.Rank() == 2 {
				n = 5
			}
			return comm.Allreduce(context.Background(), c, make([]float64, n), make([]float64, n), comm.Sum)
		})
		var ibs *comm.InvalidBufferSizeError
		require.ErrorAs(t, errs[0], &ibs, "rank 0: %v", errs[0])
		assert.Equal(t, 33, ibs.Expected)
		assert.Equal(t, 41, ibs.Actual)
		assert.Contains(t, ibs.Detail, "AllreduceSend frame from rank 2: its payload is the reduce op's byte and then the data, here 40 bytes of data where this rank has 32")
		for r := 1; r < 3; r++ {
			assert.Error(t, errs[r], "rank %d", r)
		}
	})
}

// TestCloseErrorOneLine: rank 0 closes while both its workers wait in a
// barrier it never called: its Close names them both, on one line (a log
// line, an error file's record), and still unwraps to each one's error.
func TestCloseErrorOneLine(t *testing.T) {
	testkit.SyncTest(t, func(t *testing.T) {
		comms := inBubble(t, 3, func(c *star.Config) { c.Timeout = time.Minute })
		done := make(chan error, 2)
		for _, w := range comms[1:] {
			go func() { done <- w.Barrier(context.Background()) }()
		}
		synctest.Wait()
		cerr := comms[0].Close()
		for range 2 {
			assert.ErrorIs(t, <-done, star.ErrShutdown)
		}
		testkit.CloseAll(comms)
		require.Error(t, cerr)
		msg := cerr.Error()
		assert.NotContains(t, msg, "\n")
		assert.Contains(t, msg, "rank 1 was still sending")
		assert.Contains(t, msg, "rank 2 was still sending")
		assert.Contains(t, msg, "; rank 2")
	})
}
