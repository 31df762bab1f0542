package starcomm_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm"
	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/internal/errfile"
	"github.com/starcomm/starcomm/testkit"
)

// shmChildMain runs this test binary as one rank of a real-process shm job
// built by starcomm.FromEnv, when the parent asked for one (see
// testkit.ShmChild).
func shmChildMain() {
	if mode := os.Getenv(testkit.ShmChildEnv); mode != "" {
		os.Exit(testkit.ShmChild(mode, starcomm.FromEnv))
	}
}

// startShm starts size ranks of a shm job as goroutines of this process
// through starcomm.New, as FromEnv would build them.
func startShm(t testing.TB, size int) []comm.Communicator {
	t.Helper()
	name := testkit.ShmName(t)
	comms := make([]comm.Communicator, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		cfg := starcomm.DefaultConfig()
		cfg.ShmName, cfg.Rank, cfg.Size = name, r, size
		wg.Go(func() { comms[r], errs[r] = starcomm.New(context.Background(), cfg) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		_ = testkit.CloseAll(comms)
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = testkit.CloseAll(comms) })
	return comms
}

// TestConformanceShm runs the conformance suite over the shm backend as
// starcomm.New builds it, every rank a goroutine (the shm package runs it
// with every rank a process).
func TestConformanceShm(t *testing.T) {
	testkit.RunConformance(t, []int{1, 2, 4, 8}, func(t testing.TB, size int) []comm.Communicator {
		return startShm(t, size)
	})
}

// reduceResults runs one allreduce of op on rank-dependent random floats
// (n of them, so that several chunks of the shm pipeline are used) on
// every rank of comms and returns each rank's result.
func reduceResults[T float64 | float32](t *testing.T, comms []comm.Communicator, n int, op comm.ReduceOp) [][]T {
	t.Helper()
	out := make([][]T, len(comms))
	errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
		src := testkit.RandomFloats(uint64(7000+c.Rank()), n)
		send, recv := make([]T, n), make([]T, n)
		for i, v := range src {
			send[i] = T(v)
		}
		if err := comm.Allreduce(context.Background(), c, send, recv, op); err != nil {
			return err
		}
		out[c.Rank()] = recv
		return nil
	})
	require.NoError(t, errors.Join(errs...))
	return out
}

func sameBitsAs[T float64 | float32](t *testing.T, what string, got, want []T) {
	t.Helper()
	require.Len(t, got, len(want), what)
	for i := range got {
		var g, w uint64
		switch v := any(got[i]).(type) {
		case float64:
			g, w = math.Float64bits(v), math.Float64bits(any(want[i]).(float64))
		case float32:
			g, w = uint64(math.Float32bits(v)), uint64(math.Float32bits(any(want[i]).(float32)))
		}
		if g != w {
			t.Fatalf("%s: element %d is %v (bits %#x), want %v (bits %#x)", what, i, got[i], g, want[i], w)
		}
	}
}

// TestShmBitIdenticalToTCP: for the same inputs, every rank of the shm
// backend gets bit for bit what every rank of the tcp backend gets (both
// reduce in rank order), for float64 and float32 sums, mins and maxes, at
// R = 2, 4, 8, over 3.2 MB (several 256 KiB chunks).
func TestShmBitIdenticalToTCP(t *testing.T) {
	const n = 400_000
	for _, size := range []int{2, 4, 8} {
		t.Run(fmt.Sprintf("ranks=%d", size), func(t *testing.T) {
			testkit.CheckGoroutines(t)
			tcpComms, err := testkit.StartStar(context.Background(), testkit.NewTCPNetwork(), size, nil)
			require.NoError(t, err)
			t.Cleanup(func() { _ = testkit.CloseAll(tcpComms) })
			shmComms := startShm(t, size)
			for _, op := range []comm.ReduceOp{comm.Sum, comm.Min, comm.Max} {
				want64 := reduceResults[float64](t, tcpComms, n, op)
				got64 := reduceResults[float64](t, shmComms, n, op)
				want32 := reduceResults[float32](t, tcpComms, n, op)
				got32 := reduceResults[float32](t, shmComms, n, op)
				for r := range size {
					sameBitsAs(t, fmt.Sprintf("float64 %v rank %d", op, r), got64[r], want64[0])
					sameBitsAs(t, fmt.Sprintf("float32 %v rank %d", op, r), got32[r], want32[0])
				}
				if op == comm.Sum {
					ref := testkit.ReduceInRankOrder(size, func(r int) []float64 { return testkit.RandomFloats(uint64(7000+r), n) })
					sameBitsAs(t, "float64 sum vs the reference", got64[0], ref)
				}
			}
		})
	}
}

// TestShmChaos runs the shm failure matrix with every rank built by
// starcomm.FromEnv from the variables a launcher sets (the shm package
// runs it through shm.New; the 10 s CPU-time cell runs there only).
func TestShmChaos(t *testing.T) {
	skipUnlessChaos(t)
	var cells []testkit.ShmCell
	for _, c := range testkit.ShmMatrix() {
		if c.Fault != testkit.ShmLongWait {
			cells = append(cells, c)
		}
	}
	testkit.RunShmMatrix(t, cells)
}

// TestShmErrorFile: SIGKILL rank 1 of a 4-rank shm job built by FromEnv:
// every survivor records, in its COBRE_ERROR_FILE, the allreduce that
// failed and rank 1 as the rank at fault, before its failing call returns.
func TestShmErrorFile(t *testing.T) {
	skipUnlessChaos(t)
	const size, victim = 4, 1
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name, dir := testkit.ShmName(t), t.TempDir()
	procs := make([]*testkit.ShmProc, size)
	for r := range size {
		procs[r] = testkit.StartShmJob(t, ctx, name, testkit.Repeat(comm.OpAllreduce, size), []int{r},
			testkit.ShmReadyEnv+"=100", errfile.Env+"="+filepath.Join(dir, "rank-"+strconv.Itoa(r)+".json"))[r]
	}
	for _, p := range procs {
		p.Await(t, ctx, "READY ")
	}
	procs[victim].Signal(t, os.Kill)
	for _, p := range procs {
		if p.Rank == victim {
			continue
		}
		res := testkit.ParseShmResult(t, p.Await(t, ctx, "RESULT "))
		testkit.AssertShmFailed(t, p, res, victim, "exited")
		p.Wait(t, ctx)
		rec, err := errfile.Read(filepath.Join(dir, "rank-"+strconv.Itoa(p.Rank)+".json"))
		require.NoError(t, err, "rank %d's record", p.Rank)
		assert.Equal(t, victim, rec.Blamed, "rank %d's record", p.Rank)
		assert.Equal(t, p.Rank, rec.Rank)
		assert.Equal(t, size, rec.Size)
		assert.Equal(t, comm.OpAllreduce, rec.Op)
		assert.Equal(t, p.PID, rec.PID)
		assert.Contains(t, rec.Message, "exited without closing")
	}
	_, err := os.Stat(filepath.Join(dir, "rank-"+strconv.Itoa(victim)+".json"))
	assert.ErrorIs(t, err, os.ErrNotExist, "the killed rank wrote nothing")
	assert.True(t, testkit.SegmentGone(name))
}
