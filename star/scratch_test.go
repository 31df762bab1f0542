package star_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/star"
	"github.com/starcomm/starcomm/testkit"
)

// TestLargeAllreduceScratchGoes: rank 0 reduces an allreduce from
// times the array of scratch; it keeps that for the next allreduce up to
// a bound, and lets a larger one go when the call returns. (It used to
// keep every byte of the largest until Close: 796 MB after an allreduce
// of 256 MiB over 4 ranks.)
func TestLargeAllreduceScratchGoes(t *testing.T) {
	defer star.SetScratchKeep(4 << 10)()
	comms, err := testkit.StartStar(context.Background(), testkit.NewPipeNetwork(), 3, func(c *star.Config) {
		c.Timeout, c.Liveness = 10*time.Second, -1
	})
	require.NoError(t, err)
	defer testkit.CloseAll(comms)
	allreduce := func(n int) {
		t.Helper()
		errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
			send := make([]float64, n)
			for i := range send {
				send[i] = float64(c.Rank() + i)
			}
			recv := make([]float64, n)
			if err := comm.Allreduce(context.Background(), c, send, recv, comm.Sum); err != nil {
				return err
			}
			for i, v := range recv {
				if v != float64(3*i+3) {
					t.Errorf("rank %d: recv[%d] = %v, want %v", c.Rank(), i, v, 3*i+3)
					break
				}
			}
			return nil
		})
		for _, err := range errs {
			require.NoError(t, err)
		}
	}
	c0 := comms[0].(*star.Comm)
	allreduce(256) // 2 workers x 2 KiB: kept
	assert.Equal(t, 4<<10, star.ScratchBytes(c0), "the scratch of a small allreduce is kept")
	allreduce(256)
	assert.Equal(t, 4<<10, star.ScratchBytes(c0), "and used again")
	allreduce(1024) // 2 x 8 KiB: over the bound
	assert.Zero(t, star.ScratchBytes(c0), "the scratch of a large allreduce is let go")
	allreduce(256)
	assert.Equal(t, 4<<10, star.ScratchBytes(c0))
}
