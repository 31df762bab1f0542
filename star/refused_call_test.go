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

// TestRefusedCallCancelsNothing: a collective refused for its arguments
// never runs, so its context, cancelled while the call is being refused,
// has nothing to cancel. (It used to be registered before the arguments
// were checked: a cancel in between cancelled every link, nothing resumed
// them, and the next collective, with a live context, failed blaming rank
// 1; it took 75 to 1,500 such calls here.)
func TestRefusedCallCancelsNothing(t *testing.T) {
	testkit.CheckGoroutines(t)
	comms, err := testkit.StartStar(context.Background(), testkit.NewPipeNetwork(), 2, func(c *star.Config) {
		c.Timeout, c.Liveness = 5*time.Second, -1
	})
	require.NoError(t, err)
	defer testkit.CloseAll(comms)
	c0 := comms[0].(*star.Comm)
	one := make([]float64, 1)
	for i := range 5000 {
		ctx, cancel := context.WithCancel(context.Background())
		go cancel()
		err := comm.Allgatherv(ctx, c0, one, one, []int{1}, []int{0}) // counts of the wrong length
		cancel()
		var bad *comm.InvalidBufferSizeError
		var failed *comm.CollectiveFailedError
		if !errors.As(err, &bad) && !errors.As(err, &failed) { // failed: the context was done before the call
			t.Fatalf("call %d: %v, want InvalidBufferSizeError or the context's error", i, err)
		}
		for r, cause := range star.LinkCancelCauses(c0) {
			require.NoError(t, cause, "call %d left the link to rank %d cancelled", i, r+1)
		}
	}
	errs := testkit.RunRanks(comms, func(c comm.Communicator) error { return c.Barrier(context.Background()) })
	assert.NoError(t, errors.Join(errs...), "the barrier after the refused calls")
}

// TestCloseBesideRefusedCalls: a worker's Close while another goroutine
// makes refused calls is the graceful shutdown. (A Close that came between
// a refused call's start and its refusal used to cancel the link, and the
// shutdown then failed on both ranks, each blaming the other.)
func TestCloseBesideRefusedCalls(t *testing.T) {
	testkit.CheckGoroutines(t)
	one := make([]float64, 1)
	for i := range 300 {
		comms, err := testkit.StartStar(context.Background(), testkit.NewPipeNetwork(), 2, func(c *star.Config) {
			c.Timeout, c.Liveness = 5*time.Second, -1
		})
		require.NoError(t, err)
		w := comms[1]
		calls := make(chan error, 1)
		go func() {
			for {
				err := comm.Allgatherv(context.Background(), w, one, one, []int{1}, []int{0})
				var bad *comm.InvalidBufferSizeError
				if !errors.As(err, &bad) {
					calls <- err
					return
				}
			}
		}()
		closed := make(chan error, 1)
		go func() { closed <- w.Close() }()
		e0 := comms[0].Close()
		e1 := <-closed
		require.NoError(t, e0, "try %d: rank 0's Close", i)
		require.NoError(t, e1, "try %d: the worker's Close", i)
		require.ErrorIs(t, <-calls, comm.ErrInvalidCommunicator, "try %d: the call after Close", i)
	}
}
