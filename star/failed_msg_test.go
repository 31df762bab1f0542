package star_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/star"
	"github.com/starcomm/starcomm/testkit"
	"github.com/starcomm/starcomm/transport"
	"github.com/starcomm/starcomm/transport/faulty"
)

// TestWorkerFailsAfterItsPart: rank 1 sends its part of a collective, then
// fails it on its own while it waits for the result (its context ends, or
// another goroutine closes it), 1 s in, while rank 2 computes for a
// minute. Rank 0 has read rank 1's part already, so rank 1's Abort on its
// data link would be read only with its next frame: the collective would
// wait for rank 2 and succeed on ranks 0 and 2, and a rank 1 that exits
// at once would be named only at the liveness timeout, as unresponsive.
// Told on the control session, rank 0 fails at once naming rank 1, and
// rank 2 fails naming it as soon as it calls. On the fake clock, with a
// collective timeout of an hour and liveness 10 s, for a barrier, an
// allreduce and a relayed allgatherv (4 MiB per rank).
func TestWorkerFailsAfterItsPart(t *testing.T) {
	const (
		at   = time.Second
		late = time.Minute
		n    = 512 << 10 // float64s of the allgatherv: 4 MiB per rank
	)
	ops := map[string]func(ctx context.Context, c comm.Communicator) error{
		"barrier": func(ctx context.Context, c comm.Communicator) error { return c.Barrier(ctx) },
		"allreduce": func(ctx context.Context, c comm.Communicator) error {
			return comm.Allreduce(ctx, c, []float64{1, 2}, make([]float64, 2), comm.Sum)
		},
		"allgatherv": func(ctx context.Context, c comm.Communicator) error {
			return comm.Allgatherv(ctx, c, make([]float64, n), make([]float64, 3*n), []int{n, n, n}, []int{0, n, 2 * n})
		},
	}
	for _, how := range []string{"context", "close", "context-exit", "close-exit"} {
		for name, op := range ops {
			t.Run(fmt.Sprintf("%s/%s", how, name), func(t *testing.T) {
				testkit.SyncTest(t, func(t *testing.T) {
					s := faulty.NewScript(faulty.Fault{Kind: faulty.Crash, Rank: 1, Manual: true, WholeRank: true})
					comms := inBubble(t, 3, func(c *star.Config) {
						c.Timeout, c.Liveness, c.ShutdownTimeout = time.Hour, 10*time.Second, 5*time.Second
						if c.Listener != nil {
							c.Listener = s.WrapListener(c.Listener)
						}
						if c.Dialer != nil {
							c.Dialer = s.WrapDialer(c.Dialer, c.Rank)
						}
					})
					defer testkit.CloseAll(comms)
					sessionsUp(t) // the control sessions are up
					exit := how == "context-exit" || how == "close-exit"
					begin := time.Now()
					took := make([]time.Duration, 3)
					errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
						ctx := context.Background()
						switch c.Rank() {
						case 1:
							if how == "context" || how == "context-exit" {
								var cancel context.CancelFunc
								ctx, cancel = context.WithTimeout(ctx, at)
								defer cancel()
							} else {
								stop := time.AfterFunc(at, func() { _ = c.Close() })
								defer stop.Stop()
							}
						case 2:
							time.Sleep(late) // computing
						}
						err := op(ctx, c)
						took[c.Rank()] = time.Since(begin)
						if c.Rank() == 1 && exit {
							s.Fire(0) // its process exits the instant it sees the error
						}
						return err
					})
					collectiveFailed(t, errs[1], 1)
					assert.Equal(t, at, took[1].Round(time.Millisecond), "rank 1 fails on its own")
					cf := collectiveFailed(t, errs[0], 1)
					assert.Less(t, took[0], at+500*time.Millisecond, "rank 0 learns at once: %v", errs[0])
					assert.NotContains(t, cf.Error(), "unresponsive")
					if how == "context" || how == "context-exit" {
						assert.ErrorIs(t, errs[0], context.DeadlineExceeded, "the cause travels")
					} else {
						assert.Contains(t, cf.Error(), "closed", "the cause travels")
					}
					collectiveFailed(t, errs[2], 1)
					assert.Less(t, took[2], late+500*time.Millisecond, "rank 2 fails as it calls: %v", errs[2])
					// The communicators are fail-stop, naming rank 1.
					for _, r := range []int{0, 2} {
						collectiveFailed(t, comms[r].Barrier(context.Background()), 1)
					}
				})
			})
		}
	}
}

// checkAtRank0 starts 3 ranks in the current bubble, the desync check on
// at rank 0 only, timeout 1 minute, and waits for their control sessions.
func checkAtRank0(t *testing.T) []comm.Communicator {
	t.Helper()
	comms := inBubble(t, 3, func(c *star.Config) {
		c.Timeout, c.Liveness = time.Minute, 10*time.Second
		c.CheckCollectives = c.Rank == 0
	})
	sessionsUp(t) // the control sessions are up
	return comms
}

// TestFingerprintWaitTimesOut: with the desync check on at rank 0 only
// (COBRE_DEBUG differs between the ranks), rank 0 waits the collective
// timeout for a fingerprint that never comes, and fails naming the rank it
// waited for, as a timeout; the workers learn it from rank 0. On the fake
// clock, timeout 1 minute.
func TestFingerprintWaitTimesOut(t *testing.T) {
	testkit.SyncTest(t, func(t *testing.T) {
		comms := checkAtRank0(t)
		defer testkit.CloseAll(comms)
		begin := time.Now()
		took := make([]time.Duration, 3)
		errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
			err := c.Barrier(context.Background())
			took[c.Rank()] = time.Since(begin)
			return err
		})
		cf := collectiveFailed(t, errs[0], 1)
		assert.Contains(t, cf.Error(), "no fingerprint of collective #1 from rank 1 within the 1m0s timeout")
		assert.ErrorIs(t, errs[0], os.ErrDeadlineExceeded)
		assert.GreaterOrEqual(t, took[0], time.Minute)
		assert.Less(t, took[0], time.Minute+time.Millisecond) // a timer's tick late at most
		for _, r := range []int{1, 2} {
			collectiveFailed(t, errs[r], 1)
		}
	})
}

// TestFingerprintWaitInterrupted: rank 0 waiting for a fingerprint that
// does not come (as above) stops waiting at once when its context ends or
// another goroutine closes it, 1 s in. On the fake clock, timeout 1 minute.
func TestFingerprintWaitInterrupted(t *testing.T) {
	for _, how := range []string{"context", "close"} {
		t.Run(how, func(t *testing.T) {
			testkit.SyncTest(t, func(t *testing.T) {
				comms := checkAtRank0(t)
				defer testkit.CloseAll(comms)
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				if how == "close" {
					ctx = context.Background()
					stop := time.AfterFunc(time.Second, func() { _ = comms[0].Close() })
					defer stop.Stop()
				}
				begin := time.Now()
				err := comms[0].Barrier(ctx)
				// At once, then at most 200 ms for its Aborts to be taken (the
				// idle workers read none: a pipe takes nothing unread).
				took := time.Since(begin)
				assert.GreaterOrEqual(t, took, time.Second)
				assert.LessOrEqual(t, took, 1200*time.Millisecond, "rank 0 stops waiting at once: %v", err)
				collectiveFailed(t, err, 0)
				if how == "close" {
					assert.ErrorIs(t, err, comm.ErrInvalidCommunicator)
				} else {
					assert.ErrorIs(t, err, context.DeadlineExceeded)
				}
			})
		})
	}
}

// TestDesyncCheckDoesNotWaitForSession: with the desync check on, a
// worker whose control session is still opening (here its dial hangs for
// the whole HandshakeTimeout, 10 s, as when rank 0 is gone and the dialer
// retries) does not hold its collective until the opening is over: rank 1
// fails the first barrier on its own, rank 0 fails it at once, and rank
// 2, with no session to hear it, reads rank 0's Abort on its data link at
// once. Its fingerprint waits for the session instead. It used to wait
// the 10 s first. On the fake clock.
func TestDesyncCheckDoesNotWaitForSession(t *testing.T) {
	testkit.SyncTest(t, func(t *testing.T) {
		comms := inBubble(t, 3, func(c *star.Config) {
			c.Timeout, c.Liveness, c.CheckCollectives = time.Minute, 10*time.Second, true
			if c.Rank == 2 {
				dials := 0
				inner := c.Dialer
				c.Dialer = transport.DialerFunc(func(ctx context.Context, addr string) (transport.Conn, error) {
					if dials++; dials == 1 {
						return inner.Dial(ctx, addr) // the data link
					}
					<-ctx.Done() // the control session's: hangs
					return nil, ctx.Err()
				})
			}
		})
		defer testkit.CloseAll(comms)
		synctest.Wait() // rank 1's control session is up
		begin := time.Now()
		took := make([]time.Duration, 3)
		errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
			ctx := context.Background()
			if c.Rank() == 1 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, 100*time.Millisecond)
				defer cancel()
			}
			err := c.Barrier(ctx)
			took[c.Rank()] = time.Since(begin)
			return err
		})
		for r := range 3 {
			collectiveFailed(t, errs[r], 1)
		}
		assert.Less(t, took[0], 500*time.Millisecond, "rank 0: %v", errs[0])
		assert.Less(t, took[2], 500*time.Millisecond, "rank 2 reads rank 0's Abort at once: %v", errs[2])
	})
}

// TestWorkerFailsWhileRank0Computes: rank 1 gives up on an allreduce (its
// context, 1 s in) while rank 0 still computes after the barrier before
// it. Rank 0, between collectives, tells rank 2 at once, and names the
// allreduce, not the barrier it ran last; rank 0's own allreduce fails as
// it calls it. On the fake clock.
func TestWorkerFailsWhileRank0Computes(t *testing.T) {
	testkit.SyncTest(t, func(t *testing.T) {
		comms := inBubble(t, 3, func(c *star.Config) {
			c.Timeout, c.Liveness = time.Hour, 10*time.Second
		})
		defer testkit.CloseAll(comms)
		sessionsUp(t) // the control sessions are up
		took := make([]time.Duration, 3)
		errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
			if err := c.Barrier(context.Background()); err != nil {
				return err
			}
			begin := time.Now()
			ctx := context.Background()
			switch c.Rank() {
			case 0:
				time.Sleep(time.Minute) // computing
			case 1:
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, time.Second)
				defer cancel()
			}
			err := comm.Allreduce(ctx, c, []int64{1}, make([]int64, 1), comm.Sum)
			took[c.Rank()] = time.Since(begin)
			return err
		})
		for r := range 3 {
			collectiveFailed(t, errs[r], 1)
		}
		assert.Equal(t, time.Minute, took[0].Truncate(time.Millisecond), "rank 0 fails as it calls: %v", errs[0])
		assert.Less(t, took[2], time.Second+500*time.Millisecond, "rank 2 learns at once: %v", errs[2])
		assert.Contains(t, errs[2].Error(), "rank 1 failed during allreduce (seen by rank 0)")
		assert.NotContains(t, errs[2].Error(), "barrier")
	})
}
