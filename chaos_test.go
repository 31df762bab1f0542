package starcomm_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm"
	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/star"
	"github.com/starcomm/starcomm/testkit"
)

// Chaos tests: every rank is a separate OS process (this test binary re-run
// by TestMain) talking real TCP on 127.0.0.1, and the parent crashes
// (SIGKILL) or hangs (SIGSTOP) one of them in the middle of a loop of
// collectives. Each surviving child prints one machine-readable RESULT line
// describing the error its collective returned; the parent reads every
// child's stdout through a pipe, line by line, and measures detection as the
// time from the signal to each RESULT line.

// Environment of a chaos child process.
const (
	// envChaosChild selects the child's workload: allgatherv, allreduce or
	// barrier (a loop of that collective until it fails), or stall (print
	// BOOT and never start the communicator).
	envChaosChild = "STARCOMM_TEST_CHAOS_CHILD"
	// envChaosReady is the number of completed iterations after which the
	// child prints "READY iter=N", so the parent knows it is mid-loop.
	envChaosReady = "STARCOMM_TEST_CHAOS_READY"
	// envChaosSessions, when set, is how many control sessions rank 0
	// waits for before READY (default: one per worker).
	envChaosSessions = "STARCOMM_TEST_CHAOS_SESSIONS"
	// envChaosIters, when set, makes the child print "ITER N" after each
	// completed iteration N.
	envChaosIters = "STARCOMM_TEST_CHAOS_ITERS"
	// envChaosComputeMS and envChaosComputeRank, when both set, make that
	// rank compute (sleep) that many milliseconds before each collective
	// of a streamed or relayed chaos step (modeStreamed, modeGatherReduce,
	// modeGatherBigReduce).
	envChaosComputeMS   = "STARCOMM_TEST_CHAOS_COMPUTE_MS"
	envChaosComputeRank = "STARCOMM_TEST_CHAOS_COMPUTE_RANK"
)

// Exit codes of a chaos child.
const (
	chaosExitExpected = 3 // the collective (or start-up) failed with a typed comm error
	chaosExitOther    = 1 // another error, or wrong data
	chaosExitLimit    = 4 // chaosChildLimit passed
	chaosExitOrphan   = 5 // stdin closed: the parent is gone
)

// chaosChildLimit bounds a child's life even if its parent cannot kill it.
const chaosChildLimit = 2 * time.Minute

// chaosBytes is the allgatherv payload of each rank.
const chaosBytes = 4 << 20

// SIGSTOP and SIGCONT by number, so that this file compiles on every
// platform (Windows has neither name). These are the Linux numbers on every
// architecture but MIPS; the test that uses them runs only there.
const (
	sigStop = syscall.Signal(19)
	sigCont = syscall.Signal(18)
)

// chaosChild runs one rank of a chaos test: it builds its communicator from
// the environment, loops the collective named by mode until it fails, and
// prints a RESULT line for the failure (see chaosReport).
func chaosChild(mode string) int {
	// Never outlive the parent: it holds the write end of stdin, which
	// closes when it exits however it exits. A stopped child cannot read
	// it, so the limit backs it up.
	if mode != "panic" { // (under starrun, stdin is not the test's pipe)
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			os.Exit(chaosExitOrphan)
		}()
	}
	time.AfterFunc(chaosChildLimit, func() {
		fmt.Printf("RESULT op=%s type=Limit\n", mode)
		os.Exit(chaosExitLimit)
	})
	if timingModes[mode] {
		return timingChild(mode)
	}
	if mode == "slow" {
		return slowChild()
	}
	if mode == "idle" {
		return idleChild()
	}
	if mode == "ahead" {
		return aheadChild()
	}
	if mode == "authjob" {
		return authJobChild()
	}
	if mode == "stall" {
		fmt.Println("BOOT")
		time.Sleep(chaosChildLimit)
		return chaosExitLimit
	}
	ctx := context.Background()
	begin := time.Now()
	cfg, err := starcomm.ConfigFromEnv()
	if err != nil {
		return chaosReport("start", err, time.Since(begin))
	}
	// With a liveness timeout set (not 0, off), READY also waits for this rank's
	// control sessions: liveness covers a rank from the moment its session
	// is up (on a loaded host that can take longer than the first
	// iterations), and these jobs test what it does from then on.
	sessions := sessionsUp(&cfg, os.Getenv(starcomm.EnvLivenessSecs) != "" && cfg.Liveness > 0)
	c, err := starcomm.New(ctx, cfg)
	if err != nil {
		return chaosReport("start", err, time.Since(begin))
	}
	defer c.Close()
	step, err := chaosStep(mode, c)
	if err != nil {
		return chaosReport(mode, err, 0)
	}
	ready, _ := strconv.Atoi(os.Getenv(envChaosReady))
	iters := os.Getenv(envChaosIters) != ""
	printed := false
	for i := 1; ; i++ {
		begin := time.Now()
		if err := step(ctx, i); err != nil {
			return chaosReport(mode, err, time.Since(begin))
		}
		if iters {
			fmt.Printf("ITER %d ms=%d\n", i, time.Since(begin).Milliseconds())
		}
		if !printed && ready > 0 && i >= ready && sessions() {
			fmt.Printf("READY iter=%d\n", i)
			printed = true
		}
	}
}

// sessionsUp, when wait is set, makes cfg log to a handler that counts the
// control sessions that come up (one on a worker, one per worker on rank
// 0), and returns whether all of them are; otherwise it returns a function
// that always says so.
func sessionsUp(cfg *starcomm.Config, wait bool) func() bool {
	if !wait {
		return func() bool { return true }
	}
	want := int64(1)
	if cfg.Rank == 0 {
		want = int64(cfg.Size - 1)
		if n, err := strconv.Atoi(os.Getenv(envChaosSessions)); err == nil {
			want = int64(n)
		}
	}
	h := &sessionCounter{}
	cfg.Logger = slog.New(h)
	return func() bool { return h.up.Load() >= want }
}

// sessionCounter is a slog.Handler that counts "control session up"
// records and drops every record.
type sessionCounter struct{ up atomic.Int64 }

func (h *sessionCounter) Enabled(context.Context, slog.Level) bool { return true }

func (h *sessionCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "control session up" {
		h.up.Add(1)
	}
	return nil
}

func (h *sessionCounter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *sessionCounter) WithGroup(string) slog.Handler      { return h }

// modeStreamed is the chaos mode of a loop of allreduces large enough for
// rank 0 to stream them (see star's reduce.go).
const modeStreamed = "allreduce-streamed"

// modeGatherReduce is the chaos mode of a loop of relayed allgathervs,
// each followed by a small allreduce.
const modeGatherReduce = "allgatherv-allreduce"

// modeGatherBigReduce is modeGatherReduce with a 24 MiB allreduce (each
// worker's frame larger than its socket buffers) after each allgatherv.
const modeGatherBigReduce = "allgatherv-bigallreduce"

// modeGather1MiBReduce is modeGatherReduce with 1 MiB per rank (a 4 MiB
// result at R=4), for ranks whose socket buffers are small.
const modeGather1MiBReduce = "allgatherv-1mib-allreduce"

// errWrongResult is the cause when a collective returns data that is not
// what every rank sent.
var errWrongResult = testkit.ErrWrongResult

// chaosCompute is how long rank computes before each collective of its
// chaos step (see envChaosComputeMS).
func chaosCompute(rank int) time.Duration {
	ms, err1 := strconv.Atoi(os.Getenv(envChaosComputeMS))
	r, err2 := strconv.Atoi(os.Getenv(envChaosComputeRank))
	if err1 != nil || err2 != nil || r != rank {
		return 0
	}
	return time.Duration(ms) * time.Millisecond
}

// computeThen is step f after d of compute (none when d is 0).
func computeThen(d time.Duration, f func(ctx context.Context, i int) error) func(ctx context.Context, i int) error {
	if d <= 0 {
		return f
	}
	return func(ctx context.Context, i int) error {
		time.Sleep(d)
		return f(ctx, i)
	}
}

// chaosStep returns iteration i of the loop of mode, which checks what it
// receives.
func chaosStep(mode string, c comm.Communicator) (func(ctx context.Context, i int) error, error) {
	compute := chaosCompute(c.Rank())
	switch mode {
	case comm.OpAllgatherv:
		return testkit.AllgathervStep(c, chaosBytes/8), nil
	case comm.OpAllreduce:
		return testkit.AllreduceStep(c, 4), nil
	case comm.OpBarrier:
		return func(ctx context.Context, _ int) error { return c.Barrier(ctx) }, nil
	case modeStreamed:
		// 24 MiB per rank: over 4 ranks ·n is 72 MiB, so rank 0
		// streams the reduction (over 64 MiB).
		return computeThen(compute, testkit.AllreduceStep(c, 24<<20/8)), nil
	case modeGatherReduce, modeGatherBigReduce, modeGather1MiBReduce:
		// 4 MiB per rank: over 4 ranks a 16 MiB result, relayed.
		per := 4 << 20
		if mode == modeGather1MiBReduce {
			per = 1 << 20
		}
		gather, reduce := computeThen(compute, testkit.AllgathervStep(c, per/8)), computeThen(compute, testkit.AllreduceStep(c, 4))
		if mode == modeGatherBigReduce {
			reduce = computeThen(compute, testkit.AllreduceStep(c, 24<<20/8))
		}
		return func(ctx context.Context, i int) error {
			if err := gather(ctx, i); err != nil {
				return err
			}
			return reduce(ctx, i)
		}, nil
	}
	return nil, fmt.Errorf("unknown %s %q", envChaosChild, mode)
}

// chaosReport prints the RESULT line for err, which op returned after
// taking d, and returns the child's exit code:
//
//	RESULT op=allgatherv type=CollectiveFailed rank=2 code=0 deadline=false call_ms=12 msg="..."
//
// type is CollectiveFailed, InvalidBufferSize or InitializationFailed (exit
// code 3), else
// WrongResult or the Go type of err (exit code 1); rank and code are the
// CollectiveFailedError's, or for InitializationFailed the rank an Abort
// from the coordinator blames (-1 otherwise); deadline tells whether
// errors.Is(err, os.ErrDeadlineExceeded).
func chaosReport(op string, err error, d time.Duration) int {
	var (
		cf   *comm.CollectiveFailedError
		ibs  *comm.InvalidBufferSizeError
		ife  *comm.InitializationFailedError
		typ  = fmt.Sprintf("%T", err)
		rank = -1
		code = -1
		exit = chaosExitOther
	)
	switch {
	case errors.Is(err, errWrongResult):
		typ = "WrongResult"
	case errors.As(err, &cf):
		typ, rank, code, exit = "CollectiveFailed", cf.Rank, cf.Code, chaosExitExpected
	case errors.As(err, &ibs):
		typ, exit = "InvalidBufferSize", chaosExitExpected
	case errors.As(err, &ife):
		typ, exit = "InitializationFailed", chaosExitExpected
		var ab *star.AbortError
		if errors.As(err, &ab) {
			rank = ab.Rank // the rank the coordinator says never came
		}
	}
	fmt.Printf("RESULT op=%s type=%s rank=%d code=%d deadline=%t call_ms=%d msg=%q\n",
		op, typ, rank, code, errors.Is(err, os.ErrDeadlineExceeded), d.Milliseconds(), err.Error())
	return exit
}

// chaosLine is one line of a child's stdout and when the parent read it.
type chaosLine struct {
	text string
	at   time.Time
}

// chaosResult is a parsed RESULT line.
type chaosResult struct {
	fields map[string]string
	msg    string
	at     time.Time
}

func (r chaosResult) int(t *testing.T, key string) int {
	t.Helper()
	n, err := strconv.Atoi(r.fields[key])
	require.NoError(t, err, "RESULT field %s", key)
	return n
}

func parseResult(t *testing.T, l chaosLine) chaosResult {
	t.Helper()
	head, quoted, ok := strings.Cut(strings.TrimPrefix(l.text, "RESULT "), " msg=")
	require.True(t, ok, "RESULT line without msg: %s", l.text)
	msg, err := strconv.Unquote(quoted)
	require.NoError(t, err, "RESULT msg: %s", l.text)
	res := chaosResult{fields: map[string]string{}, msg: msg, at: l.at}
	for _, kv := range strings.Fields(head) {
		k, v, _ := strings.Cut(kv, "=")
		res.fields[k] = v
	}
	return res
}

// chaosProc is one child process (one rank) of a chaos job.
type chaosProc struct {
	rank  int
	pid   int
	cmd   *exec.Cmd
	lines chan chaosLine // stdout, line by line; closed at EOF

	mu         sync.Mutex
	transcript []string     // every stdout line, for failure messages
	stderr     bytes.Buffer // written by exec's copier; read after exited

	exited chan struct{} // closed once the process is reaped
	state  *os.ProcessState
}

// dump returns everything the child printed, for a failure message.
func (p *chaosProc) dump() string {
	p.mu.Lock()
	out := strings.Join(p.transcript, "\n")
	p.mu.Unlock()
	stderr := "(still running)"
	select {
	case <-p.exited:
		stderr = p.stderr.String()
	default:
	}
	return fmt.Sprintf("rank %d (pid %d) stdout:\n%s\nstderr:\n%s", p.rank, p.pid, out, stderr)
}

// reap waits, at most 5 s, for the child that the watchdog is ending
// (SIGQUIT, then SIGKILL) to be reaped, so that dump shows its stderr with
// its goroutines' stacks.
func (p *chaosProc) reap() {
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
	}
}

// await returns the child's next stdout line starting with prefix, skipping
// others, or fails the test when the child closes stdout first or ctx (the
// watchdog) ends.
func (p *chaosProc) await(t *testing.T, ctx context.Context, prefix string) chaosLine {
	t.Helper()
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				t.Fatalf("rank %d ended its output without a %q line\n%s", p.rank, prefix, p.dump())
			}
			if strings.HasPrefix(l.text, prefix) {
				return l
			}
		case <-ctx.Done():
			p.reap()
			t.Fatalf("watchdog: rank %d printed no %q line: %v\n%s", p.rank, prefix, ctx.Err(), p.dump())
		}
	}
}

// wait waits for the child to exit and returns its exit code (-1 when a
// signal ended it), or fails the test when ctx ends first.
func (p *chaosProc) wait(t *testing.T, ctx context.Context) int {
	t.Helper()
	select {
	case <-p.exited:
		return p.state.ExitCode()
	case <-ctx.Done():
		p.reap()
		t.Fatalf("watchdog: rank %d did not exit: %v\n%s", p.rank, ctx.Err(), p.dump())
		return 0
	}
}

// signal sends sig to the child and returns when it was sent.
func (p *chaosProc) signal(t *testing.T, sig os.Signal) time.Time {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(sig), "signal %v to rank %d", sig, p.rank)
	return time.Now()
}

// startChaos starts one child per entry of modes (rank r runs modes[r]) on
// a fresh port, with the environment a real job has plus env. Cleanup kills
// and reaps every child, whatever happened, and checks that none is left.
func startChaos(t *testing.T, ctx context.Context, modes []string, env ...string) []*chaosProc {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	port := freePort(t)
	return startChaosCmds(t, modes, func(r int) *exec.Cmd {
		cmd := exec.CommandContext(ctx, exe)
		cmd.Env = append(os.Environ(),
			"COBRE_COMM_BACKEND=tcp", "COBRE_TCP_COORDINATOR=127.0.0.1", "COBRE_TCP_BIND_ADDR=127.0.0.1",
			"COBRE_TCP_PORT="+strconv.Itoa(port))
		return cmd
	}, env...)
}

// startChaosCmds is startChaos with each rank's command (and its
// environment but the mode, rank, size and env) from command.
func startChaosCmds(t *testing.T, modes []string, command func(r int) *exec.Cmd, env ...string) []*chaosProc {
	t.Helper()
	procs := make([]*chaosProc, len(modes))
	for r, mode := range modes {
		p := &chaosProc{rank: r, lines: make(chan chaosLine, 256), exited: make(chan struct{})}
		cmd := command(r)
		if cmd.Cancel != nil {
			// When the watchdog ends the command, SIGQUIT first: a Go
			// child then prints every goroutine's stack on its stderr,
			// which the failure message shows (see reap); SIGKILL 3 s
			// later (a stopped child, say).
			cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGQUIT) }
			cmd.WaitDelay = 3 * time.Second
		}
		cmd.Env = append(cmd.Env,
			envChaosChild+"="+mode,
			"COBRE_TCP_RANK="+strconv.Itoa(r), "COBRE_TCP_SIZE="+strconv.Itoa(len(modes)),
			"GORACE=atexit_sleep_ms=0")
		cmd.Env = append(cmd.Env, env...)
		inR, inW, err := os.Pipe()
		require.NoError(t, err)
		outR, outW, err := os.Pipe()
		require.NoError(t, err)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, &p.stderr
		err = cmd.Start()
		_ = inR.Close()
		_ = outW.Close()
		if err != nil {
			_ = inW.Close()
			_ = outR.Close()
			require.NoError(t, err, "start rank %d", r)
		}
		p.cmd, p.pid = cmd, cmd.Process.Pid
		procs[r] = p
		go func() {
			defer close(p.lines)
			defer outR.Close()
			sc := bufio.NewScanner(outR)
			for sc.Scan() {
				l := chaosLine{text: sc.Text(), at: time.Now()}
				p.mu.Lock()
				p.transcript = append(p.transcript, l.text)
				p.mu.Unlock()
				select {
				case p.lines <- l:
				default: // nobody is listening for that many lines; the transcript has it
				}
			}
		}()
		go func() {
			_ = cmd.Wait()
			p.state = cmd.ProcessState
			close(p.exited)
		}()
		t.Cleanup(func() {
			_ = cmd.Process.Kill() // also ends a stopped process
			<-p.exited
			_ = inW.Close()
			if !processGone(p.pid) {
				t.Errorf("rank %d (pid %d) still exists after it was reaped", r, p.pid)
			}
		})
	}
	return procs
}

// processGone reports whether no process has pid: kill(pid, 0) fails with
// ESRCH (os.FindProcess opens a fresh handle, so this asks the kernel, not
// the state of the exec.Cmd that was reaped).
func processGone(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return true
	}
	defer p.Release()
	return errors.Is(p.Signal(syscall.Signal(0)), os.ErrProcessDone)
}

// chaosWatchdog returns the context that bounds one chaos test: a hang
// becomes a failure (and exec.CommandContext kills the children).
func chaosWatchdog(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func skipUnlessChaos(t *testing.T) {
	if runtime.GOOS == "windows" || runtime.GOOS == "plan9" || runtime.GOOS == "js" || runtime.GOOS == "wasip1" {
		t.Skipf("chaos tests signal child processes; not on %s", runtime.GOOS)
	}
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// assertFailedNaming checks a survivor's RESULT: CollectiveFailed, code 0,
// naming rank blamed.
func assertFailedNaming(t *testing.T, p *chaosProc, res chaosResult, blamed int) {
	t.Helper()
	assert.Equal(t, "CollectiveFailed", res.fields["type"], "rank %d: %s", p.rank, res.msg)
	assert.Equal(t, 0, res.int(t, "code"), "rank %d code", p.rank)
	assert.Equal(t, blamed, res.int(t, "rank"), "rank %d names the wrong rank: %s", p.rank, res.msg)
}

// assertSurvivorsExit checks that every rank but victim exits with the
// code of a reported, expected failure.
func assertSurvivorsExit(t *testing.T, ctx context.Context, procs []*chaosProc, victim int) {
	t.Helper()
	for _, p := range procs {
		if p.rank != victim {
			assert.Equal(t, chaosExitExpected, p.wait(t, ctx), "rank %d exit: %v\n%s", p.rank, p.state, p.dump())
		}
	}
}

// TestChaosKill crashes one rank with SIGKILL in the middle of a loop of
// collectives (among them allreduces that rank 0 streams), with the
// default-sized 60 s timeout: every survivor must fail
// with CollectiveFailed naming the killed rank, within 5 s of the kill (the
// closed sockets tell at once; the timeout must play no part), and exit.
func TestChaosKill(t *testing.T) {
	skipUnlessChaos(t)
	const size = 4
	for _, tc := range []struct {
		name   string
		op     string
		ready  int // iterations every rank completes before the kill
		victim int
	}{
		{name: "victim=2/op=allgatherv", op: comm.OpAllgatherv, ready: 3, victim: 2},
		{name: "victim=0/op=allreduce", op: comm.OpAllreduce, ready: 200, victim: 0},
		// Most of each iteration is rank 0 streaming the workers' data:
		// the kill lands there. The lowest worker holds up the others'
		// reduction; the highest one's link may wait unread for it.
		{name: "victim=1/op=allreduce-streamed", op: modeStreamed, ready: 3, victim: 1},
		{name: "victim=3/op=allreduce-streamed", op: modeStreamed, ready: 3, victim: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := chaosWatchdog(t)
			procs := startChaos(t, ctx, repeat(tc.op, size),
				"COBRE_TCP_TIMEOUT_SECS=60", envChaosReady+"="+strconv.Itoa(tc.ready))
			for _, p := range procs {
				p.await(t, ctx, "READY ")
			}
			killed := procs[tc.victim].signal(t, os.Kill)
			for _, p := range procs {
				if p.rank == tc.victim {
					continue
				}
				res := parseResult(t, p.await(t, ctx, "RESULT "))
				detect := res.at.Sub(killed)
				t.Logf("detection rank=%d ms=%.1f call_ms=%s named=%s msg=%q", p.rank, ms(detect), res.fields["call_ms"], res.fields["rank"], res.msg)
				assertFailedNaming(t, p, res, tc.victim)
				assert.Less(t, detect, 5*time.Second, "rank %d detected the kill late", p.rank)
			}
			for _, p := range procs {
				code := p.wait(t, ctx)
				if p.rank == tc.victim {
					assert.Equal(t, -1, code, "the killed rank %d: %v", p.rank, p.state)
					continue
				}
				assert.Equal(t, chaosExitExpected, code, "rank %d exit: %v\n%s", p.rank, p.state, p.dump())
			}
		})
	}
}

// TestChaosKillAfterContributing kills worker 1 (SIGKILL) once it has
// entered a barrier that still waits for worker 3, which computes for 5 s,
// with a 60 s timeout and the default 10 s liveness timeout. Once rank 0
// has worker 1's Ready it no longer reads that data link: only the control
// session's end, without the farewell of a rank that closes, tells. Ranks
// 0 and 2 fail naming rank 1 within 2 s of the kill, far before rank 3
// arrives or the liveness timeout (without the farewell rule they failed
// when rank 3 arrived); rank 3's barrier, when it comes, fails at once.
// The kill can also land between worker 1's ENTER line and its Ready
// (rank 0 then sees the data link's EOF, at once): the test logs which;
// TestChaosKillBetweenCollectives pins the control session's part.
func TestChaosKillAfterContributing(t *testing.T) {
	skipUnlessChaos(t)
	const (
		size    = 4
		victim  = 1
		compute = 5 * time.Second
	)
	ctx := chaosWatchdog(t)
	procs := startChaos(t, ctx, repeat("slow", size), "COBRE_TCP_TIMEOUT_SECS=60",
		envSlowMillis+"="+strconv.Itoa(int(compute.Milliseconds())), envSlowIters+"=1")
	for _, p := range procs[:3] {
		p.await(t, ctx, "ENTER ")
	}
	killed := procs[victim].signal(t, os.Kill)
	for _, p := range procs {
		if p.rank == victim {
			continue
		}
		res := parseResult(t, p.await(t, ctx, "RESULT "))
		detect := res.at.Sub(killed)
		t.Logf("detection rank=%d ms=%.1f call_ms=%s named=%s msg=%q", p.rank, ms(detect), res.fields["call_ms"], res.fields["rank"], res.msg)
		assertFailedNaming(t, p, res, victim)
		if !strings.Contains(res.msg, "process ended") {
			assert.Contains(t, res.msg, "connection closed by the peer", "rank %d: neither the control session's nor the data link's end", p.rank)
			t.Logf("rank %d: the kill landed before worker 1's Ready: the data link told", p.rank)
		}
		if p.rank == size-1 {
			assert.Less(t, res.int(t, "call_ms"), 500, "rank 3's barrier fails at once: %s", res.msg)
		} else {
			assert.Less(t, detect, 2*time.Second, "rank %d detected the kill late", p.rank)
		}
	}
	assertSurvivorsExit(t, ctx, procs, victim)
}

// TestChaosKillBetweenCollectives kills worker 1 (SIGKILL) between two
// barriers, while every other rank computes (rank 0 and 2 for 2 s, rank 3
// for 3 s), with a 60 s timeout and the default 10 s liveness timeout. No
// rank reads a link of rank 1 then: the control session's end without a
// farewell tells rank 0, which tells the others, so every survivor's
// second barrier fails at once naming rank 1 with "process ended" (the
// data link's EOF would say "connection closed by the peer").
func TestChaosKillBetweenCollectives(t *testing.T) {
	skipUnlessChaos(t)
	const (
		size   = 4
		victim = 1
	)
	ctx := chaosWatchdog(t)
	procs := startChaos(t, ctx, repeat("idle", size), "COBRE_TCP_TIMEOUT_SECS=60")
	for _, p := range procs {
		p.await(t, ctx, "DONE1")
	}
	killed := procs[victim].signal(t, os.Kill)
	for _, p := range procs {
		if p.rank == victim {
			continue
		}
		res := parseResult(t, p.await(t, ctx, "RESULT "))
		t.Logf("rank=%d after the kill ms=%.1f call_ms=%s named=%s msg=%q", p.rank, ms(res.at.Sub(killed)), res.fields["call_ms"], res.fields["rank"], res.msg)
		assertFailedNaming(t, p, res, victim)
		assert.Contains(t, res.msg, "process ended", "rank %d learnt it from the control session", p.rank)
		assert.Less(t, res.int(t, "call_ms"), 500, "rank %d's barrier fails at once: %s", p.rank, res.msg)
	}
	assertSurvivorsExit(t, ctx, procs, victim)
}

// TestChaosRootExitsAhead: worker 1 is the root of a 64 KiB broadcast,
// and exits (os.Exit, no Close) the moment its call returns, while the
// others still compute for a second (liveness 10 s, timeout 60 s). Its
// bytes wait whole in rank 0's socket, and its control connection ends
// without a farewell. Every other rank's broadcast must still succeed
// with the root's bytes, and only their next barrier fail, naming rank 1.
// (Taking the end of the root's control session for a crash at once
// failed the broadcast itself.)
func TestChaosRootExitsAhead(t *testing.T) {
	skipUnlessChaos(t)
	const (
		size = 4
		root = 1
	)
	ctx := chaosWatchdog(t)
	procs := startChaos(t, ctx, repeat("ahead", size), "COBRE_TCP_TIMEOUT_SECS=60")
	for _, p := range procs {
		if p.rank == root {
			continue
		}
		p.await(t, ctx, "BROADCAST ok")
		res := parseResult(t, p.await(t, ctx, "RESULT "))
		t.Logf("rank=%d op=%s call_ms=%s named=%s msg=%q", p.rank, res.fields["op"], res.fields["call_ms"], res.fields["rank"], res.msg)
		assert.Equal(t, "barrier", res.fields["op"], "rank %d: the broadcast succeeded, the barrier after it failed", p.rank)
		assertFailedNaming(t, p, res, root)
		assert.Less(t, res.int(t, "call_ms"), 500, "rank %d's barrier fails at once: %s", p.rank, res.msg)
	}
	for _, p := range procs {
		want := chaosExitExpected
		if p.rank == root {
			want = 0
		}
		assert.Equal(t, want, p.wait(t, ctx), "rank %d exit: %v\n%s", p.rank, p.state, p.dump())
	}
}

// aheadChild runs one rank of the ahead mode: a barrier, once the control
// sessions are up; then rank 1 broadcasts 64 KiB and exits at once, and
// every other rank computes for a second, receives the broadcast, checks
// it ("BROADCAST ok", or a WrongResult), and reports the failure of the
// barrier after it (RESULT), or "DONE".
func aheadChild() int {
	ctx := context.Background()
	c, code := startPastBarrier(ctx)
	if c == nil {
		return code
	}
	defer c.Close()
	want := make([]byte, 64<<10)
	for i := range want {
		want[i] = byte(i*31 + 7)
	}
	if c.Rank() == 1 {
		if err := comm.Broadcast(ctx, c, want, 1); err != nil {
			return chaosReport("broadcast", err, 0)
		}
		os.Exit(0)
	}
	time.Sleep(time.Second)
	got := make([]byte, len(want))
	if err := comm.Broadcast(ctx, c, got, 1); err != nil {
		return chaosReport("broadcast", err, 0)
	}
	if !bytes.Equal(got, want) {
		return chaosReport("broadcast", errWrongResult, 0)
	}
	fmt.Println("BROADCAST ok")
	begin := time.Now()
	if err := c.Barrier(ctx); err != nil {
		return chaosReport("barrier", err, time.Since(begin))
	}
	fmt.Println("DONE")
	return 0
}

// startWatched builds a child's communicator from the environment and
// returns it with a function that waits until its control sessions are up
// (at once when liveness is off); on failure, nil and the exit code of the
// RESULT line it printed.
func startWatched(ctx context.Context) (comm.Communicator, func(), int) {
	cfg, err := starcomm.ConfigFromEnv()
	if err != nil {
		return nil, nil, chaosReport("start", err, 0)
	}
	sessions := sessionsUp(&cfg, cfg.Liveness > 0)
	c, err := starcomm.New(ctx, cfg)
	if err != nil {
		return nil, nil, chaosReport("start", err, 0)
	}
	return c, func() {
		for !sessions() {
			time.Sleep(time.Millisecond)
		}
	}, 0
}

// startPastBarrier starts a child's communicator (see startWatched), runs
// a first barrier and waits for its control sessions; on failure, nil and
// the exit code of the RESULT line it printed (the communicator closed).
func startPastBarrier(ctx context.Context) (comm.Communicator, int) {
	c, awaitSessions, code := startWatched(ctx)
	if c == nil {
		return nil, code
	}
	if err := c.Barrier(ctx); err != nil {
		code := chaosReport("barrier", err, 0)
		_ = c.Close()
		return nil, code
	}
	awaitSessions()
	return c, 0
}

// idleChild runs one rank of the idle mode: a barrier, "DONE1" once its
// control sessions are up, then 2 s of sleep (3 s on the last rank) and a
// second barrier, whose failure it reports (RESULT), or "DONE2".
func idleChild() int {
	ctx := context.Background()
	c, code := startPastBarrier(ctx)
	if c == nil {
		return code
	}
	defer c.Close()
	fmt.Println("DONE1")
	pause := 2 * time.Second
	if c.Rank() == c.Size()-1 {
		pause = 3 * time.Second
	}
	time.Sleep(pause)
	begin := time.Now()
	if err := c.Barrier(ctx); err != nil {
		return chaosReport("barrier", err, time.Since(begin))
	}
	fmt.Println("DONE2")
	return 0
}

// TestChaosStop hangs worker 3 with SIGSTOP while every rank loops barrier,
// with a 2 s timeout: the coordinator's read deadline fires about 2 s after
// the last barrier, and every other rank fails with CollectiveFailed naming
// rank 3 (workers through the coordinator's Abort, before their own longer
// deadline), not before about the timeout and by timeout + 1 s. Rank 3,
// resumed with SIGCONT, fails at its next read and exits too.
func TestChaosStop(t *testing.T) {
	skipUnlessChaos(t)
	if runtime.GOOS != "linux" || strings.HasPrefix(runtime.GOARCH, "mips") {
		t.Skipf("SIGSTOP is signal %d only on Linux (not MIPS); this is %s/%s", int(sigStop), runtime.GOOS, runtime.GOARCH)
	}
	const (
		size    = 4
		victim  = 3
		timeout = 2 * time.Second
	)
	ctx := chaosWatchdog(t)
	procs := startChaos(t, ctx, repeat(comm.OpBarrier, size),
		"COBRE_TCP_TIMEOUT_SECS=2", envChaosReady+"=200")
	for _, p := range procs {
		p.await(t, ctx, "READY ")
	}
	stopped := procs[victim].signal(t, sigStop)
	for _, p := range procs[:victim] {
		res := parseResult(t, p.await(t, ctx, "RESULT "))
		detect := res.at.Sub(stopped)
		t.Logf("detection rank=%d ms=%.1f call_ms=%s named=%s deadline=%s msg=%q", p.rank, ms(detect), res.fields["call_ms"], res.fields["rank"], res.fields["deadline"], res.msg)
		assertFailedNaming(t, p, res, victim)
		assert.GreaterOrEqual(t, detect, timeout*3/4, "rank %d failed before the timeout", p.rank)
		assert.LessOrEqual(t, detect, timeout+1500*time.Millisecond, "rank %d detected the hang late", p.rank)
		if p.rank == 0 {
			assert.Equal(t, "true", res.fields["deadline"], "the coordinator's error must satisfy errors.Is(err, os.ErrDeadlineExceeded): %s", res.msg)
		}
	}
	procs[victim].signal(t, sigCont)
	res := parseResult(t, procs[victim].await(t, ctx, "RESULT "))
	t.Logf("resumed rank=%d type=%s named=%s deadline=%s msg=%q", victim, res.fields["type"], res.fields["rank"], res.fields["deadline"], res.msg)
	assert.Equal(t, "CollectiveFailed", res.fields["type"], "resumed rank %d: %s", victim, res.msg)
	for _, p := range procs {
		assert.Equal(t, chaosExitExpected, p.wait(t, ctx), "rank %d exit: %v\n%s", p.rank, p.state, p.dump())
	}
	for _, p := range procs {
		assert.True(t, processGone(p.pid), "rank %d (pid %d) still exists after it exited", p.rank, p.pid)
	}
}

// TestChaosStartup kills worker 3 before it ever connects: the coordinator
// fails start-up with InitializationFailed naming rank 3 once
// COBRE_TCP_CONNECT_TIMEOUT_MS (2 s) has passed, and tells workers 1 and 2,
// which registered and wait for their Ack, so that their start-up fails
// naming rank 3 too, at the same moment.
func TestChaosStartup(t *testing.T) {
	skipUnlessChaos(t)
	const (
		size           = 4
		victim         = 3
		connectTimeout = 2 * time.Second
	)
	ctx := chaosWatchdog(t)
	modes := repeat(comm.OpBarrier, size)
	modes[victim] = "stall"
	procs := startChaos(t, ctx, modes, "COBRE_TCP_TIMEOUT_SECS=60", "COBRE_TCP_CONNECT_TIMEOUT_MS=2000")
	procs[victim].await(t, ctx, "BOOT")
	procs[victim].signal(t, os.Kill)

	res := parseResult(t, procs[0].await(t, ctx, "RESULT "))
	start := time.Duration(res.int(t, "call_ms")) * time.Millisecond
	t.Logf("startup rank=0 call_ms=%d msg=%q", start.Milliseconds(), res.msg)
	assert.Equal(t, "InitializationFailed", res.fields["type"], res.msg)
	assert.Contains(t, res.msg, fmt.Sprintf("missing ranks [%d]", victim))
	assert.GreaterOrEqual(t, start, connectTimeout, "the coordinator gave up before the connect timeout")
	assert.Less(t, start, connectTimeout+time.Second, "the coordinator gave up late")
	for _, p := range procs[1:victim] {
		res := parseResult(t, p.await(t, ctx, "RESULT "))
		t.Logf("worker rank=%d type=%s named=%s call_ms=%s msg=%q", p.rank, res.fields["type"], res.fields["rank"], res.fields["call_ms"], res.msg)
		assert.Equal(t, "InitializationFailed", res.fields["type"], "rank %d: %s", p.rank, res.msg)
		assert.Equal(t, victim, res.int(t, "rank"), "rank %d names the wrong rank: %s", p.rank, res.msg)
	}
	for _, p := range procs {
		code := p.wait(t, ctx)
		if p.rank == victim {
			assert.Equal(t, -1, code, "the killed rank %d: %v", p.rank, p.state)
			continue
		}
		assert.Equal(t, chaosExitExpected, code, "rank %d exit: %v\n%s", p.rank, p.state, p.dump())
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
