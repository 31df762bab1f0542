package star_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
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

// The end of a process, as the control session sees it: its system closes
// (or resets) the control connection, with no farewell before. On the fake
// clock, over pipes; faulty's whole-rank Crash closes every connection of
// a rank at once, as an exit does.

// startScripted starts size ranks in the current bubble with the control
// session on (liveness 10 s), a collective timeout of an hour, and s's
// faults, over unbuffered pipes.
func startScripted(t *testing.T, size int, s *faulty.Script) []comm.Communicator {
	t.Helper()
	return startFaulty(t, size, 0, time.Hour, 10*time.Second, s)
}

// startFaulty starts size ranks in the current bubble over pipes that
// buffer buffer bytes each way (0: none), with the given collective and
// liveness timeouts, s's faults, and more's settings.
func startFaulty(t *testing.T, size, buffer int, timeout, liveness time.Duration, s *faulty.Script, more ...func(*star.Config)) []comm.Communicator {
	t.Helper()
	nw := testkit.NewPipeNetwork()
	nw.Net.Buffer = buffer
	comms, err := testkit.StartStar(context.Background(), nw, size, func(c *star.Config) {
		c.Timeout, c.Liveness = timeout, liveness
		for _, f := range more {
			f(c)
		}
		if c.Listener != nil {
			c.Listener = s.WrapListener(c.Listener)
		}
		if c.Dialer != nil {
			c.Dialer = s.WrapDialer(c.Dialer, c.Rank)
		}
	})
	require.NoError(t, err)
	return comms
}

// warmUp runs a barrier on every rank, which must succeed, and waits for
// the bubble to settle: every control session is then up.
func warmUp(t *testing.T, comms []comm.Communicator) {
	t.Helper()
	for r, err := range testkit.RunRanks(comms, func(c comm.Communicator) error { return c.Barrier(context.Background()) }) {
		require.NoError(t, err, "warm-up, rank %d", r)
	}
	synctest.Wait()
}

// TestExitAfterContributing: rank 1's process ends after it has entered a
// barrier that still waits for rank 3, which computes for a minute. Rank 0
// is not reading rank 1's data link (it has its Ready), so only the
// control session can tell: every survivor fails within a second, naming
// rank 1, with a cause that matches io.EOF and says the process ended, and
// rank 3's barrier, when it comes, fails at once. Before the farewell
// existed this took the liveness timeout (10 s). The same for rank 0's
// end, which rank 3, out of any collective, learns from its control
// session alone.
func TestExitAfterContributing(t *testing.T) {
	for _, victim := range []int{1, 0} {
		t.Run(map[int]string{1: "worker", 0: "coordinator"}[victim], func(t *testing.T) {
			testkit.SyncTest(t, func(t *testing.T) {
				s := faulty.NewScript(faulty.Fault{Kind: faulty.Crash, Rank: victim, Link: -1, Manual: true, WholeRank: true})
				// Pipes that buffer, as sockets do: every Ready is written
				// before the bubble settles, whether rank 0 has read it yet
				// or not (unbuffered, a Ready rank 0 had not read yet
				// would be lost with the victim, and rank 0 would be
				// reading that link).
				comms := startFaulty(t, 4, 64<<10, time.Hour, 10*time.Second, s)
				defer testkit.CloseAll(comms)
				ctx := context.Background()
				warmUp(t, comms)

				errs := make([]error, 4)
				took := make([]time.Duration, 4)
				begin := time.Now()
				done := make(chan int, 4)
				for r := range 3 {
					go func() {
						errs[r] = comms[r].Barrier(ctx)
						took[r] = time.Since(begin)
						done <- r
					}()
				}
				synctest.Wait() // ranks 0, 1 and 2 wait in the barrier
				s.Fire(victim)  // the victim's process ends
				exited := time.Now()
				for range 2 {
					<-done
				}
				time.Sleep(time.Minute - time.Since(begin)) // rank 3 computes
				errs[3] = comms[3].Barrier(ctx)
				took[3] = time.Since(begin) - time.Minute
				<-done // the victim's own barrier ends too

				for r := range 4 {
					if r == victim {
						continue
					}
					collectiveFailed(t, errs[r], victim)
					assert.ErrorIs(t, errs[r], io.EOF, "rank %d", r)
					switch {
					case r == 3:
						assert.Less(t, took[3], time.Millisecond, "rank 3's barrier fails at once: %v", errs[3])
						assert.Contains(t, errs[r].Error(), "process ended", "rank %d", r)
					case victim == 0:
						// Workers in the barrier read their data links:
						// they see rank 0's end there, at once.
						assert.Less(t, took[r]-exited.Sub(begin), time.Millisecond, "rank %d: %v", r, errs[r])
					default:
						assert.Less(t, took[r]-exited.Sub(begin), time.Second, "rank %d: %v", r, errs[r])
						assert.Contains(t, errs[r].Error(), "process ended", "rank %d", r)
					}
				}
				// The rank that noticed it on its control session: rank 0,
				// or rank 3 (out of any collective) for rank 0's end.
				noticer := 0
				if victim == 0 {
					noticer = 3
				}
				var ex *star.ExitedError
				require.ErrorAs(t, errs[noticer], &ex, "rank %d noticed it itself", noticer)
				assert.Equal(t, victim, ex.Rank)
			})
		})
	}
}

// TestFarewellOnClose: rank 0 closes while rank 1 still computes (the
// ranks called different numbers of collectives). Rank 0 ends its control
// session with a farewell, so rank 1, calling a barrier 5 s later, learns
// what its data link says (over TCP rank 0's Shutdown, over unbuffered
// pipes a closed link), not that rank 0's process ended.
func TestFarewellOnClose(t *testing.T) {
	testkit.SyncTest(t, func(t *testing.T) {
		s := faulty.NewScript()
		comms := startScripted(t, 3, s)
		defer testkit.CloseAll(comms)
		ctx := context.Background()
		warmUp(t, comms)
		closed := make(chan struct{})
		go func() {
			defer close(closed)
			_ = comms[2].Close()
		}()
		_ = comms[0].Close() // rank 1 never takes its Shutdown: an error naming it
		<-closed
		time.Sleep(5 * time.Second)
		err := comms[1].Barrier(ctx)
		collectiveFailed(t, err, 0)
		var ex *star.ExitedError
		assert.False(t, errors.As(err, &ex), "rank 0 closed, its process did not end: %v", err)
		assert.NotContains(t, err.Error(), "process ended")
	})
}

// TestFarewellOnFailure: rank 1's barrier fails on its own (its context is
// cancelled) while rank 0 waits for rank 2, and its process exits the
// instant it sees the error (a whole-rank Crash). Rank 1 said farewell
// before its collective returned, so rank 0 does not take the exit for a
// crash: when rank 2 arrives, rank 0's write to rank 1 fails, and both
// name rank 1 from what the data links say.
func TestFarewellOnFailure(t *testing.T) {
	testkit.SyncTest(t, func(t *testing.T) {
		s := faulty.NewScript(faulty.Fault{Kind: faulty.Crash, Rank: 1, Link: -1, Manual: true, WholeRank: true})
		comms := startScripted(t, 3, s)
		defer testkit.CloseAll(comms)
		ctx := context.Background()
		warmUp(t, comms)
		errs := make([]error, 3)
		done := make(chan struct{})
		go func() {
			defer close(done)
			errs[0] = comms[0].Barrier(ctx)
		}()
		cctx, cancel := context.WithCancel(ctx)
		failed := make(chan struct{})
		go func() {
			defer close(failed)
			errs[1] = comms[1].Barrier(cctx)
			s.Fire(1) // exit the instant the collective fails
		}()
		synctest.Wait() // ranks 0 and 1 wait in the barrier
		cancel()
		<-failed
		require.ErrorIs(t, errs[1], context.Canceled)
		time.Sleep(5 * time.Second) // rank 2 computes
		errs[2] = comms[2].Barrier(ctx)
		<-done
		if errs[2] == nil {
			// Rank 0 had sent rank 2 its Go before its write to rank 1
			// failed: rank 2 learns in its next collective.
			errs[2] = comms[2].Barrier(ctx)
		}
		for _, r := range []int{0, 2} {
			collectiveFailed(t, errs[r], 1)
			assert.NotContains(t, errs[r].Error(), "process ended", "rank %d: rank 1 failed before it exited", r)
		}
	})
}

// TestExitAfterResult: rank 3 exits without Close (a whole-rank Crash) the
// moment its 1 MiB broadcast from rank 0 returns, while rank 1, which
// comes a second late, has yet to read it: over unbuffered pipes rank 0
// is still writing it to rank 1; over pipes that buffer it whole (as
// socket buffers do) rank 0 is done, and rank 1 has yet to read. Rank 3
// has its result: rank 0 does not cancel the broadcast for it, and rank 1
// is told only for its next collective, so ranks 0, 1 and 2 get the right
// bytes; their next collective fails at once, naming rank 3.
func TestExitAfterResult(t *testing.T) {
	for _, buffer := range []int{0, 2 << 20} {
		t.Run(fmt.Sprintf("buffer=%d", buffer), func(t *testing.T) {
			testExitAfterResult(t, buffer)
		})
	}
}

func testExitAfterResult(t *testing.T, buffer int) {
	testkit.SyncTest(t, func(t *testing.T) {
		s := faulty.NewScript(faulty.Fault{Kind: faulty.Crash, Rank: 3, Link: -1, Manual: true, WholeRank: true})
		comms := startFaulty(t, 4, buffer, time.Hour, 10*time.Second, s)
		defer testkit.CloseAll(comms)
		ctx := context.Background()
		warmUp(t, comms)
		const n = 1 << 20
		want := make([]byte, n)
		for i := range want {
			want[i] = byte(i * 7)
		}
		bufs := make([][]byte, 4)
		errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
			r := c.Rank()
			bufs[r] = make([]byte, n)
			if r == 0 {
				copy(bufs[0], want)
			}
			if r == 1 {
				time.Sleep(time.Second)
			}
			err := comm.Broadcast(ctx, c, bufs[r], 0)
			if r == 3 {
				s.Fire(3) // exit without Close
			}
			return err
		})
		for r := range 4 {
			require.NoError(t, errs[r], "rank %d's broadcast", r)
			assert.Equal(t, want, bufs[r], "rank %d's bytes", r)
		}
		begin := time.Now()
		errs = testkit.RunRanks(comms[:3], func(c comm.Communicator) error { return c.Barrier(ctx) })
		for r := range 3 {
			collectiveFailed(t, errs[r], 3)
			assert.ErrorIs(t, errs[r], io.EOF, "rank %d", r)
			assert.Contains(t, errs[r].Error(), "process ended", "rank %d", r)
		}
		// At once: the collective timeout is an hour (the Aborts' bounded
		// wait over unbuffered pipes aside).
		assert.Less(t, time.Since(begin), time.Second)
	})
}

// TestFarewellNotWaitedOnTimeout: a worker whose barrier times out on rank
// 0 (alive, but not calling it), while rank 0's end of its control
// connection takes nothing (faulty's Hang), fails at its timeout plus its
// margin over rank 0's, without waiting for a farewell that cannot go out.
func TestFarewellNotWaitedOnTimeout(t *testing.T) {
	testkit.SyncTest(t, func(t *testing.T) {
		const timeout = 2 * time.Second
		s := faulty.NewScript(faulty.Fault{Kind: faulty.Hang, Rank: 0, Link: 1, Control: true, Manual: true})
		comms := startFaulty(t, 3, 0, timeout, time.Hour, s)
		defer testkit.CloseAll(comms)
		ctx := context.Background()
		warmUp(t, comms)
		s.Fire(0)
		begin := time.Now()
		err := comms[1].Barrier(ctx)
		took := time.Since(begin)
		collectiveFailed(t, err, 0)
		assert.ErrorIs(t, err, os.ErrDeadlineExceeded)
		// The worker's deadline: the timeout, its margin over rank 0's,
		// and up to a re-arm interval (timeout/20) plus the poll's step
		// late; waiting for the farewell would add 200 ms.
		margin := min(timeout/2, 500*time.Millisecond)
		assert.GreaterOrEqual(t, took, timeout+margin)
		assert.LessOrEqual(t, took, timeout+margin+150*time.Millisecond, "no wait for the farewell: %v", err)
	})
}

// TestControlResetBlamesTheWorker: worker 2's control connection is reset
// on its side (a firewall, ss -K) while rank 0's reader of that session is
// held back (a test hook), so that rank 0 hears nothing of it. Worker 2
// takes it for rank 0's end and fails its next collective naming rank 0,
// "reset"; rank 0, whose process plainly runs to read that Abort, names
// worker 2, as every other rank does.
func TestControlResetBlamesTheWorker(t *testing.T) {
	var armed atomic.Bool
	var held, release chan struct{} // made in the bubble, before armed is set
	var once sync.Once
	defer star.SetTestHook(func(rank int, point string) {
		// Rank 0's reader of worker 2's heartbeats calls the hook with
		// rank 2 (the peer) before each read.
		if point == star.HookHeartbeat && rank == 2 && armed.Load() {
			once.Do(func() { close(held) })
			<-release
		}
	})()
	testkit.SyncTest(t, func(t *testing.T) {
		s := faulty.NewScript(faulty.Fault{Kind: faulty.Reset, Rank: 2, Link: -1, Control: true, Manual: true})
		comms := startScripted(t, 4, s)
		defer testkit.CloseAll(comms)
		held, release = make(chan struct{}), make(chan struct{})
		defer close(release)
		ctx := context.Background()
		warmUp(t, comms)
		armed.Store(true)
		<-held // the next heartbeat came: rank 0's reader of rank 2 waits
		s.Fire(2)
		time.Sleep(time.Second)
		errs := testkit.RunRanks(comms, func(c comm.Communicator) error { return c.Barrier(ctx) })
		collectiveFailed(t, errs[2], 0)
		assert.Contains(t, errs[2].Error(), "control connection was reset")
		var ex *star.ExitedError
		require.ErrorAs(t, errs[2], &ex)
		assert.ErrorIs(t, errs[2], io.EOF)
		for _, r := range []int{0, 1, 3} {
			collectiveFailed(t, errs[r], 2)
		}
		assert.Contains(t, errs[0].Error(), "rank 2 lost its control connection to rank 0")
	})
}

// TestFarewellWhenSessionComesLate: worker 2's control session comes up
// only after its first collective failed (its Control frame is held 5 s),
// so the failure could not say farewell on it; the session says it once
// up. The process then exits without Close: rank 0 does not take that for
// a crash; its next collective finds worker 2's link closed.
func TestFarewellWhenSessionComesLate(t *testing.T) {
	testkit.SyncTest(t, func(t *testing.T) {
		s := faulty.NewScript(
			faulty.Fault{Kind: faulty.Delay, Rank: 2, Link: -1, Control: true, Dir: faulty.Write, Frame: 0, Delay: 5 * time.Second},
			faulty.Fault{Kind: faulty.Crash, Rank: 2, Link: -1, Manual: true, WholeRank: true},
		)
		comms := startFaulty(t, 3, 0, 2*time.Second, time.Hour, s)
		defer testkit.CloseAll(comms)
		ctx := context.Background()
		// Rank 0 calls nothing yet: worker 2's barrier times out.
		err := comms[2].Barrier(ctx)
		collectiveFailed(t, err, 0)
		time.Sleep(6 * time.Second) // the session comes up at 5 s
		s.Fire(2)                   // exit without Close
		time.Sleep(time.Second)
		err = comms[0].Barrier(ctx)
		collectiveFailed(t, err, 2)
		assert.NotContains(t, err.Error(), "process ended", "worker 2 said farewell")
	})
}

// TestLaterAbortConcernsEarlier: rank 3 exits without Close once it has
// its 1 MiB broadcast (#2) from rank 0, so the others are told for the
// collectives after #2; then rank 0's own #2 fails (its context is
// cancelled while it still writes to rank 2, which calls the broadcast
// 10 s late), which concerns #2 itself. That later Abort takes the
// earlier one's place: rank 2's broadcast and rank 1's next barrier fail
// naming rank 0, as rank 0's does, not rank 3.
func TestLaterAbortConcernsEarlier(t *testing.T) {
	testkit.SyncTest(t, func(t *testing.T) {
		s := faulty.NewScript(faulty.Fault{Kind: faulty.Crash, Rank: 3, Link: -1, Manual: true, WholeRank: true})
		comms := startFaulty(t, 4, 0, time.Hour, 10*time.Second, s)
		defer testkit.CloseAll(comms)
		ctx := context.Background()
		warmUp(t, comms)
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		time.AfterFunc(time.Second, cancel)
		errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
			buf := make([]byte, 1<<20)
			switch c.Rank() {
			case 0:
				return comm.Broadcast(cctx, c, buf, 0)
			case 2:
				time.Sleep(10 * time.Second)
			}
			err := comm.Broadcast(ctx, c, buf, 0)
			if c.Rank() == 3 {
				s.Fire(3) // exit without Close
			} else if c.Rank() == 1 && err == nil {
				time.Sleep(5 * time.Second) // computes: it hears both Aborts first
				err = c.Barrier(ctx)
			}
			return err
		})
		require.NoError(t, errs[3])
		for r := range 3 {
			collectiveFailed(t, errs[r], 0)
		}
		assert.ErrorIs(t, errs[0], context.Canceled)
	})
}

// TestCloseAfterIOSparesResults: rank 0's Close (from another goroutine)
// lands once its 1 MiB broadcast's I/O is over, before the broadcast
// settles: rank 0's broadcast fails (closed), but the workers have their
// result in full, over pipes that buffer it as sockets do: rank 1, which
// reads it a second late, gets it whole, and fails its next collective.
func TestCloseAfterIOSparesResults(t *testing.T) {
	var armed atomic.Bool
	var closing chan struct{} // made in the bubble, before armed is set
	var comms []comm.Communicator
	var once sync.Once
	defer star.SetTestHook(func(rank int, point string) {
		if rank != 0 || !armed.Load() {
			return
		}
		switch point {
		case star.HookEnd:
			once.Do(func() {
				go func() { _ = comms[0].Close() }()
				<-closing
			})
		case star.HookClosing:
			close(closing)
		}
	})()
	testkit.SyncTest(t, func(t *testing.T) {
		comms = startFaulty(t, 4, 2<<20, time.Hour, 10*time.Second, faulty.NewScript())
		defer testkit.CloseAll(comms)
		ctx := context.Background()
		warmUp(t, comms)
		closing = make(chan struct{})
		armed.Store(true)
		want := make([]byte, 1<<20)
		for i := range want {
			want[i] = byte(i * 13)
		}
		bufs := make([][]byte, 4)
		errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
			r := c.Rank()
			bufs[r] = make([]byte, len(want))
			if r == 0 {
				copy(bufs[0], want)
			}
			if r == 1 {
				time.Sleep(time.Second)
			}
			return comm.Broadcast(ctx, c, bufs[r], 0)
		})
		assert.ErrorIs(t, errs[0], comm.ErrInvalidCommunicator)
		for r := 1; r < 4; r++ {
			require.NoError(t, errs[r], "rank %d", r)
			assert.Equal(t, want, bufs[r], "rank %d's bytes", r)
		}
		err := comms[1].Barrier(ctx)
		collectiveFailed(t, err, 0)
	})
}

// TestWorkerToldWhyThenExited: worker 1's context is cancelled while its
// Ready is stuck on its data link (a slow link: rank 0 is still reading it
// for that Ready). The worker says why on its control session, and its
// process ends the instant its barrier returns, before its data link's
// Abort could go out. Rank 0, whose reads of that control session are held
// up a little, reads the data link's end first: it must still name the
// worker's own cause (its context), as when the message comes first, not
// report a peer that closed its connection.
func TestWorkerToldWhyThenExited(t *testing.T) {
	testkit.SyncTest(t, func(t *testing.T) {
		s := faulty.NewScript(
			// Worker 1's writes on its data link wait from its test
			// barrier's Ready (frame 2: the handshake, the warm-up's Ready,
			// then this one) on, its Abort too.
			faulty.Fault{Kind: faulty.Delay, Rank: 1, Link: 0, Dir: faulty.Write, Frame: 2, Delay: time.Hour},
			faulty.Fault{Kind: faulty.Crash, Rank: 1, Link: -1, Manual: true, WholeRank: true},
			faulty.Fault{Kind: faulty.Delay, Rank: 0, Link: 1, Control: true, Dir: faulty.Read, Manual: true, Delay: 50 * time.Millisecond},
		)
		comms := startFaulty(t, 3, 64<<10, time.Hour, 10*time.Second, s)
		defer testkit.CloseAll(comms)
		warmUp(t, comms)

		errs := make([]error, 3)
		ended := make([]time.Time, 3)
		var wg sync.WaitGroup
		for r := range 3 {
			if r == 1 {
				continue
			}
			wg.Go(func() {
				errs[r] = comms[r].Barrier(context.Background())
				ended[r] = time.Now()
			})
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			synctest.Wait() // every rank in the barrier, worker 1 writing its Ready
			s.Fire(0)       // rank 0's reads of worker 1's control session lag
			cancel()
		}()
		errs[1] = comms[1].Barrier(ctx)
		s.Fire(1) // the process ends at once
		exited := time.Now()
		wg.Wait()

		// Rank 0 waited for the worker's message, not longer.
		assert.LessOrEqual(t, ended[0].Sub(exited), 50*time.Millisecond, "rank 0 failed %v after the exit", ended[0].Sub(exited))

		assert.ErrorIs(t, errs[1], context.Canceled)
		for _, r := range []int{0, 2} {
			cf := collectiveFailed(t, errs[r], 1)
			assert.Contains(t, cf.Message, "context", "rank %d names worker 1's own cause", r)
			assert.NotContains(t, cf.Message, "closed by the peer", "rank %d", r)
		}
		assert.Equal(t, 3, s.Fired())
	})
}
