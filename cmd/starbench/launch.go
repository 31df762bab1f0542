package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/starcomm/starcomm"
	"github.com/starcomm/starcomm/internal/ranks"
)

// waitDelay bounds how long reaping a rank waits for its output pipes after
// it exited (only a process it left behind could hold them open).
const waitDelay = 2 * time.Second

// maxLine is the longest line copied whole from a rank's output; longer
// lines are split.
const maxLine = 64 << 10

// launcher starts a job of n ranks of one program on 127.0.0.1 and
// supervises it: rank 0's standard output goes to stdout, every other
// output line to stderr prefixed with "[r] ", and the first rank to fail or
// a signal on signals kills every rank (SIGKILL to its process group).
type launcher struct {
	exe     string           // program each rank runs
	args    []string         // its arguments
	n       int              // number of ranks, at least 1
	timeout float64          // COBRE_TCP_TIMEOUT_SECS; 0: not set
	env     []string         // environment the ranks start from
	stdout  io.Writer        // rank 0's standard output
	stderr  io.Writer        // everything else, and starbench's messages
	signals <-chan os.Signal // SIGINT/SIGTERM to act on; nil: none
}

// child is one started rank.
type child struct {
	id     int
	cmd    *exec.Cmd
	outs   []*prefixWriter // its prefixed output streams, flushed once it is reaped
	exited bool            // reaped; owned by run's loop
	killed bool            // starbench sent it SIGKILL; owned by run's loop
}

// exit reports that a rank has been reaped.
type exit struct {
	c   *child
	err error // from Wait: nil for exit code 0
}

// run starts the ranks, waits until every one has been reaped and returns
// starbench's exit code: 0 when all exited 0, exitFailure when one could
// not start or failed, 128+signal number after a signal.
func (l *launcher) run() int {
	errw := &ranks.SyncWriter{W: l.stderr}
	port, err := freePort()
	if err != nil {
		fmt.Fprintf(errw, "starbench: cannot pick a free port on 127.0.0.1: %v\n", err)
		return exitFailure
	}
	exits := make(chan exit, l.n)
	var children []*child
	code := exitOK
	for r := range l.n {
		c, err := l.start(r, port, errw, exits)
		if err != nil {
			fmt.Fprintf(errw, "starbench: cannot start rank %d: %v\n", r, err)
			code = exitFailure
			break
		}
		children = append(children, c)
	}

	killAll := func() {
		for _, c := range children {
			if !c.exited && !c.killed {
				c.killed = true
				killGroup(c.cmd.Process)
			}
		}
	}
	if code != exitOK {
		killAll()
	}
	var failures []exit // in the order they were reaped
	for running := len(children); running > 0; {
		select {
		case e := <-exits:
			running--
			e.c.exited = true
			for _, w := range e.c.outs {
				w.flush()
			}
			if failed(e) {
				failures = append(failures, e)
				killAll()
			}
		case sig := <-l.signals:
			if code == exitOK {
				code = 128 + signalNumber(sig)
				fmt.Fprintf(errw, "starbench: received %v; killing all ranks\n", sig)
			}
			killAll()
		}
	}
	if f, ok := primaryFailure(failures); ok && code == exitOK {
		code = exitFailure
		msg := fmt.Sprintf("starbench: rank %d failed (%v)", f.c.id, describeExit(f.c.cmd, f.err))
		if len(children) > 1 {
			msg += "; killed the other ranks"
		}
		fmt.Fprintln(errw, msg)
	}
	return code
}

// primaryFailure picks the failure to report among those reaped, in order:
// ranks starbench killed do not count, and a rank that failed on its own
// comes before one that exited with exitPeerFailed because another rank
// failed first. It reports false when no rank failed on its own accord.
func primaryFailure(failures []exit) (exit, bool) {
	var candidates []exit
	for _, f := range failures {
		if !f.c.killed || f.c.cmd.ProcessState == nil || f.c.cmd.ProcessState.Exited() {
			candidates = append(candidates, f)
		}
	}
	for _, f := range candidates {
		if ps := f.c.cmd.ProcessState; ps == nil || ps.ExitCode() != exitPeerFailed {
			return f, true
		}
	}
	if len(candidates) > 0 {
		return candidates[0], true
	}
	return exit{}, false
}

// start starts rank r and the goroutine that reaps it.
func (l *launcher) start(r, port int, errw io.Writer, exits chan<- exit) (*child, error) {
	cmd := exec.Command(l.exe, l.args...)
	cmd.Env = rankEnv(l.env, l.n, r, port, l.timeout)
	cmd.Stdin = nil // /dev/null
	prefix := "[" + strconv.Itoa(r) + "] "
	errOut := &prefixWriter{dst: errw, prefix: prefix}
	c := &child{id: r, cmd: cmd, outs: []*prefixWriter{errOut}}
	if r == 0 {
		cmd.Stdout = l.stdout
	} else {
		out := &prefixWriter{dst: errw, prefix: prefix}
		cmd.Stdout = out
		c.outs = append(c.outs, out)
	}
	cmd.Stderr = errOut
	cmd.SysProcAttr = ranks.SysProcAttr()
	cmd.WaitDelay = waitDelay
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		err := cmd.Wait()
		// Whatever the rank left in its process group dies with it.
		killGroup(cmd.Process)
		exits <- exit{c: c, err: err}
	}()
	return c, nil
}

// failed reports whether a reaped rank failed: it exited non-zero, was
// killed, or could not be waited for. A rank that exited 0 but left its
// output open past waitDelay (exec.ErrWaitDelay) did not fail.
func failed(e exit) bool {
	if e.err == nil {
		return false
	}
	ps := e.c.cmd.ProcessState
	return !(errors.Is(e.err, exec.ErrWaitDelay) && ps != nil && ps.Success())
}

// describeExit says how a reaped rank ended, e.g. "exit status 1" or
// "signal: segmentation fault".
func describeExit(cmd *exec.Cmd, err error) string {
	if cmd.ProcessState != nil {
		return cmd.ProcessState.String()
	}
	return err.Error()
}

// signalNumber returns sig's number, or SIGTERM's for a signal without one.
func signalNumber(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return int(s)
	}
	return int(syscall.SIGTERM)
}

// freePort asks the kernel for a free TCP port on 127.0.0.1 and releases
// it; another program could take it before rank 0 listens.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// rankEnv returns the environment of rank r of n: base without the
// variables starbench sets, followed by them. Unless base sets GOMAXPROCS,
// each rank gets GOMAXPROCS = max(1, CPUs / n) (see ranks.GoMaxProcs).
func rankEnv(base []string, n, r, port int, timeout float64) []string {
	set := []string{
		starcomm.EnvBackend + "=" + starcomm.BackendTCP,
		starcomm.EnvCoordinator + "=127.0.0.1",
		starcomm.EnvBindAddr + "=127.0.0.1",
		starcomm.EnvPort + "=" + strconv.Itoa(port),
		starcomm.EnvRank + "=" + strconv.Itoa(r),
		starcomm.EnvSize + "=" + strconv.Itoa(n),
	}
	if timeout > 0 {
		set = append(set, starcomm.EnvTimeoutSecs+"="+strconv.FormatFloat(timeout, 'g', -1, 64))
	}
	if kv, ok := ranks.GoMaxProcs(base, n, runtime.NumCPU()); ok {
		set = append(set, kv)
	}
	return ranks.Env(base, set...)
}

// prefixWriter copies a rank's output to dst line by line, each line
// prefixed and written with one Write. A line longer than maxLine is split.
// Errors from dst are dropped so a rank never blocks on starbench's output.
// Write is called by one goroutine at a time; flush after the last Write.
type prefixWriter struct {
	dst     io.Writer
	prefix  string
	partial []byte // the current line, without its newline
	line    []byte // scratch for one output line
}

// Write copies every complete line of b and keeps the rest for later.
func (p *prefixWriter) Write(b []byte) (int, error) {
	n := len(b)
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		end := i
		if i < 0 {
			end = len(b)
		}
		p.partial = append(p.partial, b[:end]...)
		for len(p.partial) > maxLine {
			p.emit(p.partial[:maxLine])
			p.partial = append(p.partial[:0], p.partial[maxLine:]...)
		}
		if i < 0 {
			break
		}
		p.emit(p.partial)
		p.partial = p.partial[:0]
		b = b[i+1:]
	}
	return n, nil
}

// flush writes a last line that had no newline, adding one.
func (p *prefixWriter) flush() {
	if len(p.partial) > 0 {
		p.emit(p.partial)
		p.partial = p.partial[:0]
	}
}

// emit writes one line with its prefix and a newline.
func (p *prefixWriter) emit(s []byte) {
	p.line = append(append(append(p.line[:0], p.prefix...), s...), '\n')
	_, _ = p.dst.Write(p.line)
}
