package star_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/star"
	"github.com/starcomm/starcomm/testkit"
)

// TestSpinFollowsWaitsOverTCP: over real TCP, every polled wait of a
// collective sets the spin of the next one (star.Config.SpinMax): rank 0's
// gather (barrier), rank 0's read of a broadcast's root, and a worker's
// wait for its reply. A rank that waits at least late for a peer spins at
// least late next time (twice a wait of at least late/2).
// SpinMax is far above any wait here, so a slow machine cannot push a wait
// past it.
func TestSpinFollowsWaitsOverTCP(t *testing.T) {
	const (
		spin    = 100 * time.Microsecond
		spinMax = 30 * time.Second
		late    = 5 * time.Millisecond
	)
	testkit.CheckGoroutines(t)
	comms, err := testkit.StartStar(context.Background(), testkit.NewTCPNetwork(), 3, func(c *star.Config) {
		c.Spin, c.SpinMax = spin, spinMax
	})
	require.NoError(t, err)
	t.Cleanup(func() { testkit.CloseAll(comms) })
	for _, c := range comms {
		assert.Equal(t, spin, star.SpinNow(c), "rank %d before any collective", c.Rank())
	}

	// each runs f on every rank at once, rank laggard entering late after
	// every rank's goroutine is running: the others wait about late (at
	// least late/2, so the spin is at least late, whatever the
	// scheduler's delays before they call f).
	each := func(laggard int, f func(c comm.Communicator) error) {
		t.Helper()
		var ready, wg sync.WaitGroup
		ready.Add(len(comms))
		for _, c := range comms {
			wg.Go(func() {
				ready.Done()
				if c.Rank() == laggard {
					ready.Wait()
					time.Sleep(late) // the computation before the call, not synchronisation
				}
				assert.NoError(t, f(c), "rank %d", c.Rank())
			})
		}
		wg.Wait()
	}
	barrier := func(c comm.Communicator) error { return c.Barrier(context.Background()) }

	// Worker 2 late: rank 0's gather waited for it.
	each(2, barrier)
	assert.GreaterOrEqual(t, star.SpinNow(comms[0]), late, "rank 0 after waiting for rank 2")
	assert.LessOrEqual(t, star.SpinNow(comms[0]), spinMax)

	// Rank 0 late: both workers waited for their replies.
	each(0, barrier)
	for _, r := range []int{1, 2} {
		assert.GreaterOrEqual(t, star.SpinNow(comms[r]), late, "rank %d after waiting for rank 0", r)
	}

	// A broadcast from rank 1, late: rank 0 waited for the root's frame,
	// rank 2 for rank 0's.
	buf := [3][]byte{make([]byte, 64), make([]byte, 64), make([]byte, 64)}
	for i := range buf[1] {
		buf[1][i] = byte(i)
	}
	each(1, func(c comm.Communicator) error {
		return c.Broadcast(context.Background(), comm.ViewOf(buf[c.Rank()]), 1)
	})
	assert.Equal(t, buf[1], buf[0])
	assert.Equal(t, buf[1], buf[2])
	for _, r := range []int{0, 2} {
		assert.GreaterOrEqual(t, star.SpinNow(comms[r]), late, "rank %d after waiting for the root", r)
	}
}
