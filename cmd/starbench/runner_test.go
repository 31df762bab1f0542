package main

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/testkit"
)

// quickScale gives every workload the minimum of one timed repetition.
const quickScale = 0.001

// testTimeout bounds every in-process run; a hang is a failure.
const testTimeout = 60 * time.Second

// startStar starts size star ranks over in-memory pipes, closed when the
// test ends, and checks that no goroutine is left behind.
func startStar(t *testing.T, size int) (context.Context, []comm.Communicator) {
	t.Helper()
	testkit.CheckGoroutines(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	comms, err := testkit.StartStar(ctx, testkit.NewPipeNetwork(), size, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = testkit.CloseAll(comms) })
	return ctx, comms
}

// runAllRanks runs runWorkloads on every rank, each through wrap(rank, c)
// when wrap is not nil. A rank whose run fails closes its communicator, as
// a failing process would exit, so the others fail instead of waiting.
func runAllRanks(ctx context.Context, comms []comm.Communicator, wrap func(rank int, c comm.Communicator) comm.Communicator,
	ws []workload, scale float64) ([][]result, []error) {
	results := make([][]result, len(comms))
	errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
		rank := c.Rank()
		cc := c
		if wrap != nil {
			cc = wrap(rank, c)
		}
		res, err := runWorkloads(ctx, cc, ws, scale)
		if err != nil {
			_ = c.Close()
		}
		results[rank] = res
		return err
	})
	return results, errs
}

// checkResults checks one rank's results of ws on size ranks.
func checkResults(t *testing.T, ws []workload, size int, got []result) {
	t.Helper()
	require.Len(t, got, len(ws))
	for i, r := range got {
		w := ws[i]
		assert.Equal(t, w.name, r.Workload)
		assert.Equal(t, size, r.Ranks, r.Workload)
		assert.Equal(t, w.bytesPerRank, r.BytesPerRank, r.Workload)
		assert.Equal(t, repeatsFor(w.repeats, quickScale), r.Repeats, r.Workload)
		assert.Positive(t, r.Median, r.Workload)
		assert.LessOrEqual(t, r.Min, r.Median, r.Workload)
		assert.LessOrEqual(t, r.Median, r.Max, r.Workload)
		if w.algBytes == nil {
			assert.Nil(t, r.AlgBW, r.Workload)
			assert.Zero(t, r.AlgBytes, r.Workload)
		} else if assert.NotNil(t, r.AlgBW, r.Workload) {
			assert.Equal(t, w.algBytes(size), r.AlgBytes, r.Workload)
			assert.InEpsilon(t, float64(r.AlgBytes)/r.Median.Seconds(), *r.AlgBW, 1e-9, r.Workload)
		}
	}
}

func TestRunWorkloadsLocal(t *testing.T) {
	ws := standardWorkloads()
	got, err := runWorkloads(context.Background(), comm.NewLocal(), ws, quickScale)
	require.NoError(t, err)
	checkResults(t, ws, 1, got)
}

func TestRunWorkloadsStar(t *testing.T) {
	const size = 4
	ctx, comms := startStar(t, size)
	ws := standardWorkloads()
	results, errs := runAllRanks(ctx, comms, nil, ws, quickScale)
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	checkResults(t, ws, size, results[0])
	for r := 1; r < size; r++ {
		assert.Equal(t, results[0], results[r], "rank %d agrees with rank 0 on every time", r)
	}
}

func TestRepeatsFor(t *testing.T) {
	for _, tc := range []struct {
		repeats int
		scale   float64
		want    int
	}{
		{200, 1, 200}, {200, 0.25, 50}, {3, 0.25, 1}, {8, 0.001, 1}, {50, 2, 100}, {3, 0.5, 2},
	} {
		t.Run(fmt.Sprintf("repeats=%d/scale=%g", tc.repeats, tc.scale), func(t *testing.T) {
			assert.Equal(t, tc.want, repeatsFor(tc.repeats, tc.scale))
		})
	}
}

func TestMedian(t *testing.T) {
	assert.Equal(t, 3*time.Second, median([]time.Duration{5 * time.Second, 1 * time.Second, 3 * time.Second}))
	assert.Equal(t, 2500*time.Millisecond, median([]time.Duration{4 * time.Second, 1 * time.Second, 2 * time.Second, 3 * time.Second}))
	ds := []time.Duration{7, 1}
	assert.Equal(t, time.Duration(4), median(ds))
	assert.Equal(t, []time.Duration{7, 1}, ds, "median leaves its argument alone")
}

// flipComm corrupts the recv buffer of its call-th successful Allgatherv
// (counting from 1) by flipping one bit in the middle of it.
type flipComm struct {
	comm.Communicator
	call  int
	calls int
}

// Allgatherv runs the real Allgatherv, then corrupts recv on the chosen call.
func (f *flipComm) Allgatherv(ctx context.Context, send, recv comm.View, counts, displs []int) error {
	err := f.Communicator.Allgatherv(ctx, send, recv, counts, displs)
	if err == nil {
		f.calls++
		if f.calls == f.call {
			recv.Bytes[len(recv.Bytes)/2] ^= 0x01
		}
	}
	return err
}

func TestRunWorkloadsDetectsCorruption(t *testing.T) {
	const scale = 0.04 // allgatherv-cuts: 2 timed repetitions; sddp-iteration: 1
	cases := []struct {
		workload string
		call     int    // the corrupted Allgatherv
		buffer   string // where the mismatch is reported
		rep      int
	}{
		{"allgatherv-cuts", 2, "recv", 1},
		// sddp-iteration: 120 allgathervs per repetition (trial + 119
		// cuts); call 131 is cut 9 of repetition 1 (call 121 is its trial).
		{"sddp-iteration", 131, "cut 9 recv", 1},
	}
	for _, size := range []int{1, 4} {
		for _, tc := range cases {
			t.Run(fmt.Sprintf("ranks=%d/workload=%s", size, tc.workload), func(t *testing.T) {
				ws, err := selectWorkloads(tc.workload)
				require.NoError(t, err)
				victim := size / 2 // rank 0 with 1 rank, rank 2 with 4
				var comms []comm.Communicator
				ctx := context.Background()
				if size == 1 {
					comms = []comm.Communicator{comm.NewLocal()}
				} else {
					ctx, comms = startStar(t, size)
				}
				wrap := func(rank int, c comm.Communicator) comm.Communicator {
					if rank == victim {
						return &flipComm{Communicator: c, call: tc.call}
					}
					return c
				}
				_, errs := runAllRanks(ctx, comms, wrap, ws, scale)

				var ve *verifyError
				require.ErrorAs(t, errs[victim], &ve)
				assert.Equal(t, tc.workload, ve.Workload)
				assert.Equal(t, victim, ve.Rank)
				assert.Equal(t, tc.rep, ve.Rep)
				assert.Equal(t, tc.buffer, ve.Buffer)
				assert.NotEqual(t, ve.Got, ve.Want)
				msg := ve.Error()
				for _, want := range []string{"workload " + tc.workload, fmt.Sprintf("rank %d", victim), ve.Got, ve.Want, fmt.Sprintf("[%d]", ve.Index)} {
					assert.Contains(t, msg, want)
				}
				assert.Equal(t, exitFailure, failureCode(victim, errs[victim]))
				for r, err := range errs {
					if r != victim && err != nil {
						// The others failed only because the victim left.
						assert.Equal(t, exitPeerFailed, failureCode(r, err), "rank %d: %v", r, err)
					}
				}
			})
		}
	}
}

func TestRunWorkloadsReportsCollectiveFailure(t *testing.T) {
	c := comm.NewLocal()
	require.NoError(t, c.Close())
	ws, err := selectWorkloads("broadcast-10KB")
	require.NoError(t, err)
	_, err = runWorkloads(context.Background(), c, ws, quickScale)
	require.ErrorIs(t, err, comm.ErrInvalidCommunicator)
	assert.Contains(t, err.Error(), "workload broadcast-10KB")
	var ve *verifyError
	assert.False(t, errors.As(err, &ve))
}

func TestChecksDetectMissingBroadcast(t *testing.T) {
	// A rank that is not the root starts from the complement of what the
	// root sends, so a broadcast that never arrives is caught.
	bc := &broadcastCase{rank: 0, root: 1, buf: make([]uint8, 16)}
	bc.fill(5)
	ve := bc.check(5)
	require.NotNil(t, ve)
	assert.Equal(t, 0, ve.Index)
}

func TestValuesAreDistinct(t *testing.T) {
	seen := map[float64]string{}
	for rep := range 3 {
		for rank := range 4 {
			for _, key := range []int{0, 1, cutValues - 1, bigValues - 1, cutsPerIter*cutValues - 1} {
				v := value(rep, rank, key)
				id := fmt.Sprintf("rep=%d rank=%d key=%d", rep, rank, key)
				require.NotContains(t, seen, v, "%s collides with %s", id, seen[v])
				require.Equal(t, v, float64(int64(v)), "%s is an exact integer", id)
				seen[v] = id
			}
		}
	}
}

// TestLateWorkloads: the late workloads are selected by name only, run a
// barrier that the last rank enters late (the slowest rank's time is at
// least the delay), and report the waiting ranks' CPU time; the standard
// workloads report none.
func TestLateWorkloads(t *testing.T) {
	all, err := selectWorkloads("")
	require.NoError(t, err)
	for _, w := range all {
		assert.False(t, w.cpu, "%s is a standard workload", w.name)
	}
	ws, err := selectWorkloads("late-1ms,barrier")
	require.NoError(t, err)
	require.Len(t, ws, 2)
	ctx, comms := startStar(t, 3)
	results, errs := runAllRanks(ctx, comms, nil, ws, 0.1)
	require.NoError(t, errors.Join(errs...))
	for r, res := range results {
		require.Len(t, res, 2, "rank %d", r)
		late, barrier := res[0], res[1]
		assert.Equal(t, "late-1ms", late.Workload)
		assert.GreaterOrEqual(t, late.Median, time.Millisecond, "rank %d: the slowest rank slept 1 ms", r)
		require.NotNil(t, late.WaitCPU, "rank %d", r)
		assert.Positive(t, *late.WaitCPU, "rank %d: waiting costs some CPU", r)
		assert.Nil(t, barrier.WaitCPU, "rank %d", r)
	}
}
