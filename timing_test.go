package starcomm_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm"
	"github.com/starcomm/starcomm/comm"
)

// Real-time tests with real processes: every rank a separate OS process
// (this test binary re-run), over real TCP, with polling on (the default).
// They put time into healthy jobs (a late worker, a slow rank, idle links)
// and check that failed jobs blame the right rank when every process exits
// the instant it sees an error. The sleeps in the children are the
// scenario (a process starting late, a rank computing), never
// synchronisation.

// Environment of a timing child (besides envChaosChild, which selects the
// mode: timing, wronglen or panic).
const (
	envIters       = "STARCOMM_TEST_ITERS"        // collectives to run
	envComputeRank = "STARCOMM_TEST_COMPUTE_RANK" // the rank that computes before each collective
	envComputeMS   = "STARCOMM_TEST_COMPUTE_MS"   // for this long
	envLateRank    = "STARCOMM_TEST_LATE_RANK"    // the rank whose process starts late
	envLateMS      = "STARCOMM_TEST_LATE_MS"      // by this much
	envBadRank     = "STARCOMM_TEST_BAD_RANK"     // wronglen, panic, wrongcounts: the rank at fault
	envValues      = "STARCOMM_TEST_VALUES"       // wrongcounts: float64 per rank
	envWhose       = "STARCOMM_TEST_WHOSE"        // wrongcounts: the rank whose count BAD_RANK gets wrong
	envHow         = "STARCOMM_TEST_HOW"          // giveup: context or close
	envGiveUpOp    = "STARCOMM_TEST_OP"           // giveup: barrier (unset) or allgatherv (8 MiB per rank)
)

// timingModes are the chaos-child modes this file adds.
var timingModes = map[string]bool{"timing": true, "wronglen": true, "panic": true, "wrongcounts": true, "giveup": true, "closefrozen": true, "stopzero": true, "lazyzero": true, "hangthird": true}

// envInt reads an integer from the environment (def when unset).
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// timingChild runs one rank of a timing test.
//
//   - timing: ITERS rounds of allreduce, barrier, a 2 MiB allgatherv and a
//     256 KiB one (relayed after polling at 4 ranks): polled and not
//     polled collectives in turn, the compute rank
//     sleeping COMPUTE_MS before each; Close; print DONE; exit 0.
//   - wronglen: allreduce of 4 int64 in a loop; at the third, BAD_RANK
//     passes 5. The README's pattern: `defer c.Close()`, and on error the
//     process exits at once (as log.Fatal does, skipping the defer).
//   - panic: the same loop; at the third, BAD_RANK panics. The others exit
//     1 at once on their error.
//   - wrongcounts: allgathervs of VALUES float64 per rank in a loop; at the
//     third, BAD_RANK counts 8 more for rank WHOSE (its own send grows with
//     it when WHOSE is BAD_RANK), and every rank exits at once on its
//     error, like wronglen.
//   - giveup: barriers (OP=allgatherv: allgathervs of 8 MiB per rank) in
//     a loop; at the third, BAD_RANK gives up 300 ms into it (HOW: its
//     context's deadline passes, or another goroutine calls Close), and
//     COMPUTE_RANK computes COMPUTE_MS before it. Every rank exits at once
//     on its error.
//   - stopzero: a barrier, its control sessions up (if any), "READY",
//     then barriers in a loop; every rank exits at once on its error (the
//     test stops rank 0 with a signal, and resumes it once the workers
//     have exited).
//   - closefrozen: a barrier, its control sessions up, then "READY";
//     then rank 0 waits (the test stops it with a signal), and every
//     worker calls Close at once and reports its error (RESULT op=close)
//     or "DONE".
//
// A failure prints a RESULT line (see chaosReport) first.
func timingChild(mode string) int {
	switch mode {
	case "closefrozen":
		return closeFrozenChild()
	case "stopzero":
		return stopZeroChild()
	case "lazyzero":
		return lazyZeroChild()
	case "hangthird":
		return hangThirdChild()
	}
	rank := envInt("COBRE_TCP_RANK", -1)
	if rank == envInt(envLateRank, -1) {
		time.Sleep(time.Duration(envInt(envLateMS, 0)) * time.Millisecond)
	}
	ctx := context.Background()
	c, err := starcomm.FromEnv(ctx)
	if err != nil {
		os.Exit(chaosReport("start", err, 0))
	}
	defer c.Close()
	bad := envInt(envBadRank, -1)
	switch mode {
	case "timing":
		iters := envInt(envIters, 3)
		compute := time.Duration(envInt(envComputeMS, 0)) * time.Millisecond
		// An allgatherv of n float64 per rank, packed in rank order.
		gather := func(n int) func() error {
			send, recv := make([]float64, n), make([]float64, n*c.Size())
			counts, displs := make([]int, c.Size()), make([]int, c.Size())
			for r := range counts {
				counts[r], displs[r] = n, r*n
			}
			return func() error { return comm.Allgatherv(ctx, c, send, recv, counts, displs) }
		}
		// 2 MiB per rank; 256 KiB per rank, 1 MiB in all at 4 ranks:
		// relayed, its frames polled first (see package star).
		large, polledRelay := gather(1<<18), gather(1<<15)
		sum := make([]float64, 4)
		for i := range iters {
			ops := []struct {
				name string
				run  func() error
			}{
				{comm.OpAllreduce, func() error { return comm.Allreduce(ctx, c, []float64{1, 2, 3, 4}, sum, comm.Sum) }},
				{comm.OpBarrier, func() error { return c.Barrier(ctx) }},
				{comm.OpAllgatherv, large},
				{comm.OpAllgatherv, polledRelay},
			}
			for _, op := range ops {
				if rank == envInt(envComputeRank, -1) {
					time.Sleep(compute) // computing between collectives
				}
				begin := time.Now()
				if err := op.run(); err != nil {
					return chaosReport(op.name, fmt.Errorf("iteration %d: %w", i, err), time.Since(begin))
				}
			}
		}
		if err := c.Close(); err != nil {
			return chaosReport("close", err, 0)
		}
		fmt.Println("DONE")
		return 0
	case "wrongcounts":
		n, whose := envInt(envValues, 1<<10), envInt(envWhose, bad)
		for i := 1; ; i++ {
			counts, displs := make([]int, c.Size()), make([]int, c.Size())
			total := 0
			for r := range counts {
				counts[r], displs[r] = n, total
				if i == 3 && rank == bad && r == whose {
					counts[r] += 8 // the wrong count
				}
				total += counts[r]
			}
			send, recv := make([]float64, counts[rank]), make([]float64, total)
			begin := time.Now()
			if err := comm.Allgatherv(ctx, c, send, recv, counts, displs); err != nil {
				os.Exit(chaosReport(comm.OpAllgatherv, err, time.Since(begin))) // at once
			}
		}
	case "giveup":
		call := func(ctx context.Context) error { return c.Barrier(ctx) }
		opName := comm.OpBarrier
		if os.Getenv(envGiveUpOp) == comm.OpAllgatherv {
			const n = 1 << 20 // float64s: 8 MiB per rank, relayed
			send, recv := make([]float64, n), make([]float64, n*c.Size())
			counts, displs := make([]int, c.Size()), make([]int, c.Size())
			for r := range counts {
				counts[r], displs[r] = n, r*n
			}
			call = func(ctx context.Context) error { return comm.Allgatherv(ctx, c, send, recv, counts, displs) }
			opName = comm.OpAllgatherv
		}
		for i := 1; ; i++ {
			cctx := ctx
			if i == 3 && rank == bad {
				if os.Getenv(envHow) == "close" {
					stop := time.AfterFunc(300*time.Millisecond, func() { _ = c.Close() })
					defer stop.Stop()
				} else {
					var cancel context.CancelFunc
					cctx, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
					defer cancel()
				}
			}
			if i == 3 && rank == envInt(envComputeRank, -1) {
				time.Sleep(time.Duration(envInt(envComputeMS, 0)) * time.Millisecond)
			}
			begin := time.Now()
			if err := call(cctx); err != nil {
				os.Exit(chaosReport(opName, fmt.Errorf("iteration %d: %w", i, err), time.Since(begin))) // at once
			}
		}
	default: // wronglen, panic
		for i := 1; ; i++ {
			n := 4
			if i == 3 && rank == bad {
				if mode == "panic" {
					panic(fmt.Sprintf("rank %d: something went wrong in its own code", rank))
				}
				n = 5 // the wrong length
			}
			send, recv := make([]int64, n), make([]int64, n)
			begin := time.Now()
			if err := comm.Allreduce(ctx, c, send, recv, comm.Sum); err != nil {
				code := chaosReport(comm.OpAllreduce, err, time.Since(begin))
				if mode == "panic" {
					code = 1
				}
				os.Exit(code) // at once: the deferred Close does not run
			}
		}
	}
}

// stopZeroChild runs one rank of the stopzero mode.
func stopZeroChild() int {
	ctx := context.Background()
	c, code := startPastBarrier(ctx)
	if c == nil {
		return code
	}
	fmt.Println("READY")
	for i := 2; ; i++ {
		begin := time.Now()
		if err := c.Barrier(ctx); err != nil {
			os.Exit(chaosReport(comm.OpBarrier, fmt.Errorf("iteration %d: %w", i, err), time.Since(begin))) // at once
		}
	}
}

// lazyZeroChild runs one rank of the lazyzero mode: a barrier, its control
// sessions up, "READY"; then rank 0 computes 1.5 collective timeouts (3 s)
// and every rank calls an allreduce of 24 MiB (streamed); every rank
// exits at once on its error.
func lazyZeroChild() int {
	ctx := context.Background()
	c, code := startPastBarrier(ctx)
	if c == nil {
		return code
	}
	fmt.Println("READY")
	if c.Rank() == 0 {
		time.Sleep(3 * time.Second)
	}
	send, recv := make([]float64, 3<<20), make([]float64, 3<<20)
	begin := time.Now()
	if err := comm.Allreduce(ctx, c, send, recv, comm.Sum); err != nil {
		os.Exit(chaosReport(comm.OpAllreduce, err, time.Since(begin))) // at once
	}
	fmt.Println("DONE")
	return 0
}

// hangThirdChild runs one rank of the hangthird mode: a barrier, its
// control sessions up, "READY"; then an allgatherv (relayed) in which rank
// 1 sends 8 MiB and the others 8 KiB: rank 1 and rank 2 call it at once,
// rank 0 computes 0.75 collective timeouts (1.5 s) first, and rank 3
// hangs (sleeps 20 s) before it. Every rank exits at once on its error.
func hangThirdChild() int {
	ctx := context.Background()
	c, code := startPastBarrier(ctx)
	if c == nil {
		return code
	}
	fmt.Println("READY")
	switch c.Rank() {
	case 0:
		time.Sleep(1500 * time.Millisecond)
	case 3:
		time.Sleep(20 * time.Second)
	}
	counts, displs := make([]int, c.Size()), make([]int, c.Size())
	total := 0
	for r := range counts {
		counts[r] = 1 << 10
		if r == 1 {
			counts[r] = 1 << 20
		}
		displs[r] = total
		total += counts[r]
	}
	send, recv := make([]float64, counts[c.Rank()]), make([]float64, total)
	begin := time.Now()
	if err := comm.Allgatherv(ctx, c, send, recv, counts, displs); err != nil {
		os.Exit(chaosReport(comm.OpAllgatherv, err, time.Since(begin))) // at once
	}
	fmt.Println("DONE")
	return 0
}

// closeFrozenChild runs one rank of the closefrozen mode.
func closeFrozenChild() int {
	c, code := startPastBarrier(context.Background())
	if c == nil {
		return code
	}
	fmt.Println("READY")
	if c.Rank() == 0 {
		time.Sleep(time.Hour) // stopped, then killed, by the test
	}
	begin := time.Now()
	if err := c.Close(); err != nil {
		return chaosReport("close", err, time.Since(begin))
	}
	fmt.Println("DONE")
	return 0
}

// timingEnv is the environment of every rank of a timing test: the
// defaults of the spec except what extra sets.
func runTiming(t *testing.T, mode string, size int, extra ...string) []*chaosProc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	return startChaos(t, ctx, repeat(mode, size), extra...)
}

// waitDone waits for every rank to print DONE and exit 0.
func waitDone(t *testing.T, procs []*chaosProc) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for _, p := range procs {
		select {
		case <-p.exited:
		case <-ctx.Done():
			t.Fatalf("watchdog: rank %d did not exit\n%s", p.rank, p.dump())
		}
	}
	for _, p := range procs {
		if code := p.state.ExitCode(); code != 0 {
			t.Errorf("rank %d exited %d\n%s", p.rank, code, p.dump())
		}
	}
}

// TestRealLateWorkerDefaults: the reported case, with the default settings
// (timeout 60 s, connect timeout 30 s): the last worker's process starts
// 12 s after the others (past the coordinator's 10 s handshake timeout, so
// nothing of the start-up may stay on the sockets). Every rank starts and
// every collective succeeds. Before the fix, the first collective failed
// after 0.05 ms with "no progress within the 1m0s timeout".
func TestRealLateWorkerDefaults(t *testing.T) {
	skipUnlessChaos(t)
	if testing.Short() {
		t.Skip("-short: a 12 s late start")
	}
	procs := runTiming(t, "timing", 4, envLateRank+"=3", envLateMS+"=12000", envIters+"=2")
	waitDone(t, procs)
}

// TestRealSlowButAliveRank: timeout 2 s, connect timeout 2 s (so the
// start-up's deadlines are 2 s too), one rank computes 1.2 s, most of the
// timeout, before every collective, for 6 s in all. Every collective
// succeeds on every rank. Before the fix, the job failed after about 2 s
// naming a healthy rank ("raw-write ... i/o timeout").
func TestRealSlowButAliveRank(t *testing.T) {
	skipUnlessChaos(t)
	procs := runTiming(t, "timing", 4, "COBRE_TCP_TIMEOUT_SECS=2", "COBRE_TCP_CONNECT_TIMEOUT_MS=2000",
		envComputeRank+"=2", envComputeMS+"=1200", envIters+"=2")
	waitDone(t, procs)
}

// TestRealImmediateExitBlame: rank 2 passes a wrong length to allreduce,
// and every rank exits the instant its collective fails, without Close
// (the README's `defer c.Close()` ... `log.Fatal(err)` pattern). Every
// survivor names rank 2: the coordinator's Aborts are handed to the
// system before its failing collective returns. Before the fix, the
// workers reported "allreduce failed (rank 0): ... EOF".
func TestRealImmediateExitBlame(t *testing.T) {
	skipUnlessChaos(t)
	for run := range 5 {
		t.Run(fmt.Sprintf("run=%d", run), func(t *testing.T) {
			ctx := chaosWatchdog(t)
			procs := startChaos(t, ctx, repeat("wronglen", 4), envBadRank+"=2", "COBRE_TCP_TIMEOUT_SECS=60")
			for _, p := range procs {
				res := parseResult(t, p.await(t, ctx, "RESULT "))
				t.Logf("rank=%d type=%s named=%s msg=%q", p.rank, res.fields["type"], res.fields["rank"], res.msg)
				switch p.rank {
				case 2: // the rank at fault: its own error
				case 0: // it saw the frame: a length mismatch (InvalidBufferSize)
					assert.Equal(t, "InvalidBufferSize", res.fields["type"], res.msg)
					assert.Contains(t, res.msg, "frame from rank 2")
				default:
					assertFailedNaming(t, p, res, 2)
				}
			}
			for _, p := range procs {
				assert.Equal(t, chaosExitExpected, p.wait(t, ctx), "rank %d exit\n%s", p.rank, p.dump())
			}
		})
	}
}

// TestRealGiveUpAfterPart: rank 1 has sent its part of a barrier when it
// gives up on it, 300 ms in (its context's deadline, or Close from another
// goroutine), while rank 2 computes for 3 s before it; every rank exits
// the instant it sees an error. Rank 0 fails at once naming rank 1, and
// rank 2 as soon as it calls the barrier, within the same barrier. Before
// rank 1 told rank 0 on the control session, rank 0 read its Abort only
// with its next frame: the barrier waited for rank 2 and succeeded on
// ranks 0 and 2, and rank 1, gone, was named at the next one.
//
// In the allgatherv of 8 MiB per rank (relayed), rank 1's own part is
// still queued in its socket when it gives up: its call returns without
// waiting for its data link's Abort, queued behind that part, to go out
// (it used to wait the whole 200 ms for it), since rank 0 knows already.
func TestRealGiveUpAfterPart(t *testing.T) {
	skipUnlessChaos(t)
	for _, tc := range []struct{ how, op string }{{"context", comm.OpBarrier}, {"close", comm.OpBarrier}, {"context", comm.OpAllgatherv}, {"close", comm.OpAllgatherv}} {
		t.Run(tc.how+"/"+tc.op, func(t *testing.T) {
			how := tc.how
			ctx := chaosWatchdog(t)
			procs := startChaos(t, ctx, repeat("giveup", 3), envBadRank+"=1", envHow+"="+how, envGiveUpOp+"="+tc.op,
				envComputeRank+"=2", envComputeMS+"=3000", "COBRE_TCP_TIMEOUT_SECS=60")
			for _, p := range procs {
				res := parseResult(t, p.await(t, ctx, "RESULT "))
				t.Logf("rank=%d named=%s call_ms=%s msg=%q", p.rank, res.fields["rank"], res.fields["call_ms"], res.msg)
				assertFailedNaming(t, p, res, 1)
				assert.True(t, strings.HasPrefix(res.msg, "iteration 3: "), "rank %d fails in the barrier rank 1 gave up on: %s", p.rank, res.msg)
				switch p.rank {
				case 0:
					assert.Less(t, res.int(t, "call_ms"), 2000, "rank 0 learns at once, not after rank 2's 3 s")
				case 1:
					assert.Less(t, res.int(t, "call_ms"), 480, "rank 1 returns without waiting 200 ms for an Abort rank 0 does not need")
				case 2:
					assert.Less(t, res.int(t, "call_ms"), 1000, "rank 2 fails as it calls")
				}
				assert.NotContains(t, res.msg, "unresponsive")
			}
			for _, p := range procs {
				assert.Equal(t, chaosExitExpected, p.wait(t, ctx), "rank %d exit\n%s", p.rank, p.dump())
			}
		})
	}
}

// TestRealCloseCoordinatorStopped: rank 0's process is stopped (SIGSTOP)
// while the job is idle, and the workers call Close, which waits for rank
// 0's Shutdown. With the control session's liveness timeout at 2 s and the
// collective timeout at its default minute, each worker's Close fails
// within the liveness timeout (plus a heartbeat's slack) of the stop,
// naming rank 0 as unresponsive; it used to wait the whole minute ("no
// Shutdown from rank 0 within the 1m0s timeout").
func TestRealCloseCoordinatorStopped(t *testing.T) {
	skipUnlessChaos(t)
	if runtime.GOOS != "linux" || strings.HasPrefix(runtime.GOARCH, "mips") {
		t.Skipf("SIGSTOP is signal %d only on Linux (not MIPS); this is %s/%s", int(sigStop), runtime.GOOS, runtime.GOARCH)
	}
	const liveness = 2 * time.Second
	ctx := chaosWatchdog(t)
	procs := startChaos(t, ctx, repeat("closefrozen", 3), "COBRE_TCP_LIVENESS_SECS=2", "COBRE_TCP_TIMEOUT_SECS=60")
	procs[0].await(t, ctx, "READY")
	stopped := procs[0].signal(t, sigStop)
	for _, p := range procs[1:] {
		res := parseResult(t, p.await(t, ctx, "RESULT "))
		detect := res.at.Sub(stopped)
		t.Logf("rank=%d detect_ms=%.1f call_ms=%s named=%s msg=%q", p.rank, ms(detect), res.fields["call_ms"], res.fields["rank"], res.msg)
		assert.Equal(t, "close", res.fields["op"])
		assertFailedNaming(t, p, res, 0)
		assert.Equal(t, "true", res.fields["deadline"], "rank %d: %s", p.rank, res.msg)
		assert.Contains(t, res.msg, "rank 0 unresponsive", "rank %d", p.rank)
		assert.LessOrEqual(t, detect, liveness+1500*time.Millisecond, "rank %d waited past the liveness timeout", p.rank)
		assert.Equal(t, chaosExitExpected, p.wait(t, ctx), "rank %d exit\n%s", p.rank, p.dump())
	}
	procs[0].signal(t, os.Kill)
}

// TestRealCoordinatorStoppedWorkersExit: rank 0's process is stopped
// (SIGSTOP) in a loop of barriers; each worker fails, naming rank 0, and
// exits the instant it does. Rank 0, resumed once they have exited, fails
// too and names itself, in the two ways a worker finds it:
//
//   - no control sessions, a 2 s collective timeout: the workers' Aborts,
//     which its kernel took while it was stopped, are in its sockets
//     before their end. Before, a worker did not wait for its Abort to a
//     peer that had timed out to go out, and its process exited first:
//     rank 0 read a closed connection and blamed a healthy worker as
//     crashed; and rank 0, whose read deadline had passed while it was
//     stopped, failed the worker whose frame waited unread in its socket.
//   - a 2 s liveness timeout, the collective timeout a minute: the workers
//     find rank 0 unresponsive. Before, rank 0 answered that it was
//     responsive, and blamed the worker for losing contact.
func TestRealCoordinatorStoppedWorkersExit(t *testing.T) {
	skipUnlessChaos(t)
	if runtime.GOOS != "linux" || strings.HasPrefix(runtime.GOARCH, "mips") {
		t.Skipf("SIGSTOP is signal %d only on Linux (not MIPS); this is %s/%s", int(sigStop), runtime.GOOS, runtime.GOARCH)
	}
	for _, tc := range []struct {
		name, says string
		env        []string
	}{
		{"timeout", "no progress within the 2s timeout", []string{"COBRE_TCP_LIVENESS_SECS=0", "COBRE_TCP_TIMEOUT_SECS=2"}},
		{"liveness", "found rank 0 unresponsive while rank 0's process was away", []string{"COBRE_TCP_LIVENESS_SECS=2", "COBRE_TCP_TIMEOUT_SECS=60"}},
	} {
		for run := range 3 {
			t.Run(fmt.Sprintf("%s/run=%d", tc.name, run), func(t *testing.T) {
				stoppedCoordinatorBlamesItself(t, tc.says, tc.env...)
			})
		}
	}
}

// TestRealCoordinatorComputesPastStreamedAllreduce: rank 0 computes 3 s,
// 1.5 collective timeouts, before a streamed allreduce of 24 MiB per rank
// (control sessions on, liveness 10 s); the workers, whose frames wait
// unread in full sockets, fail naming rank 0 (the system gives up on their
// links to it: ETIMEDOUT, its window closed for the timeout), and exit
// at once. Rank 0 must name itself too, as the README says of a rank 0
// that computes past the timeout, not a healthy worker "crashed".
func TestRealCoordinatorComputesPastStreamedAllreduce(t *testing.T) {
	skipUnlessChaos(t)
	for run := range 3 {
		t.Run(fmt.Sprintf("run=%d", run), func(t *testing.T) {
			ctx := chaosWatchdog(t)
			procs := startChaos(t, ctx, repeat("lazyzero", 4), "COBRE_TCP_LIVENESS_SECS=10", "COBRE_TCP_TIMEOUT_SECS=2")
			for _, p := range procs[1:] {
				res := parseResult(t, p.await(t, ctx, "RESULT "))
				t.Logf("rank=%d named=%s call_ms=%s msg=%q", p.rank, res.fields["rank"], res.fields["call_ms"], res.msg)
				assertFailedNaming(t, p, res, 0)
			}
			res := parseResult(t, procs[0].await(t, ctx, "RESULT "))
			t.Logf("rank=0 named=%s msg=%q", res.fields["rank"], res.msg)
			assertFailedNaming(t, procs[0], res, 0)
			assert.NotContains(t, res.msg, "crashed")
			assertSurvivorsExit(t, ctx, procs, -1)
		})
	}
}

// TestRealThirdRankHangsInRelay: a relayed allgatherv in which rank 3
// hangs before sending its header, rank 1 (8 MiB) and rank 2 (8 KiB)
// arrive at once and rank 0 0.75 timeouts later. Rank 0, which waits for
// every header before it reads the frames, times out on rank 3 a timeout
// after its own arrival, and names it; rank 1's system gives up on its
// link first (ETIMEDOUT, its frame unread for the timeout), which rank 1
// cannot help. Ranks 0 and 2 must still name rank 3, the rank that hung.
func TestRealThirdRankHangsInRelay(t *testing.T) {
	skipUnlessChaos(t)
	for run := range 2 {
		t.Run(fmt.Sprintf("run=%d", run), func(t *testing.T) {
			ctx := chaosWatchdog(t)
			procs := startChaos(t, ctx, repeat("hangthird", 4), "COBRE_TCP_LIVENESS_SECS=10", "COBRE_TCP_TIMEOUT_SECS=2")
			for _, r := range []int{1, 2, 0} {
				p := procs[r]
				res := parseResult(t, p.await(t, ctx, "RESULT "))
				t.Logf("rank=%d named=%s call_ms=%s msg=%q", p.rank, res.fields["rank"], res.fields["call_ms"], res.msg)
				if r != 1 {
					assertFailedNaming(t, p, res, 3)
				}
			}
		})
	}
}

// stoppedCoordinatorBlamesItself runs one case of
// TestRealCoordinatorStoppedWorkersExit: rank 0's error must say says.
func stoppedCoordinatorBlamesItself(t *testing.T, says string, env ...string) {
	{
		{
			ctx := chaosWatchdog(t)
			procs := startChaos(t, ctx, repeat("stopzero", 3), env...)
			procs[0].await(t, ctx, "READY")
			procs[0].signal(t, sigStop)
			for _, p := range procs[1:] {
				res := parseResult(t, p.await(t, ctx, "RESULT "))
				t.Logf("rank=%d named=%s call_ms=%s msg=%q", p.rank, res.fields["rank"], res.fields["call_ms"], res.msg)
				assertFailedNaming(t, p, res, 0)
				assert.Equal(t, chaosExitExpected, p.wait(t, ctx), "rank %d exit\n%s", p.rank, p.dump())
			}
			procs[0].signal(t, sigCont)
			res := parseResult(t, procs[0].await(t, ctx, "RESULT "))
			t.Logf("rank=0 named=%s msg=%q", res.fields["rank"], res.msg)
			assertFailedNaming(t, procs[0], res, 0)
			assert.Contains(t, res.msg, says, "rank 0 reports what the worker found")
			assert.NotContains(t, res.msg, "closed by the peer")
			assert.Equal(t, chaosExitExpected, procs[0].wait(t, ctx), "rank 0 exit\n%s", procs[0].dump())
		}
	}
}

// starrunOnce builds cmd/starrun once for the tests.
var starrunOnce struct {
	sync.Once
	path string
	err  error
}

func starrunPath(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build starrun with")
	}
	starrunOnce.Do(func() {
		dir, err := os.MkdirTemp("", "starcomm-starrun-")
		if err != nil {
			starrunOnce.err = err
			return
		}
		starrunOnce.path = filepath.Join(dir, "starrun")
		if out, err := exec.Command(goTool, "build", "-o", starrunOnce.path, "./cmd/starrun").CombinedOutput(); err != nil {
			starrunOnce.err = fmt.Errorf("go build ./cmd/starrun: %v\n%s", err, out)
		}
	})
	require.NoError(t, starrunOnce.err)
	return starrunOnce.path
}

// TestStarrunNamesPanickingRank: a real 4-rank job under starrun, every
// rank using starcomm over TCP (and, in the second subtest, the shm
// backend, starrun --backend shm); rank 2 panics in its own code in the
// middle of a loop of allreduces, the others fail at once (blaming rank 2,
// which they record in COBRE_ERROR_FILE) and exit 1. Whichever rank exits
// first, starrun names rank 2 as the root cause and exits with its code
// (2, a Go panic), in every one of 20 runs.
func TestStarrunNamesPanickingRank(t *testing.T) {
	skipUnlessChaos(t)
	bin := starrunPath(t)
	self, err := os.Executable()
	require.NoError(t, err)
	summary := regexp.MustCompile(`starrun: rank (\d+) \(pid \d+\) ([^:]*): root cause`)
	for _, backend := range []string{"tcp", "shm"} {
		t.Run("backend="+backend, func(t *testing.T) {
			if backend == "shm" && runtime.GOOS != "linux" {
				t.Skipf("the shm backend needs Linux; this is %s", runtime.GOOS)
			}
			firstExit := map[string]int{}
			for run := range 20 {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				cmd := exec.CommandContext(ctx, bin, "-n", "4", "--backend", backend, "--", self)
				cmd.Env = append(os.Environ(), envChaosChild+"=panic", envBadRank+"=2", "GORACE=atexit_sleep_ms=0")
				var stderr strings.Builder
				cmd.Stderr = &stderr
				err := cmd.Run()
				cancel()
				var ee *exec.ExitError
				require.True(t, errors.As(err, &ee), "run %d: starrun: %v\n%s", run, err, stderr.String())
				lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
				last := lines[len(lines)-1]
				m := summary.FindStringSubmatch(last)
				if assert.NotNil(t, m, "run %d: last line %q\n%s", run, last, stderr.String()) {
					assert.Equal(t, "2", m[1], "run %d names the wrong rank: %s", run, last)
				}
				assert.Contains(t, last, "blamed by ranks 0, 1, 3", "run %d: the error records", run)
				assert.Equal(t, 2, ee.ExitCode(), "run %d: starrun's exit code\n%s", run, stderr.String())
				for _, l := range lines {
					if strings.Contains(l, "; stopping the other ranks") {
						if f := regexp.MustCompile(`rank (\d+)`).FindStringSubmatch(l); f != nil {
							firstExit[f[1]]++
						}
						break
					}
				}
			}
			t.Logf("first rank to exit, over 20 runs: %v", firstExit)
		})
	}
}

// TestRealImmediateExitLargeFrames: like TestRealImmediateExitBlame, with
// frames large enough to go out with their headers spliced apart and to be
// left partly unread by a process that exits at once (its socket then
// resets the connection): allgathervs of 200 KB per rank (polled, each
// reply 800 KB), of 2 MiB per rank (relayed) and of 8 MiB per rank
// (relayed; rank 2's own region no longer fits in the socket buffers, so
// its tail is still unsent when rank 2 fails). Rank 2 counts 8 values
// too many, for itself (its frame is too long: rank 0 sees it) or for
// rank 1 (rank 0's reply is too short for it: rank 2 sees it, while rank 0
// is still writing the replies). The rank that sees the wrong length gets
// InvalidBufferSize naming the frame; every other rank, the one at fault
// included, CollectiveFailed naming the sender of that frame (rank 2, or
// rank 0 as seen by rank 2: a worker cannot tell whose counts are wrong),
// in every run: the Aborts reach them before the resets do. Without the
// relay's late last words (coordinator.lastWordsAfterRead), rank 0 named
// rank 2 with a broken pipe in 5 of 30 runs of the 2 MiB case; without
// the wait for the Abort to be sent (link.awaitUnsent), rank 2's
// Abort was lost in 3 of 40 runs of the 8 MiB case (0 of 80 with it).
func TestRealImmediateExitLargeFrames(t *testing.T) {
	skipUnlessChaos(t)
	for _, values := range []int{25_000, 1 << 18, 1 << 20} {
		for _, whose := range []int{2, 1} {
			t.Run(fmt.Sprintf("values=%d/whose=%d", values, whose), func(t *testing.T) {
				for run := range 5 {
					ctx := chaosWatchdog(t)
					procs := startChaos(t, ctx, repeat("wrongcounts", 4), envBadRank+"=2",
						envValues+"="+strconv.Itoa(values), envWhose+"="+strconv.Itoa(whose), "COBRE_TCP_TIMEOUT_SECS=60")
					seer, frame, blamed := 0, "AllgathervSend frame from rank 2", 2
					if whose != 2 {
						seer, frame, blamed = 2, "AllgathervRecv frame from rank 0", 0
					}
					for _, p := range procs {
						res := parseResult(t, p.await(t, ctx, "RESULT "))
						t.Logf("run=%d rank=%d type=%s named=%s ms=%s msg=%q", run, p.rank, res.fields["type"], res.fields["rank"], res.fields["call_ms"], res.msg)
						if p.rank == seer {
							assert.Equal(t, "InvalidBufferSize", res.fields["type"], res.msg)
							assert.Contains(t, res.msg, frame)
							continue
						}
						assertFailedNaming(t, p, res, blamed)
						assert.Contains(t, res.msg, frame, "rank %d", p.rank)
					}
					for _, p := range procs {
						assert.Equal(t, chaosExitExpected, p.wait(t, ctx), "rank %d exit\n%s", p.rank, p.dump())
					}
				}
			})
		}
	}
}
