package star_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/star"
	"github.com/starcomm/starcomm/testkit"
	"github.com/starcomm/starcomm/transport/pipe"
)

// The tests in this file run inside synctest bubbles: time is fake, so the
// spec's timeouts cost nothing and every duration measured is exact, and
// synctest.Test fails if any goroutine is left when the bubble ends.

func withTimeout(d time.Duration) func(*star.Config) {
	return func(c *star.Config) { c.Timeout = d }
}

// inBubble starts size ranks inside the current bubble.
func inBubble(t *testing.T, size int, tweak func(*star.Config)) []comm.Communicator {
	t.Helper()
	comms, err := testkit.StartStar(context.Background(), testkit.NewPipeNetwork(), size, tweak)
	require.NoError(t, err)
	return comms
}

// collectiveFailed asserts err is a CollectiveFailedError with code 0
// naming rank, and returns it.
func collectiveFailed(t *testing.T, err error, rank int) *comm.CollectiveFailedError {
	t.Helper()
	var cf *comm.CollectiveFailedError
	require.ErrorAs(t, err, &cf)
	assert.Equal(t, 0, cf.Code)
	assert.Equal(t, rank, cf.Rank, "rank named: %v", err)
	return cf
}

// TestBarrierTimeout: one rank never calls barrier; with a 2 s timeout the
// others fail with CollectiveFailed naming it, after 2 s, not before.
func TestBarrierTimeout(t *testing.T) {
	for _, size := range []int{2, 4} {
		for _, idle := range []int{0, size - 1} {
			t.Run(fmt.Sprintf("ranks=%d/idle=%d", size, idle), func(t *testing.T) {
				testkit.SyncTest(t, func(t *testing.T) {
					const timeout = 2 * time.Second
					comms := inBubble(t, size, withTimeout(timeout))
					defer testkit.CloseAll(comms)
					begin := time.Now()
					errs := make([]error, size)
					took := make([]time.Duration, size)
					testkit.RunRanks(comms, func(c comm.Communicator) error {
						if c.Rank() != idle {
							errs[c.Rank()] = c.Barrier(context.Background())
							took[c.Rank()] = time.Since(begin)
						}
						return nil
					})
					for r := range size {
						if r == idle {
							continue
						}
						collectiveFailed(t, errs[r], idle)
						// Within [timeout, timeout + a worker's reply margin
						// (500 ms) + the deadline slack (at most 250 ms)].
						assert.GreaterOrEqual(t, took[r], timeout, "rank %d", r)
						assert.LessOrEqual(t, took[r], timeout+750*time.Millisecond, "rank %d", r)
						if r == 0 || idle == 0 {
							assert.ErrorIs(t, errs[r], os.ErrDeadlineExceeded, "rank %d", r)
						}
					}
				})
			})
		}
	}
}

// TestCrashDetectedAtOnce: a worker that vanishes mid-collective (its link
// closes) is reported on every surviving rank at once, not after the
// timeout, naming that rank; the communicator is then fail-stop.
func TestCrashDetectedAtOnce(t *testing.T) {
	for _, op := range []string{"allgatherv", "allreduce", "broadcast", "barrier"} {
		t.Run("op="+op, func(t *testing.T) {
			testkit.SyncTest(t, func(t *testing.T) {
				const size, victim = 4, 2
				comms := inBubble(t, size, withTimeout(60*time.Second))
				defer testkit.CloseAll(comms)
				run := func(c comm.Communicator) error {
					ctx := context.Background()
					switch op {
					case "allgatherv":
						return comm.Allgatherv(ctx, c, []float64{1}, make([]float64, size), []int{1, 1, 1, 1}, []int{0, 1, 2, 3})
					case "allreduce":
						return comm.Allreduce(ctx, c, []float64{1}, make([]float64, 1), comm.Sum)
					case "broadcast":
						return comm.Broadcast(ctx, c, make([]float64, 3), 0)
					}
					return c.Barrier(ctx)
				}
				begin := time.Now()
				errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
					if c.Rank() == victim {
						return c.Close() // the "crash": its link closes
					}
					return run(c)
				})
				took := time.Since(begin)
				for r, err := range errs {
					if r == victim {
						continue
					}
					if op == "broadcast" && r != 0 {
						// Workers get their broadcast whole before or
						// regardless of rank 2's crash; they learn of it at
						// the next collective.
						if err == nil {
							err = c0(comms[r])
						}
					}
					collectiveFailed(t, err, victim)
				}
				assert.Less(t, took, time.Second, "detection must not wait for the 60 s timeout")
				// Fail-stop: the next call fails at once, keeping the cause.
				later := comms[0].Barrier(context.Background())
				cf := collectiveFailed(t, later, victim)
				assert.Contains(t, cf.Message, "fail-stop")
			})
		})
	}
}

func c0(c comm.Communicator) error { return c.Barrier(context.Background()) }

// TestContextCancel: cancelling the coordinator's context while it waits
// fails its collective with context.Canceled and tells the workers.
func TestContextCancel(t *testing.T) {
	testkit.SyncTest(t, func(t *testing.T) {
		comms := inBubble(t, 4, withTimeout(60*time.Second))
		defer testkit.CloseAll(comms)
		ctx, cancel := context.WithCancel(context.Background())
		errs := make(chan error, 3)
		for r := range 3 { // rank 3 never arrives
			go func() {
				c := ctx
				if r != 0 {
					c = context.Background()
				}
				errs <- comms[r].Barrier(c)
			}()
		}
		synctest.Wait() // every rank is blocked in the barrier
		cancel()
		for range 3 {
			err := <-errs
			var cf *comm.CollectiveFailedError
			require.ErrorAs(t, err, &cf)
			assert.Equal(t, 0, cf.Rank)
			if errors.Is(err, context.Canceled) {
				continue // the coordinator's own error
			}
			assert.Contains(t, cf.Message, "context canceled")
		}
	})
}

// TestContextDoneBeforeStart: a collective called with a finished context
// fails locally, sends nothing and leaves the communicator usable.
func TestContextDoneBeforeStart(t *testing.T) {
	testkit.CheckGoroutines(t)
	comms, ts := tapped(t, 3, func(c *star.Config) { c.Liveness = -1 }) // no heartbeats
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r0, w0 := ts.totals()
	for _, c := range comms {
		err := c.Barrier(ctx)
		require.ErrorIs(t, err, context.Canceled)
	}
	r1, w1 := ts.totals()
	assert.Equal(t, [2]int{r0, w0}, [2]int{r1, w1})
	errs := testkit.RunRanks(comms, func(c comm.Communicator) error { return c.Barrier(context.Background()) })
	require.NoError(t, errors.Join(errs...))
}

// TestPeerCloseDuringCollective: a worker's Close from another goroutine
// while it waits in a barrier fails the barrier of the rank waiting with
// it (rank 2 never comes) at once, naming the worker, with
// comm.ErrPeerClosed (its own communicator is not closed: not
// comm.ErrInvalidCommunicator, which the closing rank's barrier gets).
func TestPeerCloseDuringCollective(t *testing.T) {
	testkit.SyncTest(t, func(t *testing.T) {
		comms := inBubble(t, 3, withTimeout(60*time.Second))
		defer testkit.CloseAll(comms)
		sessionsUp(t) // rank 1 says on its session that it closed
		done := make([]chan error, 2)
		for r := range done {
			done[r] = make(chan error, 1)
			go func() { done[r] <- comms[r].Barrier(context.Background()) }()
		}
		synctest.Wait()
		begin := time.Now()
		require.NoError(t, comms[1].Close())
		assert.ErrorIs(t, <-done[1], comm.ErrInvalidCommunicator)
		err := <-done[0]
		collectiveFailed(t, err, 1)
		assert.ErrorIs(t, err, comm.ErrPeerClosed)
		assert.NotErrorIs(t, err, comm.ErrInvalidCommunicator)
		assert.Less(t, time.Since(begin), time.Second)
	})
}

// TestCloseDuringCollective: Close unblocks a collective at once.
func TestCloseDuringCollective(t *testing.T) {
	testkit.SyncTest(t, func(t *testing.T) {
		comms := inBubble(t, 3, withTimeout(60*time.Second))
		defer testkit.CloseAll(comms)
		done := make(chan error, 1)
		go func() { done <- comms[0].Barrier(context.Background()) }()
		synctest.Wait()
		begin := time.Now()
		require.NoError(t, comms[0].Close())
		err := <-done
		assert.ErrorIs(t, err, comm.ErrInvalidCommunicator)
		assert.Less(t, time.Since(begin), time.Second)
	})
}

// TestUseAfterClose: every method returns ErrInvalidCommunicator after
// Close, and Close is idempotent.
func TestUseAfterClose(t *testing.T) {
	testkit.CheckGoroutines(t)
	for _, size := range []int{1, 3} {
		comms := start(t, size, nil)
		require.NoError(t, testkit.CloseAll(comms))
		ctx := context.Background()
		for _, c := range comms {
			assert.ErrorIs(t, c.Barrier(ctx), comm.ErrInvalidCommunicator)
			assert.ErrorIs(t, comm.Allreduce(ctx, c, []float64{1}, make([]float64, 1), comm.Sum), comm.ErrInvalidCommunicator)
			assert.ErrorIs(t, comm.Broadcast(ctx, c, []float64{1}, 0), comm.ErrInvalidCommunicator)
			assert.ErrorIs(t, comm.Allgatherv(ctx, c, []float64{1}, make([]float64, size), make([]int, size), make([]int, size)), comm.ErrInvalidCommunicator)
			assert.NoError(t, c.Close())
		}
	}
}

// TestGracefulShutdownIsPrompt: when every rank closes at once, Close
// returns without waiting for ShutdownTimeout.
func TestGracefulShutdownIsPrompt(t *testing.T) {
	testkit.SyncTest(t, func(t *testing.T) {
		comms := inBubble(t, 8, nil)
		begin := time.Now()
		require.NoError(t, testkit.CloseAll(comms))
		assert.Less(t, time.Since(begin), 100*time.Millisecond)
	})
}

// TestStartupTimeout: a coordinator whose workers do not all come fails
// with InitializationFailed naming the missing ranks.
func TestStartupTimeout(t *testing.T) {
	testkit.SyncTest(t, func(t *testing.T) {
		nw := pipe.NewNetwork()
		ln, err := nw.Listen("c")
		require.NoError(t, err)
		cfg := star.DefaultConfig()
		cfg.Rank, cfg.Size, cfg.Listener, cfg.ConnectTimeout = 0, 4, ln, 5*time.Second
		wcfg := star.DefaultConfig()
		wcfg.Rank, wcfg.Size, wcfg.Dialer, wcfg.Addr = 2, 4, nw, "c"
		worker := make(chan error, 1)
		go func() {
			w, err := star.New(context.Background(), wcfg)
			if err == nil {
				// Its coordinator gives up; it learns at its first collective.
				err = w.Barrier(context.Background())
				w.Close()
			}
			worker <- err
		}()
		begin := time.Now()
		_, err = star.New(context.Background(), cfg)
		var ife *comm.InitializationFailedError
		require.ErrorAs(t, err, &ife)
		assert.Contains(t, err.Error(), "missing ranks [1 3]")
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, 5*time.Second, time.Since(begin))
		require.Error(t, <-worker)
	})
}

// TestStartupTimeoutManyRanks: a coordinator of 40000 ranks that no
// worker joins names the missing ones in one short line.
func TestStartupTimeoutManyRanks(t *testing.T) {
	testkit.SyncTest(t, func(t *testing.T) {
		ln, err := pipe.NewNetwork().Listen("c")
		require.NoError(t, err)
		cfg := star.DefaultConfig()
		cfg.Rank, cfg.Size, cfg.Listener, cfg.ConnectTimeout = 0, 40000, ln, time.Second
		_, err = star.New(context.Background(), cfg)
		var ife *comm.InitializationFailedError
		require.ErrorAs(t, err, &ife)
		assert.Contains(t, err.Error(), "0 of 39999 workers registered within 1s; missing ranks [1-39999]")
		assert.Less(t, len(err.Error()), 300, err.Error())
	})
}

// TestStartupEndedByCaller: a start-up that the caller's context ends
// (cancelled, or a deadline before ConnectTimeout's) says how long it ran,
// not ConnectTimeout.
func TestStartupEndedByCaller(t *testing.T) {
	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want string
		is   error
	}{
		{"cancelled", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(4*time.Millisecond, cancel)
			return ctx, cancel
		}, "0 of 3 workers registered within 4ms, when the caller's context ended start-up; missing ranks [1 2 3]: context canceled", context.Canceled},
		{"deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 2*time.Second)
		}, "0 of 3 workers registered within 2s, when the caller's context ended start-up; missing ranks [1 2 3]: context deadline exceeded", context.DeadlineExceeded},
		{"connect-timeout", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), time.Hour)
		}, "0 of 3 workers registered within 30s; missing ranks [1 2 3]: context deadline exceeded", context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testkit.SyncTest(t, func(t *testing.T) {
				ln, err := pipe.NewNetwork().Listen("c")
				require.NoError(t, err)
				cfg := star.DefaultConfig()
				cfg.Rank, cfg.Size, cfg.Listener, cfg.ConnectTimeout = 0, 4, ln, 30*time.Second
				ctx, cancel := tc.ctx()
				defer cancel()
				_, err = star.New(ctx, cfg)
				var ife *comm.InitializationFailedError
				require.ErrorAs(t, err, &ife)
				assert.Contains(t, err.Error(), tc.want)
				assert.ErrorIs(t, err, tc.is)
			})
		})
	}
}

// TestStartupConnectTimeoutRealClock: on the real clock (where the
// start-up's own deadline is computed a moment before anything else), a
// start-up that ConnectTimeout ends names ConnectTimeout, not the caller.
func TestStartupConnectTimeoutRealClock(t *testing.T) {
	ln, err := pipe.NewNetwork().Listen("c")
	require.NoError(t, err)
	cfg := star.DefaultConfig()
	cfg.Rank, cfg.Size, cfg.Listener, cfg.ConnectTimeout = 0, 3, ln, 50*time.Millisecond
	_, err = star.New(context.Background(), cfg)
	var ife *comm.InitializationFailedError
	require.ErrorAs(t, err, &ife)
	assert.Contains(t, err.Error(), "0 of 2 workers registered within 50ms; missing ranks [1 2]")
	assert.NotContains(t, err.Error(), "caller's context")
	assert.ErrorIs(t, err, context.DeadlineExceeded)
}

// TestDialRefused: a worker with nobody listening fails with
// InitializationFailed keeping ECONNREFUSED.
func TestDialRefused(t *testing.T) {
	cfg := star.DefaultConfig()
	cfg.Rank, cfg.Size, cfg.Dialer, cfg.Addr = 1, 2, pipe.NewNetwork(), "nobody"
	_, err := star.New(context.Background(), cfg)
	var ife *comm.InitializationFailedError
	require.ErrorAs(t, err, &ife)
	assert.ErrorIs(t, err, syscall.ECONNREFUSED)
}

// TestConfigValidate names the offending field.
func TestConfigValidate(t *testing.T) {
	base := star.DefaultConfig()
	cases := map[string]func(*star.Config){
		"Size":     func(c *star.Config) { c.Size = 0 },
		"Rank":     func(c *star.Config) { c.Rank, c.Size = 3, 3 },
		"Timeout":  func(c *star.Config) { c.Size, c.Timeout = 1, -time.Second },
		"Listener": func(c *star.Config) { c.Size = 2 },
		"Dialer":   func(c *star.Config) { c.Rank, c.Size = 1, 2 },
		"Addr":     func(c *star.Config) { c.Rank, c.Size, c.Dialer = 1, 2, pipe.NewNetwork() },
	}
	for field, mutate := range cases {
		cfg := base
		mutate(&cfg)
		err := cfg.Validate()
		require.Error(t, err, field)
		assert.Contains(t, err.Error(), field)
		_, err = star.New(context.Background(), cfg)
		var ife *comm.InitializationFailedError
		assert.ErrorAs(t, err, &ife, field)
	}
}

// countingCtx is a cancellable context of its own (not built on the
// context package's, whose registrations bypass the method) that counts
// the AfterFunc registrations made with it and their removals.
type countingCtx struct {
	done        chan struct{}
	mu          sync.Mutex
	fs          map[int]func()
	next        int
	regs, stops atomic.Int64
}

func newCountingCtx() *countingCtx {
	return &countingCtx{done: make(chan struct{}), fs: map[int]func(){}}
}

func (c *countingCtx) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c *countingCtx) Done() <-chan struct{}       { return c.done }
func (c *countingCtx) Value(any) any               { return nil }
func (c *countingCtx) Err() error {
	select {
	case <-c.done:
		return context.Canceled
	default:
		return nil
	}
}

// AfterFunc is what context.AfterFunc calls.
func (c *countingCtx) AfterFunc(f func()) func() bool {
	c.regs.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	id := c.next
	c.next++
	c.fs[id] = f
	return func() bool {
		c.stops.Add(1)
		c.mu.Lock()
		defer c.mu.Unlock()
		_, ok := c.fs[id]
		delete(c.fs, id)
		return ok
	}
}

func (c *countingCtx) cancel() {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.done:
		return
	default:
	}
	close(c.done)
	for id, f := range c.fs {
		delete(c.fs, id)
		go f()
	}
}

// TestContextWatchKept: a context passed to every collective is registered
// for cancellation once, not once per collective; a collective under
// another context drops that registration, and cancelling the old context
// then leaves the new collective alone; Close drops the last one; a
// cancellation during a collective still fails it.
func TestContextWatchKept(t *testing.T) {
	testkit.SyncTest(t, func(t *testing.T) {
		comms := inBubble(t, 3, withTimeout(60*time.Second))
		defer testkit.CloseAll(comms)
		ctxA := newCountingCtx()
		defer ctxA.cancel()
		errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
			for range 50 {
				if err := c.Barrier(ctxA); err != nil {
					return err
				}
			}
			return nil
		})
		require.NoError(t, errors.Join(errs...))
		assert.EqualValues(t, 3, ctxA.regs.Load(), "one registration per rank for 50 barriers")
		assert.Zero(t, ctxA.stops.Load())

		// Rank 0 moves to context B and waits in a barrier the others
		// have not entered; cancelling A must leave it waiting.
		b, cancelB := context.WithCancel(context.Background())
		defer cancelB()
		done := make(chan error, 1)
		go func() { done <- comms[0].Barrier(b) }()
		synctest.Wait()
		assert.EqualValues(t, 1, ctxA.stops.Load(), "rank 0 dropped A for B")
		ctxA.cancel()
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("cancelling a context no longer in use ended rank 0's barrier: %v", err)
		default:
		}
		errs = testkit.RunRanks(comms[1:], func(c comm.Communicator) error { return c.Barrier(context.Background()) })
		require.NoError(t, errors.Join(errs...))
		require.NoError(t, <-done)
		// B still cancels the collective it watches.
		go func() { done <- comms[0].Barrier(b) }()
		synctest.Wait()
		cancelB()
		require.ErrorIs(t, <-done, context.Canceled)
	})
}

// TestContextWatchDroppedOnClose: Close removes the communicator's
// registration with a context that outlives it.
func TestContextWatchDroppedOnClose(t *testing.T) {
	testkit.SyncTest(t, func(t *testing.T) {
		comms := inBubble(t, 2, withTimeout(60*time.Second))
		ctx := newCountingCtx()
		defer ctx.cancel()
		errs := testkit.RunRanks(comms, func(c comm.Communicator) error { return c.Barrier(ctx) })
		require.NoError(t, errors.Join(errs...))
		require.EqualValues(t, 2, ctx.regs.Load())
		testkit.CloseAll(comms)
		assert.EqualValues(t, 2, ctx.stops.Load(), "each rank's Close removed its registration")
	})
}
