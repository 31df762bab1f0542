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
// times the array of scratch. Over a bound, it keeps that while the next
// allreduces need at least a quarter of it (a series of large ones does
// not allocate), and lets it go for the size needed at the first that
// needs less. (It used to keep every byte of the largest until Close: 796
// MB after an allreduce of 256 MiB over 4 ranks.)
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
	for _, step := range []struct {
		n    int // float64s per rank
		kept int // bytes of scratch rank 0 keeps after it (2 workers)
	}{
		{256, 4 << 10},   // within the bound
		{1024, 16 << 10}, // over it: kept for the next ones
		{1024, 16 << 10},
		{512, 16 << 10},
		{256, 16 << 10}, // a quarter: still kept
		{128, 2 << 10},  // less: let go
		{256, 4 << 10},
	} {
		allreduce(step.n)
		assert.Equal(t, step.kept, star.ScratchBytes(c0), "after an allreduce of %d float64s", step.n)
	}
}
