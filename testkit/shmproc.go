//go:build linux

package testkit

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/shm"
)

// Real-process jobs of the shm backend: the test binary re-run once per
// rank (its TestMain calls ShmChild when ShmChildEnv is set), each rank a
// separate OS process mapping the segment. The parent reads every child's
// standard output line by line (READY, START, RESULT, DONE lines) and
// signals children (SIGKILL, SIGSTOP) in the middle of a loop of
// collectives. The failure matrix of the shm backend (ShmMatrix) and the
// root package's chaos tests use them.

// Environment of a shm child process.
const (
	// ShmChildEnv selects the child's mode (see ShmChild).
	ShmChildEnv = "STARCOMM_TEST_SHM_CHILD"
	// ShmReadyEnv is the iteration after which the child prints
	// "READY iter=N".
	ShmReadyEnv = "STARCOMM_TEST_SHM_READY"
	// ShmUIDEnv, when set, is the user id the child switches to before it
	// starts its communicator (the permission cells run as root).
	ShmUIDEnv = "STARCOMM_TEST_SHM_UID"
	// ShmDelayEnv, when set, is how long (a Go duration) the child sleeps
	// before it starts its communicator: a rank arriving late.
	ShmDelayEnv = "STARCOMM_TEST_SHM_DELAY"
	// ShmPauseEnv, when set, is how long (a Go duration) the child sleeps
	// between start-up and its first collective: a peer late for it.
	ShmPauseEnv = "STARCOMM_TEST_SHM_PAUSE"
	// ShmStoppableEnv, when 1, makes the loop check every 16 iterations,
	// with an allreduce, whether any rank received STOP, so that every rank
	// stops after the same iteration.
	ShmStoppableEnv = "STARCOMM_TEST_SHM_STOPPABLE"
	// ShmItersEnv, when set, is the number of iterations after which the
	// child closes its communicator and exits 0 on its own.
	ShmItersEnv = "STARCOMM_TEST_SHM_ITERS"
)

// Exit codes of a shm child.
const (
	ShmExitOK       = 0
	ShmExitExpected = 3 // a collective or start-up failed with a typed comm error
	ShmExitOther    = 1 // another error, or wrong data
	ShmExitLimit    = 4 // the child's life limit passed
	ShmExitOrphan   = 5 // standard input closed without STOP: the parent is gone
)

// shmChildLimit bounds a child's life even if its parent cannot kill it.
const shmChildLimit = 2 * time.Minute

// shmChaosBytes is a rank's allgatherv contribution in the loops: 4 MiB,
// sixteen 256 KiB chunks.
const shmChaosBytes = 4 << 20

// ShmChild runs one rank of a real-process shm job and returns its exit
// code. mode is a collective (allgatherv, allreduce, broadcast, barrier:
// loop it, checking every result, until it fails, STOP arrives on standard
// input, or ShmItersEnv iterations passed) or "stall" (print BOOT and never
// start). start builds the communicator from the COBRE_* environment. The
// child prints
//
//	START replaced=BOOL call_ms=N       once started
//	READY iter=N                        after ShmReadyEnv iterations
//	DONE iters=N close=ERROR            after STOP or ShmItersEnv iterations (then exit 0)
//	RESULT op=OP type=T rank=R code=C cause=CLASS call_ms=N msg="..."
//
// and exits at once after a RESULT, without closing the communicator (as a
// program calling log.Fatal does), with ShmExitExpected for a typed comm
// error and ShmExitOther otherwise.
func ShmChild(mode string, start func(context.Context) (comm.Communicator, error)) int {
	stop := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			if sc.Text() == "STOP" {
				close(stop)
				_, _ = io.Copy(io.Discard, os.Stdin)
				break
			}
		}
		select {
		case <-stop:
			return
		default:
		}
		os.Exit(ShmExitOrphan)
	}()
	time.AfterFunc(shmChildLimit, func() {
		fmt.Printf("RESULT op=%s type=Limit rank=-1 code=-1 cause=limit call_ms=0 msg=\"\"\n", mode)
		os.Exit(ShmExitLimit)
	})
	if mode == "stall" {
		fmt.Println("BOOT")
		time.Sleep(shmChildLimit)
		return ShmExitLimit
	}
	if d, err := time.ParseDuration(os.Getenv(ShmDelayEnv)); err == nil {
		time.Sleep(d) // the scenario: this rank arrives late
	}
	if uid := os.Getenv(ShmUIDEnv); uid != "" {
		id, _ := strconv.Atoi(uid)
		if err := syscall.Setgid(id); err != nil {
			fmt.Printf("RESULT op=setuid type=Setuid rank=-1 code=-1 cause=other call_ms=0 msg=%q\n", err.Error())
			return ShmExitOther
		}
		if err := syscall.Setuid(id); err != nil {
			fmt.Printf("RESULT op=setuid type=Setuid rank=-1 code=-1 cause=other call_ms=0 msg=%q\n", err.Error())
			return ShmExitOther
		}
	}
	ctx := context.Background()
	begin := time.Now()
	c, err := start(ctx)
	if err != nil {
		return shmReport(OpStart, err, time.Since(begin))
	}
	replaced := false
	if r, ok := c.(interface{ ReplacedStale() bool }); ok {
		replaced = r.ReplacedStale()
	}
	fmt.Printf("START replaced=%t call_ms=%d\n", replaced, time.Since(begin).Milliseconds())
	step, err := shmStep(mode, c)
	if err != nil {
		fmt.Printf("RESULT op=%s type=Usage rank=-1 code=-1 cause=other call_ms=0 msg=%q\n", mode, err.Error())
		return ShmExitOther
	}
	if d, err := time.ParseDuration(os.Getenv(ShmPauseEnv)); err == nil {
		time.Sleep(d) // the scenario: this rank computes before its first collective
	}
	ready, _ := strconv.Atoi(os.Getenv(ShmReadyEnv))
	iters, _ := strconv.Atoi(os.Getenv(ShmItersEnv))
	stoppable := os.Getenv(ShmStoppableEnv) == "1"
	flag, anyFlag := make([]int32, 1), make([]int32, 1)
	for i := 1; ; i++ {
		if stoppable && i%16 == 0 {
			flag[0] = 0
			select {
			case <-stop:
				flag[0] = 1
			default:
			}
			if err := comm.Allreduce(ctx, c, flag, anyFlag, comm.Max); err != nil {
				return shmReport(mode, err, 0)
			}
			if anyFlag[0] == 1 {
				return shmDone(c, i-1)
			}
		}
		if !stoppable {
			select {
			case <-stop:
				return shmDone(c, i-1)
			default:
			}
		}
		if iters > 0 && i > iters {
			return shmDone(c, i-1)
		}
		begin := time.Now()
		if err := step(ctx, i); err != nil {
			return shmReport(mode, err, time.Since(begin))
		}
		if i == ready {
			fmt.Printf("READY iter=%d\n", i)
		}
	}
}

// OpStart is the op of a RESULT line for a failed start-up.
const OpStart = "start"

func shmDone(c comm.Communicator, iters int) int {
	err := c.Close()
	fmt.Printf("DONE iters=%d close=%v\n", iters, err)
	if err != nil {
		return ShmExitOther
	}
	return ShmExitOK
}

// shmStep returns iteration i of the loop of mode, which checks what it
// receives.
func shmStep(mode string, c comm.Communicator) (func(ctx context.Context, i int) error, error) {
	rank, size := c.Rank(), c.Size()
	switch mode {
	case comm.OpAllgatherv:
		return AllgathervStep(c, shmChaosBytes/8), nil
	case comm.OpAllreduce:
		return AllreduceStep(c, 4), nil
	case comm.OpBroadcast:
		buf := make([]uint8, 10_240)
		return func(ctx context.Context, i int) error {
			root := i % size
			for k := range buf {
				buf[k] = 0
				if rank == root {
					buf[k] = uint8(i + k)
				}
			}
			if err := comm.Broadcast(ctx, c, buf, root); err != nil {
				return err
			}
			for k := range buf {
				if buf[k] != uint8(i+k) {
					return fmt.Errorf("%w: iteration %d, byte %d is %d", ErrWrongResult, i, k, buf[k])
				}
			}
			return nil
		}, nil
	case comm.OpBarrier:
		return func(ctx context.Context, _ int) error { return c.Barrier(ctx) }, nil
	}
	return nil, fmt.Errorf("unknown %s %q", ShmChildEnv, mode)
}

// shmReport prints the RESULT line for err and returns the exit code.
func shmReport(op string, err error, d time.Duration) int {
	var (
		cf    *comm.CollectiveFailedError
		ibs   *comm.InvalidBufferSizeError
		ife   *comm.InitializationFailedError
		inUse *shm.InUseError
		miss  *shm.MissingRanksError
		typ   = fmt.Sprintf("%T", err)
		rank  = -1
		code  = -1
		exit  = ShmExitOther
	)
	switch {
	case errors.Is(err, ErrWrongResult):
		typ = "WrongResult"
	case errors.As(err, &cf):
		typ, rank, code, exit = "CollectiveFailed", cf.Rank, cf.Code, ShmExitExpected
	case errors.As(err, &ibs):
		typ, exit = "InvalidBufferSize", ShmExitExpected
	case errors.As(err, &ife):
		typ, exit = "InitializationFailed", ShmExitExpected
		var ae *shm.AbortError
		switch {
		case errors.As(err, &miss) && len(miss.Ranks) > 0:
			rank = miss.Ranks[0]
		case errors.As(err, &ae):
			rank = ae.Rank
		}
	}
	cause := "other"
	switch {
	case errors.As(err, &inUse):
		cause = "inuse"
	case errors.Is(err, os.ErrPermission):
		cause = "permission"
	case errors.As(err, &miss):
		cause = "missing"
	case errors.Is(err, shm.ErrPeerExited):
		cause = "exited"
	case errors.Is(err, os.ErrDeadlineExceeded):
		cause = "deadline"
	case errors.Is(err, shm.ErrPeerClosed):
		cause = "closed"
	case errors.Is(err, context.Canceled):
		cause = "canceled"
	}
	fmt.Printf("RESULT op=%s type=%s rank=%d code=%d cause=%s call_ms=%d msg=%q\n",
		op, typ, rank, code, cause, d.Milliseconds(), err.Error())
	return exit
}

// ShmLine is one line of a child's standard output and when the parent
// read it.
type ShmLine struct {
	Text string
	At   time.Time
}

// ShmResult is a parsed RESULT line.
type ShmResult struct {
	Fields map[string]string
	Msg    string
	At     time.Time
}

// Int returns field key as an integer, failing t if it is not one.
func (r ShmResult) Int(t testing.TB, key string) int {
	t.Helper()
	n, err := strconv.Atoi(r.Fields[key])
	require.NoError(t, err, "RESULT field %s", key)
	return n
}

// ParseShmResult parses a RESULT line.
func ParseShmResult(t testing.TB, l ShmLine) ShmResult {
	t.Helper()
	head, quoted, ok := strings.Cut(strings.TrimPrefix(l.Text, "RESULT "), " msg=")
	require.True(t, ok, "RESULT line without msg: %s", l.Text)
	msg, err := strconv.Unquote(quoted)
	require.NoError(t, err, "RESULT msg: %s", l.Text)
	res := ShmResult{Fields: map[string]string{}, Msg: msg, At: l.At}
	for _, kv := range strings.Fields(head) {
		k, v, _ := strings.Cut(kv, "=")
		res.Fields[k] = v
	}
	return res
}

// ShmProc is one child process (one rank) of a real-process job.
type ShmProc struct {
	Rank  int
	PID   int
	cmd   *exec.Cmd
	stdin *os.File
	lines chan ShmLine // stdout, line by line; closed at EOF

	mu         sync.Mutex
	transcript []string
	stderr     bytes.Buffer

	exited chan struct{}
	state  *os.ProcessState
}

// Dump returns everything the child printed, for failure messages.
func (p *ShmProc) Dump() string {
	p.mu.Lock()
	out := strings.Join(p.transcript, "\n")
	p.mu.Unlock()
	stderr := "(still running)"
	select {
	case <-p.exited:
		stderr = p.stderr.String()
	default:
	}
	return fmt.Sprintf("rank %d (pid %d) stdout:\n%s\nstderr:\n%s", p.Rank, p.PID, out, stderr)
}

// Await returns the child's next stdout line starting with prefix,
// skipping others, or fails t when the child ends its output first or ctx
// ends.
func (p *ShmProc) Await(t testing.TB, ctx context.Context, prefix string) ShmLine {
	t.Helper()
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				t.Fatalf("rank %d ended its output without a %q line\n%s", p.Rank, prefix, p.Dump())
			}
			if strings.HasPrefix(l.Text, prefix) {
				return l
			}
		case <-ctx.Done():
			t.Fatalf("watchdog: rank %d printed no %q line: %v\n%s", p.Rank, prefix, ctx.Err(), p.Dump())
		}
	}
}

// Wait waits for the child to exit and returns its exit code (-1 when a
// signal ended it).
func (p *ShmProc) Wait(t testing.TB, ctx context.Context) int {
	t.Helper()
	select {
	case <-p.exited:
		return p.state.ExitCode()
	case <-ctx.Done():
		t.Fatalf("watchdog: rank %d did not exit: %v\n%s", p.Rank, ctx.Err(), p.Dump())
		return 0
	}
}

// Signal sends sig to the child and returns when it was sent.
func (p *ShmProc) Signal(t testing.TB, sig os.Signal) time.Time {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(sig), "signal %v to rank %d", sig, p.Rank)
	return time.Now()
}

// Stop asks a looping child to close its communicator and exit (every
// rank stops after the same iteration when ShmStoppableEnv is 1). With
// ShmStoppableEnv the child may have stopped already, told by the others'
// STOP through its loop's allreduce, and exited: its standard input is
// then closed (EPIPE), which is no failure; what it printed says how it
// ended.
func (p *ShmProc) Stop(t testing.TB) {
	t.Helper()
	_, err := io.WriteString(p.stdin, "STOP\n")
	if errors.Is(err, syscall.EPIPE) {
		return
	}
	require.NoError(t, err, "STOP to rank %d", p.Rank)
}

// Rusage returns the child's resource usage once it has exited.
func (p *ShmProc) Rusage() *syscall.Rusage {
	<-p.exited
	ru, _ := p.state.SysUsage().(*syscall.Rusage)
	return ru
}

// StartShmJob starts one child per entry of modes (rank r runs modes[r])
// of a shm job named name of len(modes) ranks, with the environment a real
// job has plus env (later entries win). ranks, when not nil, lists the
// ranks to start (the others never start). Cleanup kills and reaps every
// child.
func StartShmJob(t testing.TB, ctx context.Context, name string, modes []string, ranks []int, env ...string) []*ShmProc {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	if ranks == nil {
		for r := range modes {
			ranks = append(ranks, r)
		}
	}
	procs := make([]*ShmProc, len(modes))
	for _, r := range ranks {
		p := &ShmProc{Rank: r, lines: make(chan ShmLine, 256), exited: make(chan struct{})}
		cmd := exec.CommandContext(ctx, exe)
		cmd.Env = append(os.Environ(),
			ShmChildEnv+"="+modes[r],
			"COBRE_COMM_BACKEND=shm", "COBRE_SHM_NAME="+name,
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
		p.cmd, p.PID, p.stdin = cmd, cmd.Process.Pid, inW
		procs[r] = p
		go func() {
			defer close(p.lines)
			defer outR.Close()
			sc := bufio.NewScanner(outR)
			for sc.Scan() {
				l := ShmLine{Text: sc.Text(), At: time.Now()}
				p.mu.Lock()
				p.transcript = append(p.transcript, l.Text)
				p.mu.Unlock()
				select {
				case p.lines <- l:
				default:
				}
			}
		}()
		go func() {
			_ = cmd.Wait()
			p.state = cmd.ProcessState
			close(p.exited)
		}()
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			<-p.exited
			_ = inW.Close()
		})
	}
	return procs
}

// Repeat returns n copies of s.
func Repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}
