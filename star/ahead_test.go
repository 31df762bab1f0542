package star_test

import (
	"context"
	"io"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/star"
	"github.com/starcomm/starcomm/testkit"
	"github.com/starcomm/starcomm/transport/faulty"
)

// A peer that ends without a farewell may have said more on its data link
// than this end has read: it is then not taken for gone before those
// bytes are read. On the fake clock, over pipes that buffer as sockets do.

// TestExitAhead: the root of a broadcast returns from it at once, and its
// process ends (without Close) before the others call the broadcast: its
// bytes wait complete in their data links. Their broadcast succeeds with
// them, and their next collective fails at once naming the root (on rank
// 0, and on the workers told by it, with a cause that matches io.EOF). The root is a worker (rank 0 computes, or,
// with the desync check, waits inside the broadcast for a late rank's
// fingerprint) or rank 0. Before, the end of the root's control session
// failed the broadcast itself after 100 ms.
func TestExitAhead(t *testing.T) {
	for _, tc := range []struct {
		name  string
		root  int
		check bool
	}{{"worker", 1, false}, {"worker/checked", 1, true}, {"coordinator", 0, false}} {
		t.Run(tc.name, func(t *testing.T) {
			testkit.SyncTest(t, func(t *testing.T) {
				s := faulty.NewScript(faulty.Fault{Kind: faulty.Crash, Rank: tc.root, Link: -1, Manual: true, WholeRank: true})
				comms := startFaulty(t, 3, 64<<10, time.Hour, 10*time.Second, s, func(c *star.Config) { c.CheckCollectives = tc.check })
				defer testkit.CloseAll(comms)
				ctx := context.Background()
				warmUp(t, comms)
				want := []byte("the root's bytes, whole in the others' data links")
				require.NoError(t, comm.Broadcast(ctx, comms[tc.root], append([]byte(nil), want...), tc.root))
				s.Fire(tc.root) // its process ends
				var wg sync.WaitGroup
				errs := make([]error, 3)
				for r := range 3 {
					if r == tc.root {
						continue
					}
					wg.Go(func() {
						if r != 0 || !tc.check {
							time.Sleep(time.Second) // computes
						}
						got := make([]byte, len(want))
						if errs[r] = comm.Broadcast(ctx, comms[r], got, tc.root); errs[r] == nil {
							assert.Equal(t, want, got, "rank %d's bytes", r)
						}
					})
				}
				wg.Wait()
				for r, err := range errs {
					assert.NoError(t, err, "rank %d's broadcast", r)
				}
				begin := time.Now()
				for r := range 3 {
					if r == tc.root {
						continue
					}
					wg.Go(func() { errs[r] = comms[r].Barrier(ctx) })
				}
				wg.Wait()
				for r, err := range errs {
					if r == tc.root {
						continue
					}
					collectiveFailed(t, err, tc.root)
					if tc.root != 0 {
						// Rank 0 reads the root's data link: its end.
						// (A worker writes its Ready first, to a link
						// that is closed.)
						assert.ErrorIs(t, err, io.EOF, "rank %d", r)
					}
				}
				assert.Less(t, time.Since(begin), time.Second, "the barrier fails at once")
			})
		})
	}
}

// TestAbortWaitingOnDataLink: rank 1 ends at once after start-up; rank 0's
// first barrier fails naming it, and rank 0 sends its Abort on its data
// links. Rank 2's control session, which rank 2 already counts as up, is
// attached on rank 0 only after that failure (held by a test hook), so no
// Abort goes to rank 2 over it; then rank 0 closes, without a farewell
// (it had failed). Rank 2, which computes for a second, then fails its
// barrier naming rank 1, as the Abort waiting in its data link says, not
// rank 0 for the end of its control session.
func TestAbortWaitingOnDataLink(t *testing.T) {
	testkit.SyncTest(t, func(t *testing.T) {
		release := make(chan struct{})
		defer star.SetTestHook(func(rank int, point string) {
			if point == star.HookSessionSetUp && rank == 2 {
				<-release
			}
		})()
		s := faulty.NewScript(faulty.Fault{Kind: faulty.Crash, Rank: 1, Link: -1, Manual: true, WholeRank: true})
		comms := startFaulty(t, 3, 64<<10, time.Hour, 10*time.Second, s)
		defer testkit.CloseAll(comms)
		ctx := context.Background()
		synctest.Wait() // rank 2's session is held on rank 0
		s.Fire(1)
		collectiveFailed(t, comms[0].Barrier(ctx), 1)
		close(release)
		synctest.Wait() // rank 0 attaches rank 2's session
		_ = comms[0].Close()
		time.Sleep(time.Second) // rank 2 computes
		err := comms[2].Barrier(ctx)
		collectiveFailed(t, err, 1)
		assert.NotContains(t, err.Error(), "process ended", "rank 0's Abort, not its exit")
	})
}

// TestExitNeededByRunningCollective: with the desync check on, rank 0 reads
// the workers' fingerprints one at a time, and waits in a barrier for rank
// 2's, which computes for a minute; rank 3 has entered the barrier (its
// Ready waits unread in its data link) when its process ends. Rank 3
// needed the barrier's result, so its unread bytes complete nothing: ranks
// 0 and 1 fail within a second naming it ("process ended"), and rank 2's
// barrier, when it comes, fails at once. (Waiting for those bytes to be
// read kept them waiting for rank 2.)
func TestExitNeededByRunningCollective(t *testing.T) {
	testkit.SyncTest(t, func(t *testing.T) {
		s := faulty.NewScript(faulty.Fault{Kind: faulty.Crash, Rank: 3, Link: -1, Manual: true, WholeRank: true})
		comms := startFaulty(t, 4, 64<<10, time.Hour, 10*time.Second, s, func(c *star.Config) { c.CheckCollectives = true })
		defer testkit.CloseAll(comms)
		ctx := context.Background()
		warmUp(t, comms)
		errs := make([]error, 4)
		var wg sync.WaitGroup
		for _, r := range []int{0, 1, 3} {
			wg.Go(func() { errs[r] = comms[r].Barrier(ctx) })
		}
		synctest.Wait() // ranks 0, 1 and 3 wait in the barrier
		s.Fire(3)
		fired := time.Now()
		wg.Wait()
		assert.Less(t, time.Since(fired), time.Second, "ranks 0 and 1 fail at once")
		time.Sleep(time.Minute) // rank 2 computes
		begin := time.Now()
		errs[2] = comms[2].Barrier(ctx)
		assert.Less(t, time.Since(begin), time.Second, "rank 2's barrier fails at once")
		for _, r := range []int{0, 1, 2} {
			collectiveFailed(t, errs[r], 3)
			assert.ErrorIs(t, errs[r], io.EOF, "rank %d", r)
			assert.Contains(t, errs[r].Error(), "process ended", "rank %d", r)
		}
	})
}

// TestShutdownAfterFarewellNotSilence: rank 0 and rank 1 close (rank 0
// says farewell, and its Shutdown waits in rank 2's data link), while rank
// 2 computes for longer than the liveness timeout before it calls one more
// barrier. Rank 2's barrier fails naming rank 0 with what its Shutdown
// says, not for silence ("unresponsive").
func TestShutdownAfterFarewellNotSilence(t *testing.T) {
	testkit.SyncTest(t, func(t *testing.T) {
		comms := startFaulty(t, 3, 64<<10, time.Hour, time.Second, faulty.NewScript())
		defer testkit.CloseAll(comms)
		ctx := context.Background()
		warmUp(t, comms)
		var wg sync.WaitGroup
		for _, c := range comms[:2] {
			wg.Go(func() { _ = c.Close() })
		}
		time.Sleep(3 * time.Second) // rank 2 computes
		err := comms[2].Barrier(ctx)
		wg.Wait()
		collectiveFailed(t, err, 0)
		assert.NotContains(t, err.Error(), "unresponsive", "rank 0's Shutdown, not silence")
		t.Logf("rank 2: %v", err)
	})
}
