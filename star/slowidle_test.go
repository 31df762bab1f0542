package star_test

import (
	"context"
	"fmt"
	"runtime/debug"
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

// What a slow-link collective leaves behind. A slow phase (slowPhase) runs
// an allgatherv of 1.5 MiB per rank (relayed), checked, on a 4-rank star
// over pipes that buffer 8 MiB (on the fake clock, the faulty transport),
// while the link between rank 0 and rank 1 is slow in one of three ways
// (slowKinds: an Acked Delay of 1.5 timeouts, from the second MiB of a
// frame, or its second half MiB: the bytes keep moving, and the hosts
// acknowledge throughout):
//   - write: rank 0's write of the result to rank 1; link.slowWrite lets
//     it go on past its deadline;
//   - read: rank 1's read of the result; rank 1 reads on past its
//     deadline, and so does rank 0 in a barrier after the allgatherv (part
//     of the phase), its data still going out to rank 1 (link.moving on
//     both ends, in readFull, each setting rfix);
//   - relay: rank 1's write of its region; rank 0's relay reader reads on
//     past its deadline (link.moving in relayRead).
//
// Each phase ends with the collective in which the link was slow, as one
// phase of them all would not: the reads of a later collective of the
// phase would clear what an earlier one left. Then the tests below run
// another collective, with or without an idle time first, and look at how
// its deadlines behave.

const (
	sT = 10 * time.Second // the collective timeout of these tests
	sN = 192 << 10        // float64 per rank of the slow allgatherv: 1.5 MiB, relayed
	// sSlack is deadlineSlack(sT); sMargin is replyMargin(sT).
	sSlack  = 250 * time.Millisecond
	sMargin = 500 * time.Millisecond
)

// slowKind is one way the link between rank 0 and rank 1 is slow in a slow
// phase (see above).
type slowKind struct {
	name  string
	fault faulty.Fault
	// barrier: the phase runs a barrier after the allgatherv.
	barrier bool
	// fired checks that the phase's slow-link paths fired.
	fired func(t *testing.T, got slowCounts)
}

var slowKinds = []slowKind{
	{"write", faulty.Fault{Kind: faulty.Delay, Rank: 0, Link: 1, Dir: faulty.Write, Frame: 1, Offset: 1 << 20, Delay: 3 * sT / 2, Acked: true}, false,
		func(t *testing.T, got slowCounts) {
			require.Positive(t, got.slowWrite, "slow phase: rank 0's write to rank 1 went on past its deadline (link.slowWrite): %+v", got)
		}},
	{"read", faulty.Fault{Kind: faulty.Delay, Rank: 1, Link: 0, Dir: faulty.Read, Frame: 1, Offset: 1 << 20, Delay: 3 * sT / 2, Acked: true}, true,
		func(t *testing.T, got slowCounts) {
			require.Positive(t, got.movingW, "slow phase: rank 1 read on past its deadline (link.moving, readFull): %+v", got)
			require.Positive(t, got.moving0, "slow phase: rank 0 read on past its deadline in the barrier (link.moving, readFull): %+v", got)
		}},
	{"relay", faulty.Fault{Kind: faulty.Delay, Rank: 1, Link: 0, Dir: faulty.Write, Frame: 1, Offset: 1 << 19, Delay: 3 * sT / 2, Acked: true}, false,
		func(t *testing.T, got slowCounts) {
			require.Positive(t, got.moving0, "slow phase: rank 0's relay reader read on past its deadline (link.moving, relayRead): %+v", got)
		}},
}

// slowCounts counts the slow-link hook points: link.slowWrite on rank 0's
// link to rank 1 and on a worker's link to rank 0, link.moving on rank
// 0's link to rank 1 and on a worker's link to rank 0, and a worker
// moving its deadlines on rank 0's word that it is busy (kind 6).
type slowCounts struct {
	slowWrite, slowWriteW, moving0, movingW, busy int64
}

// slowHooks records slowCounts (the hook's rank is the peer's: 1 on rank
// 0's link to rank 1, 0 on a worker's link).
type slowHooks struct {
	slowWrite, slowWriteW, moving0, movingW, busy atomic.Int64
}

func (h *slowHooks) hook(rank int, point string) {
	switch {
	case point == star.HookSlowWrite && rank == 1:
		h.slowWrite.Add(1)
	case point == star.HookSlowWrite && rank == 0:
		h.slowWriteW.Add(1)
	case point == star.HookMoving && rank == 1:
		h.moving0.Add(1)
	case point == star.HookMoving && rank == 0:
		h.movingW.Add(1)
	case point == star.HookBusy:
		h.busy.Add(1)
	}
}

// take returns the counts and sets them to zero.
func (h *slowHooks) take() slowCounts {
	return slowCounts{h.slowWrite.Swap(0), h.slowWriteW.Swap(0), h.moving0.Swap(0), h.movingW.Swap(0), h.busy.Swap(0)}
}

// checkedAllgatherv runs an allgatherv of n float64 per rank and checks
// its result.
func checkedAllgatherv(ctx context.Context, c comm.Communicator, n int) error {
	send := make([]float64, n)
	for i := range send {
		send[i] = float64(c.Rank()*n + i)
	}
	recv := make([]float64, 4*n)
	counts, displs := []int{n, n, n, n}, []int{0, n, 2 * n, 3 * n}
	if err := comm.Allgatherv(ctx, c, send, recv, counts, displs); err != nil {
		return fmt.Errorf("allgatherv: %w", err)
	}
	for i, v := range recv {
		if v != float64(i) {
			return fmt.Errorf("allgatherv: recv[%d] = %v, want %v", i, v, float64(i))
		}
	}
	return nil
}

// noSpin starts a watchdog, in real time (call it outside the bubble), that
// panics with every goroutine's stack when the test has not ended after
// 30 s: a read that spins on a passed deadline never blocks, so the fake
// clock stops and the test would hang instead of failing. It returns a
// function that stops the watchdog.
func noSpin(t *testing.T) (stop func()) {
	name := t.Name()
	w := time.AfterFunc(30*time.Second, func() {
		debug.SetTraceback("all")
		panic(name + ": no progress in 30 s of real time: a read or write spins on a passed deadline (see the goroutines in link.readFull, relayRead or pollReadAt)")
	})
	return func() { w.Stop() }
}

// slowPhase runs the slow phase of kind (see above) on every rank, which
// must complete it, its slow-link paths having fired.
func slowPhase(t *testing.T, comms []comm.Communicator, kind slowKind, h *slowHooks) {
	t.Helper()
	errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
		if err := checkedAllgatherv(context.Background(), c, sN); err != nil {
			return fmt.Errorf("slow phase: %w", err)
		}
		if kind.barrier {
			if err := c.Barrier(context.Background()); err != nil {
				return fmt.Errorf("slow phase: barrier: %w", err)
			}
		}
		return nil
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	kind.fired(t, h.take())
}

// nextOps are the collectives run after the slow phase: a barrier (polled),
// an allgatherv of 128 KiB per rank (stored and forwarded: readFull on
// rank 0's link goroutines), one of 1.5 MiB per rank (relayed: rank 0's
// relay reader and writer), and a broadcast of 2 MiB from rank 0 (readFull
// on the workers).
var nextOps = []closeOp{
	{"barrier", func(ctx context.Context, c comm.Communicator) error { return c.Barrier(ctx) }},
	{"allgatherv-stored", func(ctx context.Context, c comm.Communicator) error { return checkedAllgatherv(ctx, c, 16<<10) }},
	{"allgatherv-relayed", func(ctx context.Context, c comm.Communicator) error { return checkedAllgatherv(ctx, c, sN) }},
	{"broadcast", func(ctx context.Context, c comm.Communicator) error {
		buf := make([]float64, 256<<10)
		if c.Rank() == 0 {
			for i := range buf {
				buf[i] = float64(i)
			}
		}
		if err := comm.Broadcast(ctx, c, buf, 0); err != nil {
			return err
		}
		for i, v := range buf {
			if v != float64(i) {
				return fmt.Errorf("broadcast: buf[%d] = %v", i, v)
			}
		}
		return nil
	}},
}

// afterSlow is one run: the slow phase of kind, then every rank idles
// gap, then (with fire >= 0) the Manual faults of rank fire are fired,
// then each rank computes pause[rank] (nil: none) and runs next. run
// returns every rank's error in next and how long after the end of the
// idle time it returned, and the slow-link hook counts during next.
type afterSlow struct {
	kind  slowKind
	gap   time.Duration
	pause []time.Duration
	fire  int
	extra []faulty.Fault // Manual faults for fire
	// liveness is the control sessions' liveness timeout (0: sT).
	liveness time.Duration
	next     func(context.Context, comm.Communicator) error
}

func (a afterSlow) run(t *testing.T) (errs []error, took []time.Duration, after slowCounts) {
	t.Helper()
	var h slowHooks
	defer star.SetTestHook(h.hook)()
	s := faulty.NewScript(append([]faulty.Fault{a.kind.fault}, a.extra...)...)
	liveness := a.liveness
	if liveness == 0 {
		liveness = sT
	}
	comms := startFaulty(t, 4, 8<<20, sT, liveness, s)
	defer testkit.CloseAll(comms)
	sessionsUp(t) // every control session up
	slowPhase(t, comms, a.kind, &h)
	time.Sleep(a.gap)
	synctest.Wait()
	h.take() // what the idle time saw (kind 6 at the slow phase's edge) is not next's
	if a.fire >= 0 {
		s.Fire(a.fire)
	}
	begin := time.Now()
	took = make([]time.Duration, len(comms))
	errs = testkit.RunRanks(comms, func(c comm.Communicator) error {
		defer func() { took[c.Rank()] = time.Since(begin) }()
		if a.pause != nil {
			time.Sleep(a.pause[c.Rank()])
		}
		return a.next(context.Background(), c)
	})
	return errs, took, h.take()
}

// TestSlowLinkThenIdle: after a slow phase (link.slowWrite or link.moving
// fired on rank 0's or rank 1's end of their link), the job idles for two
// timeouts, and then a collective runs on every rank at once: it
// completes on every rank without waiting (on the fake clock, in no time
// at all), and no read or write of it goes on past a deadline or hears of
// rank 0 being busy. A stale rfix, rmoved or wmoved left by the slow phase
// would fail a read at once (a passed deadline, with nothing to show that
// the link moved since) or make the collective wait; a stale record of
// the link's movement would send kind 6.
func TestSlowLinkThenIdle(t *testing.T) {
	for _, kind := range slowKinds {
		for _, op := range nextOps {
			t.Run(fmt.Sprintf("slow=%s/%s", kind.name, op.name), func(t *testing.T) {
				defer noSpin(t)()
				testkit.SyncTest(t, func(t *testing.T) {
					errs, took, after := afterSlow{kind: kind, gap: 2 * sT, fire: -1, next: op.run}.run(t)
					for r, err := range errs {
						assert.NoError(t, err, "rank %d", r)
						assert.Less(t, took[r], sT/10, "rank %d waited in a collective that every rank began at once", r)
					}
					assert.Equal(t, slowCounts{}, after, "after the idle time nothing goes on past a deadline, and rank 0 is not busy")
				})
			})
		}
	}
}

// TestSlowLinkThenIdleCompute: as TestSlowLinkThenIdle, but one rank
// computes for 0.9 timeouts before it enters the collective: rank 1 (the
// slow link's end), rank 2 (another worker), or rank 0; after the two
// timeouts of idle time, or (gap=0s) at once after the slow phase. Every
// rank completes, the others having waited 0.9 timeouts for it. A
// deadline left over from the slow phase that is earlier than a timeout
// from the collective's start (rfix on either end of rank 1's link, or a
// moved deadline that lateAt counts from) would fail the late rank.
// After the idle time nothing goes on past a deadline.
func TestSlowLinkThenIdleCompute(t *testing.T) {
	for _, kind := range slowKinds {
		for _, gap := range []time.Duration{2 * sT, 0} {
			for _, late := range []int{1, 2, 0} {
				for _, op := range nextOps[:3] {
					t.Run(fmt.Sprintf("slow=%s/gap=%v/late=%d/%s", kind.name, gap, late, op.name), func(t *testing.T) {
						defer noSpin(t)()
						testkit.SyncTest(t, func(t *testing.T) {
							pause := make([]time.Duration, 4)
							pause[late] = 9 * sT / 10
							errs, took, after := afterSlow{kind: kind, gap: gap, pause: pause, fire: -1, next: op.run}.run(t)
							for r, err := range errs {
								assert.NoError(t, err, "rank %d", r)
								assert.GreaterOrEqual(t, took[r], 9*sT/10, "rank %d waited for rank %d", r, late)
								assert.Less(t, took[r], sT, "rank %d", r)
							}
							if gap > 0 {
								// (Kind 6 may go out: a tick of rank 0's busy monitor
								// can fall as the result goes out, 0.9 timeouts in.)
								after.busy = 0
								assert.Equal(t, slowCounts{}, after, "nothing went on past a deadline")
							}
						})
					})
				}
			}
		}
	}
}

// TestSlowLinkThenHang: after a slow phase, with no idle time or after
// two timeouts of it, a rank stops in the next collective, a barrier that
// every rank enters at once: rank 1, the slow link's end (its data conn
// hangs: it neither reads nor writes), or rank 0 (its whole process
// hangs). Every other rank fails naming it, a timeout after the barrier
// began, within the deadline slack (and, on a worker, rank 0's reply
// margin): not sooner (a stale rfix on rank 0's or rank 1's end of the
// slow link would fire first) and not later (a deadline moved past the
// slow phase's end, by link.moving or by kind 6, carried over). The
// control sessions' liveness timeout is six timeouts, so that only the
// collective timeout names a hung rank 0.
func TestSlowLinkThenHang(t *testing.T) {
	for _, kind := range slowKinds {
		for _, hung := range []int{1, 0} {
			for _, gap := range []time.Duration{0, 2 * sT} {
				t.Run(fmt.Sprintf("slow=%s/hung=%d/gap=%v", kind.name, hung, gap), func(t *testing.T) {
					defer noSpin(t)()
					testkit.SyncTest(t, func(t *testing.T) {
						hang := faulty.Fault{Kind: faulty.Hang, Rank: 1, Link: 0, Manual: true}
						if hung == 0 {
							hang = faulty.Fault{Kind: faulty.Hang, Rank: 0, Link: -1, Manual: true, WholeRank: true}
						}
						errs, took, _ := afterSlow{kind: kind, gap: gap, fire: hung, extra: []faulty.Fault{hang}, liveness: 6 * sT,
							next: func(ctx context.Context, c comm.Communicator) error { return c.Barrier(ctx) }}.run(t)
						t.Logf("took %v", took)
						for r, err := range errs {
							if r == hung {
								continue
							}
							collectiveFailed(t, err, hung)
							most := sT + sSlack + sMargin
							if r == 0 {
								most = sT + sSlack
							}
							assert.GreaterOrEqual(t, took[r], sT, "rank %d named rank %d before its timeout", r, hung)
							assert.LessOrEqual(t, took[r], most, "rank %d named rank %d late", r, hung)
						}
					})
				})
			}
		}
	}
}

// TestSlowLinkStopsTakingResult: rank 1 takes an allgatherv's result over
// a slow link (the read slow phase: its reads held 1.5 timeouts from the
// second MiB while the bytes move), and then, 2 MiB in, stops reading
// (its data conn hangs), while rank 0, whose write went into the buffer,
// waits for it in the barrier after. Rank 0 reads on while its data still
// goes out to rank 1 (link.moving), and fails rank 1 a timeout after the
// link last moved (the Delay's end, 1.5 timeouts in), within the
// deadline slack: not at its first deadline, a timeout after it entered
// the barrier, and not a timeout after it last saw the link move (a
// deadline moved from when it looked, not from when the link moved, or
// carried over from one look to the next, would be late). The other
// workers, waiting in the barrier, fail naming rank 1 as rank 0 does.
func TestSlowLinkStopsTakingResult(t *testing.T) {
	defer noSpin(t)()
	testkit.SyncTest(t, func(t *testing.T) {
		var h slowHooks
		defer star.SetTestHook(h.hook)()
		kind := slowKinds[1]
		stop := faulty.Fault{Kind: faulty.Hang, Rank: 1, Link: 0, Dir: faulty.Read, Frame: 1, Offset: 2 << 20}
		s := faulty.NewScript(kind.fault, stop)
		comms := startFaulty(t, 4, 8<<20, sT, 6*sT, s)
		defer testkit.CloseAll(comms)
		synctest.Wait()
		begin := time.Now()
		took := make([]time.Duration, 4)
		errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
			defer func() { took[c.Rank()] = time.Since(begin) }()
			if err := checkedAllgatherv(context.Background(), c, sN); err != nil {
				return fmt.Errorf("allgatherv: %w", err)
			}
			return c.Barrier(context.Background())
		})
		got := h.take()
		t.Logf("took %v, errors %v", took, errs)
		assert.Equal(t, 2, s.Fired(), "the slow link and the stop")
		assert.Positive(t, got.moving0, "rank 0 read on while its data still went out: %+v", got)
		moved := 3 * sT / 2 // the Delay's end: when the link last moved
		for r, err := range errs {
			if r == 1 {
				assert.Error(t, err, "rank 1")
				continue
			}
			collectiveFailed(t, err, 1)
			assert.GreaterOrEqual(t, took[r], moved+sT, "rank %d named rank 1 less than a timeout after the link last moved", r)
			assert.LessOrEqual(t, took[r], moved+sT+sSlack, "rank %d named rank 1 late", r)
		}
	})
}

// TestCloseDuringSlowLink: Close is called from another goroutine while a
// slow-link collective is under way, right after a deadline of it moved:
// on rank 0 as its write to rank 1 goes on past its deadline
// (link.slowWrite), on rank 1 as its read of the result reads on
// (link.moving), on rank 0 as it reads on in the barrier after (its data
// still going out to rank 1), on rank 0 as its relay reader reads on.
// Close returns promptly, the closing rank's collective fails with
// comm.ErrInvalidCommunicator at once, every other rank fails naming the
// closing rank (at once, or in the next collective once it completed this
// one) within a timeout, and nothing is left running (synctest.Test fails
// otherwise).
func TestCloseDuringSlowLink(t *testing.T) {
	cases := []struct {
		name    string
		kind    slowKind
		closing int
		point   string
		peer    int // the hook's rank: the peer of the link that moved
	}{
		{"rank0-slowwrite", slowKinds[0], 0, star.HookSlowWrite, 1},
		{"rank1-moving", slowKinds[1], 1, star.HookMoving, 0},
		{"rank0-moving", slowKinds[1], 0, star.HookMoving, 1},
		{"rank0-relay-moving", slowKinds[2], 0, star.HookMoving, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			defer noSpin(t)()
			testkit.SyncTest(t, func(t *testing.T) {
				moved := make(chan struct{})
				var once sync.Once
				defer star.SetTestHook(func(rank int, point string) {
					if point == tc.point && rank == tc.peer {
						once.Do(func() { close(moved) }) // under the link's dmu: no waiting here
					}
				})()
				s := faulty.NewScript(tc.kind.fault)
				comms := startFaulty(t, 4, 8<<20, sT, sT, s)
				defer testkit.CloseAll(comms)
				synctest.Wait()
				begin := time.Now()
				errs := make([]error, 4)
				ended := make([]time.Duration, 4)
				var wg sync.WaitGroup
				for r, c := range comms {
					wg.Go(func() {
						defer func() { ended[r] = time.Since(begin) }()
						if errs[r] = checkedAllgatherv(context.Background(), c, sN); errs[r] != nil {
							return
						}
						errs[r] = c.Barrier(context.Background())
					})
				}
				<-moved
				closedAt := time.Since(begin)
				cerr := comms[tc.closing].Close()
				closeTook := time.Since(begin) - closedAt
				wg.Wait()
				t.Logf("Close at %v took %v; the ranks returned at %v: %v", closedAt, closeTook, ended, errs)
				assert.NoError(t, cerr, "Close")
				assert.LessOrEqual(t, closeTook, 250*time.Millisecond, "Close took %v", closeTook)
				assert.ErrorIs(t, errs[tc.closing], comm.ErrInvalidCommunicator, "the closing rank's collective")
				assert.LessOrEqual(t, ended[tc.closing]-closedAt, 250*time.Millisecond, "the closing rank's collective returned %v after Close began", ended[tc.closing]-closedAt)
				for r, err := range errs {
					if r == tc.closing {
						continue
					}
					assert.LessOrEqual(t, ended[r]-closedAt, sT+sSlack+sMargin, "rank %d returned %v after Close began", r, ended[r]-closedAt)
					if err == nil {
						err = comms[r].Barrier(context.Background()) // it completed; the next collective tells it
					}
					failedNaming(t, r, err, tc.closing, "the closing rank")
				}
			})
		})
	}
}

// TestSlowUploadWhileRelayed: rank 1 sends its region of a relayed
// allgatherv (1.5 MiB) over a slow link (the relay slow phase: its write
// held 1.5 timeouts from the second half MiB while the bytes move), over
// pipes that buffer less than a region, as the socket buffers of a Linux
// host whose net.core.wmem_max and rmem_max are the usual 208 KiB do
// (SO_SNDBUF and SO_RCVBUF are capped there). Rank 0's relay writer sends
// rank 1 the regions as they come, region 0 first, while rank 1 is still
// sending its own: a worker reads the reply only once its frame is out
// (below duplexMin), so the write blocks, and its deadline passes while
// rank 1's data still arrives. Every rank completes the allgatherv and the
// barrier after it. Before, slowWrite looked only at what rank 1's host
// acknowledged (nothing since the buffers filled; its window closed), and
// rank 0 failed rank 1 "to take the result" a timeout in, while rank 1's
// link still moved.
func TestSlowUploadWhileRelayed(t *testing.T) {
	for _, buffer := range []int{0, 1 << 20} {
		t.Run(fmt.Sprintf("buffer=%d", buffer), func(t *testing.T) {
			defer noSpin(t)()
			testkit.SyncTest(t, func(t *testing.T) {
				var h slowHooks
				defer star.SetTestHook(h.hook)()
				kind := slowKinds[2]
				s := faulty.NewScript(kind.fault)
				comms := startFaulty(t, 4, buffer, sT, sT, s)
				defer testkit.CloseAll(comms)
				synctest.Wait()
				begin := time.Now()
				errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
					if err := checkedAllgatherv(context.Background(), c, sN); err != nil {
						return err
					}
					return c.Barrier(context.Background())
				})
				took := time.Since(begin)
				got := h.take()
				for r, err := range errs {
					assert.NoError(t, err, "rank %d", r)
				}
				assert.Equal(t, 1, s.Fired(), "the slow link")
				assert.GreaterOrEqual(t, took, 3*sT/2, "it waited through the slow link")
				assert.Positive(t, got.moving0, "rank 0's relay reader read on past its deadline: %+v", got)
			})
		})
	}
}
