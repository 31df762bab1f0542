package star_test

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/star"
	"github.com/starcomm/starcomm/testkit"
	"github.com/starcomm/starcomm/transport/faulty"
)

// streamCounts counts what the coordinator does in streamed allreduces,
// from star's test hook.
type streamCounts struct {
	streams  atomic.Int64 // streamed allreduces begun
	replies  atomic.Int64 // of them, with the reply overlapping the reduction
	sessions atomic.Int64 // control sessions set up
	duplex   atomic.Int64 // workers' frames written while the reply is read
}

// countStreams counts streamed allreduces, their overlapped replies and the
// control sessions set up, until the returned restore runs.
func countStreams() (*streamCounts, func()) {
	n := &streamCounts{}
	restore := star.SetTestHook(func(rank int, point string) {
		switch point {
		case star.HookStream:
			n.streams.Add(1)
		case star.HookReply:
			n.replies.Add(1)
		case star.HookSessionSetUp:
			n.sessions.Add(1)
		case star.HookDuplex:
			n.duplex.Add(1)
		}
	})
	return n, restore
}

// streamValue is rank r's element i in TestStreamedAllreduce: for a float
// sum, large and small values whose sum depends on the order it is taken in.
func streamValue(r, i int) float64 {
	switch (r + i) % 3 {
	case 0:
		return 1e16 * float64(1+i%5)
	case 1:
		return 1 + float64(i%7)/3
	}
	return -1e16 * float64(1+(i+r)%4)
}

// foldRanks is the allreduce's result as the spec defines it: rank 0's
// data, then each other rank's reduced into it, in rank order.
func foldRanks[T comm.Elem](typ comm.DType, op comm.ReduceOp, sends [][]T) []T {
	out := append([]T(nil), sends[0]...)
	for _, s := range sends[1:] {
		comm.Reduce(typ, op, comm.ViewOf(out).Bytes, comm.ViewOf(s).Bytes)
	}
	return out
}

// streamedCase runs one allreduce of n elements of T per rank over comms
// and checks every rank's result against foldRanks, bit for bit.
func streamedCase[T comm.Elem](t *testing.T, comms []comm.Communicator, n int, op comm.ReduceOp, val func(r, i int) T) {
	t.Helper()
	sends := make([][]T, len(comms))
	for r := range sends {
		sends[r] = make([]T, n)
		for i := range sends[r] {
			sends[r][i] = val(r, i)
		}
	}
	var zero [1]T
	typ := comm.ViewOf(zero[:]).Type
	want := foldRanks(typ, op, sends)
	recvs := make([][]T, len(comms))
	errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
		recvs[c.Rank()] = make([]T, n)
		return comm.Allreduce(context.Background(), c, sends[c.Rank()], recvs[c.Rank()], op)
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
		assert.Equal(t, comm.ViewOf(want).Bytes, comm.ViewOf(recvs[r]).Bytes, "rank %d: %v of %d %v", r, op, n, typ)
	}
}

// TestStreamedAllreduce: an allreduce over the streaming bound is reduced as
// it streams in, chunk by chunk (here 64-byte chunks, so that one of a few
// hundred bytes takes many), and its result is the rank-order reduction's,
// bit for bit, for every operator and element type, on every rank, with a
// last chunk that is whole, short or the only one; with the control
// sessions on the replies overlap the reduction, without them they follow
// it. No scratch is kept for it. The float sum's values make the order
// matter: the test checks that the reverse order would give another
// result.
func TestStreamedAllreduce(t *testing.T) {
	defer star.SetStream(1, 64)()
	counts, restore := countStreams()
	defer restore()
	for _, control := range []bool{false, true} {
		for _, size := range []int{2, 3, 5} {
			t.Run(fmt.Sprintf("control=%t/size=%d", control, size), func(t *testing.T) {
				testkit.SyncTest(t, func(t *testing.T) {
					comms := inBubble(t, size, func(c *star.Config) {
						c.Timeout = 10 * time.Second
						if !control {
							c.Liveness = -1
						}
					})
					defer testkit.CloseAll(comms)
					sessionsUp(t) // every control session up
					streams, replies := counts.streams.Load(), counts.replies.Load()
					ran := 0
					for _, n := range []int{1, 7, 8, 9, 100, 1000} {
						streamedCase(t, comms, n, comm.Sum, streamValue)
						streamedCase(t, comms, n, comm.Min, func(r, i int) int32 { return int32((r*7919 + i*104729) % 1000003) })
						streamedCase(t, comms, n, comm.Max, func(r, i int) float32 { return float32(math.Sin(float64(r*n + i))) })
						streamedCase(t, comms, n, comm.BitwiseOr, func(r, i int) uint64 { return 1 << ((r + i) % 64) })
						ran += 4
					}
					assert.Equal(t, int64(ran), counts.streams.Load()-streams, "every allreduce was streamed")
					overlapped := int64(0)
					if control {
						overlapped = int64(ran)
					}
					assert.Equal(t, overlapped, counts.replies.Load()-replies, "replies overlapping the reduction")
					assert.Zero(t, star.ScratchBytes(comms[0].(*star.Comm)), "no stored-reduction scratch")
				})
			})
		}
	}
	// The values make the order matter.
	sends := make([][]float64, 5)
	for r := range sends {
		for i := range 100 {
			sends[r] = append(sends[r], streamValue(r, i))
		}
	}
	fwd := foldRanks(comm.Float64, comm.Sum, sends)
	for i, j := 0, len(sends)-1; i < j; i, j = i+1, j-1 {
		sends[i], sends[j] = sends[j], sends[i]
	}
	assert.NotEqual(t, fwd, foldRanks(comm.Float64, comm.Sum, sends), "the test's values must make the order of the sum matter")
}

// TestStreamedAllreduceSameAsStored: over real TCP, an allreduce of 4 MiB
// per rank over 4 ranks, streamed in the default chunks (1 MiB) with the
// replies overlapping the reduction (and each worker reading its reply
// while it writes its frame), gives the same bytes as the stored reduction
// of the same data, and then the stored one (below the bound again) runs
// as before on the same communicator.
func TestStreamedAllreduceSameAsStored(t *testing.T) {
	testkit.CheckGoroutines(t)
	counts, restore := countStreams()
	defer restore()
	comms, err := testkit.StartStar(context.Background(), testkit.NewTCPNetwork(), 4, func(c *star.Config) {
		c.Timeout = 20 * time.Second
	})
	require.NoError(t, err)
	defer testkit.CloseAll(comms)
	require.Eventually(t, func() bool { return counts.sessions.Load() == 3 }, 10*time.Second, time.Millisecond, "the control sessions come up")
	const n = 512 << 10 // float64: 4 MiB per rank
	require.Equal(t, 1<<20, star.StreamChunkSize(3))
	run := func() [][]float64 {
		recvs := make([][]float64, len(comms))
		errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
			send := make([]float64, n)
			for i := range send {
				send[i] = streamValue(c.Rank(), i)
			}
			recvs[c.Rank()] = make([]float64, n)
			return comm.Allreduce(context.Background(), c, send, recvs[c.Rank()], comm.Sum)
		})
		for r, err := range errs {
			require.NoError(t, err, "rank %d", r)
		}
		return recvs
	}
	stored := run()
	require.Zero(t, counts.streams.Load(), "below the bound: stored")
	undo := star.SetStream(1<<20, 0)
	streamed := run()
	undo()
	require.Equal(t, int64(1), counts.streams.Load(), "over the bound: streamed")
	require.Equal(t, int64(1), counts.replies.Load(), "the replies overlapping the reduction")
	for r := range comms {
		assert.Equal(t, comm.ViewOf(stored[0]).Bytes, comm.ViewOf(streamed[r]).Bytes, "rank %d", r)
	}
	again := run()
	assert.Equal(t, int64(1), counts.streams.Load())
	assert.Equal(t, int64(9), counts.duplex.Load(), "each worker's 4 MiB frame written while it read the reply, in each allreduce")
	assert.Equal(t, comm.ViewOf(stored[0]).Bytes, comm.ViewOf(again[1]).Bytes)
}

// TestStreamedAllreduceOpMismatch: a streamed allreduce whose ranks disagree
// on the operator fails every rank naming the odd one, as a stored one
// does (the coordinator reads every payload to its end without reducing
// it), and the mismatch does not leave the links mid-frame: the workers
// get rank 0's Abort, not a cut connection.
func TestStreamedAllreduceOpMismatch(t *testing.T) {
	defer star.SetStream(1, 64)()
	for _, tc := range []struct{ size, odd, blamed int }{{4, 2, 2}, {4, 0, 0}, {3, 1, 1}} {
		t.Run(fmt.Sprintf("size=%d/odd=%d", tc.size, tc.odd), func(t *testing.T) {
			testkit.SyncTest(t, func(t *testing.T) {
				comms := inBubble(t, tc.size, withTimeout(time.Minute))
				defer testkit.CloseAll(comms)
				errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
					op := comm.Sum
					if c.Rank() == tc.odd {
						op = comm.Max
					}
					return comm.Allreduce(context.Background(), c, make([]float64, 100), make([]float64, 100), op)
				})
				for r, err := range errs {
					collectiveFailed(t, err, tc.blamed)
					assert.ErrorIs(t, err, star.ErrReduceOpMismatch, "rank %d", r)
					assert.Contains(t, err.Error(), fmt.Sprintf("rank %d called allreduce with", tc.blamed), "rank %d", r)
				}
			})
		})
	}
}

// TestStreamedAllreduceLengthMismatch: a worker whose streamed allreduce is
// longer or shorter than rank 0's is refused at its header, before any
// payload is reduced, naming it, as a stored one is.
func TestStreamedAllreduceLengthMismatch(t *testing.T) {
	defer star.SetStream(1, 64)()
	for _, odd := range []int{90, 110} {
		t.Run(fmt.Sprintf("odd=%d", odd), func(t *testing.T) {
			testkit.SyncTest(t, func(t *testing.T) {
				comms := inBubble(t, 4, withTimeout(time.Minute))
				defer testkit.CloseAll(comms)
				errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
					n := 100
					if c.Rank() == 2 {
						n = odd
					}
					return comm.Allreduce(context.Background(), c, make([]float64, n), make([]float64, n), comm.Sum)
				})
				var bs *comm.InvalidBufferSizeError
				require.ErrorAs(t, errs[0], &bs, "rank 0 sees the frame's length")
				assert.Contains(t, errs[0].Error(), "frame from rank 2")
				for r := 1; r < 4; r++ {
					if r != 2 {
						collectiveFailed(t, errs[r], 2)
					}
				}
			})
		})
	}
}

// TestStreamedAllreduceLateLowRank: rank 1 computes before a streamed
// allreduce while ranks 2 and 3 call it at once, over unbuffered pipes, on
// the fake clock. Rank 0 reads rank 2's and 3's chunks only once it has
// rank 1's (it reduces in rank order), so their writes wait on rank 1.
// For 0.9 of the timeout every rank succeeds; for 1.5 every rank fails
// naming rank 1, none naming rank 0 or itself.
func TestStreamedAllreduceLateLowRank(t *testing.T) {
	defer star.SetStream(1, 64)()
	const timeout = 10 * time.Second
	for _, tc := range []struct {
		late time.Duration
		ok   bool
	}{{9 * timeout / 10, true}, {3 * timeout / 2, false}} {
		t.Run(fmt.Sprintf("late=%v", tc.late), func(t *testing.T) {
			testkit.SyncTest(t, func(t *testing.T) {
				comms := inBubble(t, 4, withTimeout(timeout))
				defer testkit.CloseAll(comms)
				errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
					if c.Rank() == 1 {
						time.Sleep(tc.late) // computing
					}
					return comm.Allreduce(context.Background(), c, make([]float64, 100), make([]float64, 100), comm.Sum)
				})
				for r, err := range errs {
					if tc.ok {
						assert.NoError(t, err, "rank %d", r)
						continue
					}
					if r != 1 {
						collectiveFailed(t, err, 1)
					}
				}
			})
		})
	}
}

// TestArrivalSkew: ranks 2 and 3 call the collective at once, rank 0 0.6
// of the timeout later and rank 1 1.3 timeouts later, on the fake clock,
// over unbuffered pipes (so a worker's frame waits until rank 0 takes
// it). No rank waits more than a timeout for one that rank 0 waits for:
// every rank succeeds, in a stored allreduce (each worker writing its
// frame while it reads the reply), a streamed one and a relayed
// allgatherv. Before rank 0 said on the control sessions that it was
// there (msgHere), ranks 2 and 3 gave up on the streamed allreduce after a
// timeout, their frames still waiting for rank 1's, and every rank failed
// naming rank 0; without the reply's read waiting for the frame's end
// (link.readsOn), they gave up on the stored one, whose reply they read
// from the start.
func TestArrivalSkew(t *testing.T) {
	const timeout = 10 * time.Second
	counts, restore := countStreams()
	defer restore()
	allreduce := func(c comm.Communicator) error {
		return comm.Allreduce(context.Background(), c, make([]float64, 100), make([]float64, 100), comm.Sum)
	}
	for _, tc := range []struct {
		name      string
		stream    int  // streamMin: 1 streams, 1<<30 stores
		noSession bool // the control sessions off
		run       func(c comm.Communicator) error
	}{
		{"allreduce-stored", 1 << 30, false, allreduce},
		{"allreduce-streamed", 1, false, allreduce},
		{"allreduce-stored-no-sessions", 1 << 30, true, allreduce},
		{"allgatherv-relayed", 1 << 30, false, func(c comm.Communicator) error {
			const n = 40_000 // 1.28 MB in all: relayed
			return comm.Allgatherv(context.Background(), c, make([]float64, n), make([]float64, 4*n), []int{n, n, n, n}, []int{0, n, 2 * n, 3 * n})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer star.SetStream(tc.stream, 64)()
			defer star.SetDuplexMin(1)()
			testkit.SyncTest(t, func(t *testing.T) {
				comms := inBubble(t, 4, func(c *star.Config) {
					c.Timeout = timeout
					if tc.noSession {
						c.Liveness = -1
					}
				})
				defer testkit.CloseAll(comms)
				sessionsUp(t) // every control session up
				streams := counts.streams.Load()
				late := []time.Duration{6 * timeout / 10, 13 * timeout / 10, 0, 0}
				errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
					time.Sleep(late[c.Rank()])
					return tc.run(c)
				})
				for r, err := range errs {
					assert.NoError(t, err, "rank %d", r)
				}
				if tc.stream == 1 {
					assert.Equal(t, streams+1, counts.streams.Load(), "streamed")
				}
			})
		})
	}
}

// TestDuplexFrozenAfterFrame: a worker writes its frame while it reads the
// reply (every frame goes duplex here); rank 0 comes a tenth of the
// timeout late, takes the frame, and freezes before its reply (its whole
// process hangs; liveness far off). The worker fails naming rank 0 a
// timeout (with its reply margin and slack) after its frame went out, as
// when it reads the reply after the frame: at 1.1 timeouts + 0.75 s, and
// 200 ms for its Abort. (It used to get a fresh timeout at its read's
// first deadline: 2.17 timeouts.)
func TestDuplexFrozenAfterFrame(t *testing.T) {
	defer star.SetDuplexMin(1)()
	const timeout = 10 * time.Second
	testkit.SyncTest(t, func(t *testing.T) {
		s := faulty.NewScript(faulty.Fault{Kind: faulty.Hang, Rank: 0, Link: 1, Dir: faulty.Write, Frame: 2, WholeRank: true})
		comms, err := testkit.StartStar(context.Background(), testkit.NewPipeNetwork(), 2, func(c *star.Config) {
			c.Timeout, c.Liveness = timeout, 100*timeout
			if c.Listener != nil {
				c.Listener = s.WrapListener(c.Listener)
			}
			if c.Dialer != nil {
				c.Dialer = s.WrapDialer(c.Dialer, c.Rank)
			}
		})
		require.NoError(t, err)
		defer testkit.CloseAll(comms)
		for r, err := range testkit.RunRanks(comms, func(c comm.Communicator) error { return c.Barrier(context.Background()) }) {
			require.NoError(t, err, "warm-up barrier, rank %d", r)
		}
		sessionsUp(t) // the control session up
		start := time.Now()
		var failedAt time.Duration
		errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
			if c.Rank() == 0 {
				time.Sleep(timeout / 10)
			}
			err := comm.Allreduce(context.Background(), c, make([]float64, 100), make([]float64, 100), comm.Sum)
			if c.Rank() == 1 {
				failedAt = time.Since(start)
			}
			return err
		})
		collectiveFailed(t, errs[1], 0)
		// Its failing collective then waits 200 ms for its Abort to go
		// out (rank 0 takes nothing), as it does after any timeout.
		want := timeout/10 + timeout + 750*time.Millisecond + 200*time.Millisecond
		assert.InDelta(t, float64(want), float64(failedAt), float64(time.Millisecond), "when the worker fails: %v", failedAt)
	})
}

// TestStreamedOverlapSlowLowerRank: a streamed allreduce whose replies
// overlap the reduction (every worker has a control session), with frames
// under duplexMin (512 KiB here, as is every frame of an allreduce of
// under 4 MiB per rank that rank 0 streams, with 17 or more workers).
// Rank 1's frame stalls twice for 0.52 of the timeout. Rank 0 reduces in
// rank order, so every frame waits on rank 1, 1.04 timeouts in all, while
// rank 0's relay writers have begun the reply: the workers must read it
// while they write, whatever their frame's size. Written whole first, a
// frame that does not fit in the buffers held rank 0's writer in one write
// for all that time, which timed out and named that worker, a healthy one.
// Every rank must succeed or name rank 1. Three runs of six ranks.
func TestStreamedOverlapSlowLowerRank(t *testing.T) {
	const timeout = 10 * time.Second
	const n = 64 << 10 // float64: 512 KiB per rank, < duplexMin
	counts, restore := countStreams()
	defer restore()
	defer star.SetStream(1, 4096)()
	for run := range 3 {
		t.Run(fmt.Sprintf("run=%d", run), func(t *testing.T) {
			testkit.SyncTest(t, func(t *testing.T) {
				stall := 52 * timeout / 100
				s := faulty.NewScript(
					faulty.Fault{Kind: faulty.Delay, Rank: 1, Link: 0, Dir: faulty.Write, Frame: 1, Offset: 300 << 10, Delay: stall},
					faulty.Fault{Kind: faulty.Delay, Rank: 1, Link: 0, Dir: faulty.Write, Frame: 1, Offset: 400 << 10, Delay: stall},
				)
				comms := startFaulty(t, 6, 0, timeout, 10*time.Second, s)
				defer testkit.CloseAll(comms)
				sessionsUp(t) // every control session up
				streams, replies := counts.streams.Load(), counts.replies.Load()
				errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
					send := make([]float64, n)
					for i := range send {
						send[i] = float64(c.Rank()*n + i)
					}
					return comm.Allreduce(context.Background(), c, send, make([]float64, n), comm.Sum)
				})
				assert.Equal(t, 2, s.Fired(), "both stalls")
				assert.Equal(t, streams+1, counts.streams.Load(), "streamed")
				assert.Equal(t, replies+1, counts.replies.Load(), "replies overlapping the reduction")
				for _, err := range errs {
					if err != nil {
						collectiveFailed(t, err, 1)
					}
				}
			})
		})
	}
}

// TestStreamedOverlapHangNamesHungRank: in a streamed allreduce whose
// replies overlap the reduction, with frames under duplexMin, rank 1's
// data link stops for 0.4 s, 0.7 s or 2 s in the middle of its frame and
// then goes silent. Rank 0's reader of rank 1 times out a timeout after
// rank 1's last byte, and every rank must fail naming rank 1. With workers
// that wrote their whole frame before reading the reply, rank 0's relay
// writers, blocked on them since before rank 1 stalled, timed out first
// (armed earlier) and rank 0 named whichever worker's writer reported
// first: a healthy one, in most runs. With a worker's write of its frame
// one call under one deadline, a stop of more than its reply margin let
// that deadline pass first, and every rank named rank 0. Six ranks.
func TestStreamedOverlapHangNamesHungRank(t *testing.T) {
	const timeout = 10 * time.Second
	const n = 64 << 10 // float64: 512 KiB per rank, < duplexMin
	defer star.SetStream(1, 4096)()
	for _, delay := range []time.Duration{400 * time.Millisecond, 700 * time.Millisecond, 2 * time.Second} {
		t.Run(fmt.Sprintf("delay=%v", delay), func(t *testing.T) {
			testkit.SyncTest(t, func(t *testing.T) {
				s := faulty.NewScript(
					faulty.Fault{Kind: faulty.Delay, Rank: 1, Link: 0, Dir: faulty.Write, Frame: 1, Offset: 280 << 10, Delay: delay},
					faulty.Fault{Kind: faulty.Hang, Rank: 1, Link: 0, Dir: faulty.Write, Frame: 1, Offset: 300 << 10},
				)
				comms := startFaulty(t, 6, 0, timeout, 10*time.Second, s)
				defer testkit.CloseAll(comms)
				sessionsUp(t) // every control session up
				errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
					return comm.Allreduce(context.Background(), c, make([]float64, n), make([]float64, n), comm.Sum)
				})
				assert.Equal(t, 2, s.Fired(), "the delay and the hang")
				for r, err := range errs {
					if r != 1 {
						collectiveFailed(t, err, 1)
					}
				}
			})
		})
	}
}

// TestStreamedLowerRankStallsOften: rank 1's frame of a streamed allreduce
// stalls four times for 0.52 of the timeout each (a slow link, every stall
// within the timeout), with and without the control sessions, over pipes
// that buffer nothing and over pipes whose buffers hold a whole frame.
// Rank 0 takes the other frames, and sends the reply, only as fast as
// rank 1's data comes, so each waits through all four stalls; but no link
// goes a timeout without progress, and every rank must succeed. A worker
// used to write its frame, and read its reply, in calls of up to 4 MiB
// (here the whole 512 KiB in one), each under one deadline armed as it
// began, and rank 0 sent the reply in pieces of 256 KiB: the call timed
// out in the third stall and named rank 0 (see link.wcallMax,
// coordinator.streamWrite). Six ranks.
func TestStreamedLowerRankStallsOften(t *testing.T) {
	const timeout = 10 * time.Second
	const n = 64 << 10 // float64: 512 KiB per rank
	counts, restore := countStreams()
	defer restore()
	defer star.SetStream(1, 4096)()
	for _, tc := range []struct {
		liveness time.Duration
		buffer   int // the pipes' buffers
	}{{10 * time.Second, 0}, {-1, 0}, {10 * time.Second, 1 << 20}} {
		liveness := tc.liveness
		t.Run(fmt.Sprintf("liveness=%v/buffer=%d", liveness, tc.buffer), func(t *testing.T) {
			testkit.SyncTest(t, func(t *testing.T) {
				stall := 52 * timeout / 100
				var faults []faulty.Fault
				for _, at := range []int{300, 400, 450, 480} {
					faults = append(faults, faulty.Fault{Kind: faulty.Delay, Rank: 1, Link: 0, Dir: faulty.Write, Frame: 1, Offset: at << 10, Delay: stall})
				}
				s := faulty.NewScript(faults...)
				comms := startFaulty(t, 6, tc.buffer, timeout, liveness, s)
				defer testkit.CloseAll(comms)
				sessionsUp(t) // every control session up (if any)
				streams := counts.streams.Load()
				begin := time.Now()
				errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
					send := make([]float64, n)
					for i := range send {
						send[i] = float64(c.Rank()*n + i)
					}
					recv := make([]float64, n)
					if err := comm.Allreduce(context.Background(), c, send, recv, comm.Sum); err != nil {
						return err
					}
					for i, v := range recv {
						if want := float64(15*n + 6*i); v != want {
							return fmt.Errorf("rank %d: recv[%d] = %v, want %v", c.Rank(), i, v, want)
						}
					}
					return nil
				})
				for r, err := range errs {
					assert.NoError(t, err, "rank %d", r)
				}
				assert.Equal(t, 4, s.Fired(), "the four stalls")
				assert.Equal(t, streams+1, counts.streams.Load(), "streamed")
				assert.GreaterOrEqual(t, time.Since(begin), 4*stall, "it waited through the stalls")
			})
		})
	}
}
