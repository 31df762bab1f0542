package star_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/star"
	"github.com/starcomm/starcomm/testkit"
	"github.com/starcomm/starcomm/transport/faulty"
)

// Close after a failure that no collective has seen: the control session's
// verdicts reach a Close as they reach a collective. On the fake clock,
// over pipes that buffer as sockets do, with a collective timeout of a
// minute and a liveness timeout of 2 s.

const (
	closeTimeout  = time.Minute
	closeLiveness = 2 * time.Second
)

// closeTimed closes comms[r] for every r in ranks at once and returns each
// Close's error and how long it took.
func closeTimed(comms []comm.Communicator, ranks ...int) (errs []error, took []time.Duration) {
	errs, took = make([]error, len(comms)), make([]time.Duration, len(comms))
	done := make(chan struct{}, len(ranks))
	begin := time.Now()
	for _, r := range ranks {
		go func() {
			errs[r] = comms[r].Close()
			took[r] = time.Since(begin)
			done <- struct{}{}
		}()
	}
	for range ranks {
		<-done
	}
	return errs, took
}

// closeFailed checks that err is Close's *comm.CollectiveFailedError
// naming rank.
func closeFailed(t *testing.T, err error, rank int) *comm.CollectiveFailedError {
	t.Helper()
	var cf *comm.CollectiveFailedError
	require.ErrorAs(t, err, &cf)
	assert.Equal(t, star.OpClose, cf.Operation, "%v", err)
	assert.Equal(t, rank, cf.Rank, "rank named: %v", err)
	return cf
}

// TestWorkerCloseRankZeroFrozen: rank 0's process freezes (every end of it
// stops, as under SIGSTOP) while the job is idle, and the workers call
// Close, which waits for rank 0's Shutdown. The liveness timeout ends that
// wait, as it ends a collective's: each Close returns within it (plus a
// heartbeat's slack) an error naming rank 0 as unresponsive, not after the
// collective timeout (a minute, when each said "no Shutdown from rank 0
// within the 1m0s timeout"). The same when the verdict came before Close
// (a worker idle for twice the liveness timeout): Close returns it at once.
func TestWorkerCloseRankZeroFrozen(t *testing.T) {
	for _, idle := range []time.Duration{0, 2 * closeLiveness} {
		t.Run(fmt.Sprintf("idle=%v", idle), func(t *testing.T) {
			testkit.SyncTest(t, func(t *testing.T) {
				s := faulty.NewScript(faulty.Fault{Kind: faulty.Hang, Rank: 0, Link: -1, Manual: true, WholeRank: true})
				comms := startFaulty(t, 3, 1<<20, closeTimeout, closeLiveness, s)
				defer testkit.CloseAll(comms)
				warmUp(t, comms)
				s.Fire(0)
				time.Sleep(idle)
				errs, took := closeTimed(comms, 1, 2)
				for _, r := range []int{1, 2} {
					cf := closeFailed(t, errs[r], 0)
					var ur *star.UnresponsiveError
					require.ErrorAs(t, cf, &ur, "rank %d", r)
					assert.Equal(t, 0, ur.Rank)
					assert.ErrorIs(t, cf, os.ErrDeadlineExceeded)
					assert.Contains(t, cf.Error(), "rank 0 unresponsive", "rank %d", r)
					if idle == 0 {
						assert.LessOrEqual(t, took[r], closeLiveness+closeLiveness/5, "rank %d: %v", r, cf)
						assert.GreaterOrEqual(t, took[r], closeLiveness-closeLiveness/5, "rank %d", r)
					} else {
						assert.Zero(t, took[r], "rank %d: the verdict was in before Close", r)
					}
				}
			})
		})
	}
}

// TestCloseAfterIdleFailure: worker 3 freezes while the job is idle; rank
// 0 finds it unresponsive through its control session and tells ranks 1
// and 2 on theirs, but no collective follows. Every healthy rank's Close
// then reports that failure, naming rank 3, at once: there is no graceful
// shutdown to try (rank 0's used to fail on a healthy worker that had
// closed meanwhile, and named it: "rank 1: Shutdown not delivered: broken
// pipe"). The same with rank 3 gone (its process ended) instead, and when
// only rank 0 closes while the workers, told already, are busy elsewhere.
func TestCloseAfterIdleFailure(t *testing.T) {
	for _, kind := range []faulty.Kind{faulty.Hang, faulty.Crash} {
		for _, workersToo := range []bool{true, false} {
			t.Run(fmt.Sprintf("%v/workers=%v", kind, workersToo), func(t *testing.T) {
				testkit.SyncTest(t, func(t *testing.T) {
					s := faulty.NewScript(faulty.Fault{Kind: kind, Rank: 3, Link: -1, Manual: true, WholeRank: true})
					comms := startFaulty(t, 4, 1<<20, closeTimeout, closeLiveness, s)
					defer testkit.CloseAll(comms)
					warmUp(t, comms)
					s.Fire(3)
					time.Sleep(2 * closeLiveness) // found and told while idle
					ranks := []int{0, 1, 2}
					if !workersToo {
						ranks = ranks[:1]
					}
					errs, took := closeTimed(comms, ranks...)
					for _, r := range ranks {
						cf := closeFailed(t, errs[r], 3)
						assert.Less(t, took[r], 300*time.Millisecond, "rank %d: %v", r, cf)
						if kind == faulty.Hang {
							assert.ErrorIs(t, cf, os.ErrDeadlineExceeded, "rank %d", r)
							assert.Contains(t, cf.Error(), "rank 3 unresponsive", "rank %d", r)
						} else {
							assert.Contains(t, cf.Error(), "rank 3's process ended", "rank %d", r)
						}
						var ab *star.AbortError
						assert.Equal(t, r != 0, errors.As(cf, &ab), "rank %d: told by rank 0: %v", r, cf)
					}
					if !workersToo {
						// The workers were told before: their Close says
						// so at once too.
						errs, took = closeTimed(comms, 1, 2)
						for _, r := range []int{1, 2} {
							closeFailed(t, errs[r], 3)
							assert.Zero(t, took[r], "rank %d", r)
						}
					}
					// And a collective after Close is refused as always.
					err := comms[0].Barrier(context.Background())
					require.ErrorIs(t, err, comm.ErrInvalidCommunicator)
				})
			})
		}
	}
}
