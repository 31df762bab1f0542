package star_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/star"
	"github.com/starcomm/starcomm/testkit"
)

// closeOps are the collectives TestCloseAtEveryHandoff interrupts: small
// ones (polled), a large allgatherv stored and forwarded (served by the
// coordinator's link goroutines), one relayed (each worker link's reader and
// writer at once), one relayed whose frames are polled first, and both
// kinds of broadcast.
var closeOps = []closeOp{
	{"allgatherv-small", func(ctx context.Context, c comm.Communicator) error {
		return comm.Allgatherv(ctx, c, []float64{float64(c.Rank())}, make([]float64, 4), []int{1, 1, 1, 1}, []int{0, 1, 2, 3})
	}},
	{"allgatherv-large", func(ctx context.Context, c comm.Communicator) error {
		const n = 16 << 10 // 128 KiB per rank, 512 KiB in all: not polled, not relayed
		return comm.Allgatherv(ctx, c, make([]float64, n), make([]float64, 4*n), []int{n, n, n, n}, []int{0, n, 2 * n, 3 * n})
	}},
	{"allgatherv-relayed", func(ctx context.Context, c comm.Communicator) error {
		const n = 64 << 10 // 512 KiB per rank, 2 MiB in all: relayed, in steps
		return comm.Allgatherv(ctx, c, make([]float64, n), make([]float64, 4*n), []int{n, n, n, n}, []int{0, n, 2 * n, 3 * n})
	}},
	{"allgatherv-polled-relay", func(ctx context.Context, c comm.Communicator) error {
		const n = 32 << 10 // 256 KiB per rank, 1 MiB in all: relayed, but polled first
		return comm.Allgatherv(ctx, c, make([]float64, n), make([]float64, 4*n), []int{n, n, n, n}, []int{0, n, 2 * n, 3 * n})
	}},
	{"allreduce", func(ctx context.Context, c comm.Communicator) error {
		return comm.Allreduce(ctx, c, []float64{1, 2}, make([]float64, 2), comm.Sum)
	}},
	{"broadcast-root0", func(ctx context.Context, c comm.Communicator) error {
		return comm.Broadcast(ctx, c, make([]float64, 8), 0)
	}},
	{"broadcast-root3", func(ctx context.Context, c comm.Communicator) error {
		return comm.Broadcast(ctx, c, make([]float64, 8), 3)
	}},
	{"barrier", func(ctx context.Context, c comm.Communicator) error { return c.Barrier(ctx) }},
}

// closeOp is a collective that TestCloseAtEveryHandoff interrupts.
type closeOp struct {
	name string
	run  func(ctx context.Context, c comm.Communicator) error
}

// handoff is one occurrence of a hook point on one rank.
type handoff struct {
	point string
	nth   int // 1 for the first occurrence of point on the rank
}

// handoffRecorder counts the hook points of one rank during a collective
// and, at a chosen one, runs act from the goroutine at that point.
type handoffRecorder struct {
	mu     sync.Mutex
	rank   int
	counts map[string]int
	target handoff
	act    func()
}

func (h *handoffRecorder) hook(rank int, point string) {
	switch point {
	case star.HookRegistered, "closing", star.HookBeat, star.HookHeartbeat, star.HookAllSilent, star.HookSessionSetUp, star.HookHere:
		return // not a collective's points (the control session's run on their own)
	}
	if rank != h.rank {
		return
	}
	h.mu.Lock()
	if h.counts == nil {
		h.counts = map[string]int{}
	}
	h.counts[point]++
	fire := h.act != nil && point == h.target.point && h.counts[point] == h.target.nth
	act := h.act
	if fire {
		h.act = nil
	}
	h.mu.Unlock()
	if fire {
		act()
	}
}

// handoffs returns every (point, occurrence) recorded, in a stable order.
func (h *handoffRecorder) handoffs() []handoff {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []handoff
	for p, n := range h.counts {
		for i := 1; i <= n; i++ {
			out = append(out, handoff{p, i})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].point != out[j].point {
			return out[i].point < out[j].point
		}
		return out[i].nth < out[j].nth
	})
	return out
}

// TestCloseAtEveryHandoff calls Close from another goroutine at every point
// where one goroutine of a collective hands work or a link to another (see
// star's hook points: the collective starts, polls, hands a request to a
// link goroutine, a link goroutine reports, the result is taken, a frame
// is posted or sent, the I/O ends), on every rank, in every collective,
// over pipes that poll, on the fake clock. Every time: Close returns
// promptly; the closing rank's collective fails with an error wrapping
// comm.ErrInvalidCommunicator; every other rank either completes its
// collective or fails naming the closing rank, and fails naming it at
// the next collective; nothing is left running (synctest.Test fails
// otherwise).
func TestCloseAtEveryHandoff(t *testing.T) {
	cases := closeAtEveryHandoff(t, closeOps, map[string]string{"allgatherv-relayed": star.HookRelay})
	t.Logf("%d cases: every hand-off of every rank in %d collectives", cases, len(closeOps))
}

// TestCloseAtEveryHandoffStreamed is TestCloseAtEveryHandoff for an
// allreduce streamed in 64-byte chunks (13 of them), its replies
// overlapping the reduction, each worker writing its frame while it reads
// the reply: Close at any hand-off of the streaming reader and writer
// goroutines and of the workers' senders, on any rank.
func TestCloseAtEveryHandoffStreamed(t *testing.T) {
	defer star.SetStream(1, 64)()
	defer star.SetDuplexMin(1)()
	ops := []closeOp{{"allreduce-streamed", func(ctx context.Context, c comm.Communicator) error {
		return comm.Allreduce(ctx, c, make([]float64, 100), make([]float64, 100), comm.Sum)
	}}}
	cases := closeAtEveryHandoff(t, ops, map[string]string{"allreduce-streamed": star.HookReply})
	t.Logf("%d cases: every hand-off of every rank", cases)
}

// closeAtEveryHandoff runs TestCloseAtEveryHandoff's cases for ops; must
// names, for some ops, a hook point rank 0 must pass in the dry run. It
// returns the number of cases.
func closeAtEveryHandoff(t *testing.T, ops []closeOp, must map[string]string) int {
	const size = 4
	var recorder handoffRecorder
	restore := star.SetTestHook(recorder.hook)
	defer restore()
	cases := 0
	for _, op := range ops {
		for rank := range size {
			// A dry run records the hand-offs of this rank in this
			// collective.
			recorder.mu.Lock()
			recorder.rank, recorder.counts, recorder.act = rank, nil, nil
			recorder.mu.Unlock()
			testkit.SyncTest(t, func(t *testing.T) {
				comms := inBubble(t, size, withTimeout(time.Minute))
				defer testkit.CloseAll(comms)
				sessionsUp(t) // the control sessions up: the same hand-offs in every run
				for r, err := range testkit.RunRanks(comms, func(c comm.Communicator) error { return op.run(context.Background(), c) }) {
					require.NoError(t, err, "dry run: rank %d", r)
				}
			})
			points := recorder.handoffs()
			require.NotEmpty(t, points, "op=%s rank=%d: no hand-off recorded", op.name, rank)
			if point, ok := must[op.name]; ok && rank == 0 {
				require.Contains(t, points, handoff{point, 1}, "the coordinator passes %s", point)
			}
			for _, at := range points {
				cases++
				t.Run(fmt.Sprintf("op=%s/rank=%d/at=%s#%d", op.name, rank, at.point, at.nth), func(t *testing.T) {
					closeAt(t, op.run, size, rank, at, &recorder)
				})
			}
		}
	}
	return cases
}

// closeAt runs one case of TestCloseAtEveryHandoff.
func closeAt(t *testing.T, run func(context.Context, comm.Communicator) error, size, rank int, at handoff, recorder *handoffRecorder) {
	testkit.SyncTest(t, func(t *testing.T) {
		comms := inBubble(t, size, withTimeout(time.Minute))
		defer testkit.CloseAll(comms)
		sessionsUp(t) // as in the dry run
		closed := make(chan error, 1)
		var closeTook time.Duration
		recorder.mu.Lock()
		recorder.rank, recorder.counts, recorder.target = rank, nil, at
		recorder.act = func() {
			go func() {
				begin := time.Now()
				err := comms[rank].Close()
				closeTook = time.Since(begin)
				closed <- err
			}()
			// Let Close run as far as it can before the collective goes on.
			synctest.Wait()
		}
		recorder.mu.Unlock()
		errs := testkit.RunRanks(comms, func(c comm.Communicator) error { return run(context.Background(), c) })
		var closeErr error
		select {
		case closeErr = <-closed:
		default:
			synctest.Wait()
			select {
			case closeErr = <-closed:
			default:
				t.Fatalf("Close at %s#%d did not return once the collective had", at.point, at.nth)
			}
		}
		assert.NoError(t, closeErr, "Close")
		assert.LessOrEqual(t, closeTook, 250*time.Millisecond, "Close took %v", closeTook)
		require.Error(t, errs[rank], "the closing rank's collective")
		assert.ErrorIs(t, errs[rank], comm.ErrInvalidCommunicator, "the closing rank's collective")
		for r, err := range errs {
			if r == rank {
				continue
			}
			if err == nil {
				// It completed; the next collective tells it.
				err = comms[r].Barrier(context.Background())
			}
			var cf *comm.CollectiveFailedError
			if assert.ErrorAs(t, err, &cf, "rank %d", r) {
				assert.Equal(t, rank, cf.Rank, "rank %d names the wrong rank: %v", r, err)
			}
		}
	})
}

// TestCloseConcurrentCalls: Close called from several goroutines at once,
// during a collective, returns on every one of them, and only after the
// communicator is closed; later calls return nil at once.
func TestCloseConcurrentCalls(t *testing.T) {
	testkit.SyncTest(t, func(t *testing.T) {
		comms := inBubble(t, 3, withTimeout(time.Minute))
		defer testkit.CloseAll(comms)
		done := make(chan error, 1)
		go func() { done <- comms[0].Barrier(context.Background()) }()
		synctest.Wait()
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i := range errs {
			wg.Go(func() { errs[i] = comms[0].Close() })
		}
		wg.Wait()
		require.ErrorIs(t, <-done, comm.ErrInvalidCommunicator)
		assert.Equal(t, make([]error, 4), errs)
		assert.NoError(t, comms[0].Close())
		assert.True(t, slices.ContainsFunc([]error{comms[0].Barrier(context.Background())}, func(err error) bool {
			return errors.Is(err, comm.ErrInvalidCommunicator)
		}))
	})
}
