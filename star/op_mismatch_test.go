package star_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

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
