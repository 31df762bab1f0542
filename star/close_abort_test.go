package star_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/star"
	"github.com/starcomm/starcomm/testkit"
)

// TestCoordinatorCloseReadsWorkersAbort: a worker that fails a collective
// rank 0 completed (rank 2 expects a longer broadcast from rank 0) sends
// rank 0 an Abort and closes. Rank 0 learns of it only at Close, whose
// error must be that Abort, naming the rank the Abort blames, not "still
// sending" bytes of a collective rank 0 did not call, nor the Shutdown it
// could not deliver. Over TCP, where rank 0's Close half-closes and reads
// what each worker still sends until it closes (a net.Pipe has no half
// close: rank 0 closes at once there).
func TestCoordinatorCloseReadsWorkersAbort(t *testing.T) {
	for _, nw := range []struct {
		name string
		nw   testkit.Network
	}{{"tcp", testkit.NewTCPNetwork()}} {
		t.Run(nw.name, func(t *testing.T) {
			testkit.CheckGoroutines(t)
			comms, err := testkit.StartStar(context.Background(), nw.nw, 3, func(c *star.Config) {
				c.Timeout, c.Liveness = 10*time.Second, -1
			})
			require.NoError(t, err)
			ctx := context.Background()
			errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
				n := 4
				if c.Rank() == 2 {
					n = 5
				}
				return comm.Broadcast(ctx, c, make([]float64, n), 0)
			})
			require.NoError(t, errs[0], "rank 0 wrote its broadcast")
			require.NoError(t, errs[1], "rank 1 got the broadcast it expected")
			require.Error(t, errs[2], "rank 2 expected a longer broadcast")
			var size *comm.InvalidBufferSizeError
			require.ErrorAs(t, errs[2], &size, "rank 2's error: %v", errs[2])

			closeErrs := make([]error, 3)
			done := make(chan struct{})
			go func() {
				defer close(done)
				closeErrs[2] = comms[2].Close()
				closeErrs[1] = comms[1].Close()
			}()
			closeErrs[0] = comms[0].Close()
			<-done
			var cf *comm.CollectiveFailedError
			require.ErrorAs(t, closeErrs[0], &cf, "rank 0's Close (the others: %v, %v; rank 2: %v)", closeErrs[1], closeErrs[2], errs[2])
			var ab *star.AbortError
			require.ErrorAs(t, closeErrs[0], &ab, "rank 0's Close: %v", closeErrs[0])
			assert.Equal(t, 2, ab.From, "the Abort came from rank 2")
			assert.Equal(t, comm.OpBroadcast, ab.Op, "the Abort says which collective failed")
			assert.Equal(t, ab.Rank, cf.Rank, "rank 0's Close names the rank the Abort blames: %v", closeErrs[0])
			assert.Equal(t, star.OpClose, cf.Operation)
			assert.NotContains(t, closeErrs[0].Error(), "still sending")
			assert.False(t, errors.Is(closeErrs[0], comm.ErrInvalidCommunicator))
		})
	}
}
