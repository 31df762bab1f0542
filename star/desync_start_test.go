package star_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/star"
	"github.com/starcomm/starcomm/testkit"
)

// TestDesyncCheckFirstCollective: the control sessions come up in the
// background after start-up, and a program's first collective can start
// before the coordinator has attached them; the desync check must cover it
// all the same. Rank 2's session is held just before the coordinator
// attaches it until the check waits for a session, and rank 2 calls the
// first allreduce with another element type of the same size: every rank
// fails naming rank 2. (When the check skipped workers without a session,
// the allreduce passed with wrong results and nothing released the hold
// until the collectives were over.)
func TestDesyncCheckFirstCollective(t *testing.T) {
	testkit.CheckGoroutines(t)
	release := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	defer star.SetTestHook(func(rank int, point string) {
		switch {
		case point == star.HookSessionSetUp && rank == 2:
			<-release
		case point == star.HookAwaitSession:
			open()
		}
	})()
	defer open() // before the communicators close: a held set-up must end
	comms, err := testkit.StartStar(context.Background(), testkit.NewPipeNetwork(), 4, func(c *star.Config) {
		c.Timeout, c.Liveness, c.CheckCollectives = 10*time.Second, 10*time.Second, true
	})
	require.NoError(t, err)
	defer testkit.CloseAll(comms)
	ctx := context.Background()
	errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
		var err error
		if c.Rank() == 2 {
			err = comm.Allreduce(ctx, c, make([]int64, 4), make([]int64, 4), comm.Sum)
		} else {
			err = comm.Allreduce(ctx, c, make([]float64, 4), make([]float64, 4), comm.Sum)
		}
		if err != nil {
			return err
		}
		return c.Barrier(ctx)
	})
	open()
	for r, err := range errs {
		cf := collectiveFailed(t, err, 2)
		assert.Contains(t, cf.Error(), "collective #1: rank 2 called allreduce(int64, n=4, sum); ranks 0,1,3 called allreduce(float64, n=4, sum)", "rank %d", r)
		assert.ErrorIs(t, err, star.ErrDesync, "rank %d", r)
	}
}

// TestDesyncCheckAfterRejectedCall: a call refused on the calling rank
// before anything is sent (bad arguments) does not count as a collective:
// with the desync check on, the ranks' next collectives still match, on a
// worker and on the coordinator alike.
func TestDesyncCheckAfterRejectedCall(t *testing.T) {
	for _, bad := range []int{0, 1} {
		t.Run("rank="+string(rune('0'+bad)), func(t *testing.T) {
			testkit.SyncTest(t, func(t *testing.T) {
				comms := withControl(t, 4, time.Minute, 10*time.Second, nil, func(c *star.Config) { c.CheckCollectives = true })
				defer testkit.CloseAll(comms)
				awaitControl(t, comms)
				ctx := context.Background()
				counts, displs := []int{1, 1, 1, 1}, []int{0, 1, 2, 3}
				errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
					if err := c.Barrier(ctx); err != nil {
						return err
					}
					if c.Rank() == bad {
						err := comm.Allgatherv(ctx, c, make([]float64, 2), make([]float64, 4), counts, displs)
						var ia *comm.InvalidBufferSizeError
						if !assert.ErrorAs(t, err, &ia, "rank %d's call with a send of 2 for a count of 1", bad) {
							return err
						}
					}
					recv := make([]float64, 4)
					if err := comm.Allgatherv(ctx, c, []float64{float64(c.Rank())}, recv, counts, displs); err != nil {
						return err
					}
					if err := c.Barrier(ctx); err != nil {
						return err
					}
					assert.Equal(t, []float64{0, 1, 2, 3}, recv, "rank %d", c.Rank())
					return nil
				})
				for r, err := range errs {
					require.NoError(t, err, "rank %d", r)
				}
			})
		})
	}
}

// TestDesyncCheckWorkerClosed: with the desync check on, a worker that
// closes its communicator while the others wait in a collective is named
// at once, on every rank, as without the check (its data link's end
// shows it there). Before, the coordinator waited for the closing
// worker's fingerprint for the whole collective timeout, and the ranks
// failed as if it had hung, while its Close waited as long for rank 0's
// Shutdown.
func TestDesyncCheckWorkerClosed(t *testing.T) {
	testkit.CheckGoroutines(t)
	for _, nw := range []struct {
		name string
		nw   testkit.Network
	}{{"pipe", testkit.NewPipeNetwork()}, {"tcp", testkit.NewTCPNetwork()}} {
		t.Run(nw.name, func(t *testing.T) {
			const timeout = 20 * time.Second
			comms, err := testkit.StartStar(context.Background(), nw.nw, 3, func(c *star.Config) {
				c.Timeout, c.Liveness, c.CheckCollectives = timeout, 10*time.Second, true
			})
			require.NoError(t, err)
			defer testkit.CloseAll(comms)
			ctx := context.Background()
			start := time.Now()
			errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
				if err := c.Barrier(ctx); err != nil {
					return err
				}
				if c.Rank() == 2 {
					return c.Close()
				}
				return c.Barrier(ctx)
			})
			elapsed := time.Since(start)
			for r := range 2 {
				cf := collectiveFailed(t, errs[r], 2)
				assert.Contains(t, cf.Error(), "collective #2: rank 2 called Close() (it closed its communicator); ranks 0,1 called barrier()", "rank %d", r)
				assert.ErrorIs(t, errs[r], star.ErrDesync, "rank %d", r)
			}
			require.Error(t, errs[2])
			assert.Contains(t, errs[2].Error(), "rank 0 aborted instead of shutting down: aborted by rank 0: ")
			assert.Equal(t, 1, strings.Count(errs[2].Error(), "rank 2 called Close()"), "the reason once: %v", errs[2])
			assert.Less(t, elapsed, timeout/2, "named at once, not at the timeout")
		})
	}
}
