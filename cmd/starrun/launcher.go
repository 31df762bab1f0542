package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/starcomm/starcomm/internal/ranks"
)

// drainTimeout bounds how long starrun waits, after every rank has exited,
// for their output pipes to reach end of file. Only a process that left its
// rank's process group can keep a pipe open that long; starrun then closes
// its end and stops copying.
const drainTimeout = 2 * time.Second

// Launcher runs starrun jobs: it starts the ranks, copies their prefixed
// output, and stops them all when one fails or a signal arrives. The zero
// value is not usable: Stdout and Stderr must be set.
type Launcher struct {
	// Stdout receives the ranks' standard output, each line prefixed.
	Stdout io.Writer
	// Stderr receives the ranks' standard error, each line prefixed, and
	// starrun's own messages.
	Stderr io.Writer
	// Env is the environment every rank starts from; nil means os.Environ().
	Env []string
	// Signals delivers the signals to forward to the ranks (SIGINT and
	// SIGTERM); nil means none.
	Signals <-chan os.Signal
}

// Run runs one job described by args (a command line without the program
// name) and returns starrun's exit code. It returns only after every rank
// has been reaped and its output copied.
func (l *Launcher) Run(args []string) int {
	cfg, err := parseArgs(args)
	if errors.Is(err, flag.ErrHelp) {
		writeHelp(l.Stdout)
		return 0
	}
	if err != nil {
		fmt.Fprintf(l.Stderr, "starrun: %v\n%s\nrun 'starrun -h' for details\n", err, synopsis)
		return exitUsage
	}
	return l.launch(cfg)
}

// job is one running launch: its ranks, its output streams and the channel
// their exits arrive on.
type job struct {
	cfg     config
	stdout  *ranks.SyncWriter
	stderr  *ranks.SyncWriter
	signals <-chan os.Signal
	ranks   []*rank
	exits   chan exitEvent // buffered for every rank, so waiters never block
	pipes   []*os.File     // read ends of the ranks' output pipes
	copiers sync.WaitGroup // the goroutines copying the pipes
}

// launch starts the ranks of cfg, supervises them until all have exited and
// returns starrun's exit code.
func (l *Launcher) launch(cfg config) int {
	j := &job{
		cfg:     cfg,
		stdout:  &ranks.SyncWriter{W: l.Stdout},
		stderr:  &ranks.SyncWriter{W: l.Stderr},
		signals: l.Signals,
		exits:   make(chan exitEvent, cfg.n),
	}
	port := cfg.port
	if port == 0 {
		p, err := freePort(cfg.bind)
		if err != nil {
			j.stderr.Printf("starrun: cannot pick a free port: %v", err)
			return exitLaunchError
		}
		port = p
	}
	base := l.Env
	if base == nil {
		base = os.Environ()
	}

	code := 0
	for r := 0; r < cfg.n; r++ {
		if err := j.start(r, rankEnv(base, cfg, port, r)); err != nil {
			msg := fmt.Sprintf("starrun: cannot start rank %d: %v", r, err)
			if len(j.ranks) > 0 {
				msg += "; stopping the other ranks"
			}
			j.stderr.Printf("%s", msg)
			code = startCode(err)
			break
		}
	}
	code = j.supervise(code)
	j.drain()
	return code
}

// freePort asks the kernel for a free TCP port on bind (127.0.0.1 when
// bind is empty) and releases it.
func freePort(bind string) (int, error) {
	host := bind
	if host == "" {
		host = "127.0.0.1"
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// start starts rank r with environment env, the goroutines copying its
// output, and the goroutine that reaps it and reports its exit.
func (j *job) start(r int, env []string) error {
	outR, outW, err := os.Pipe()
	if err != nil {
		return err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return err
	}
	cmd := exec.Command(j.cfg.command[0], j.cfg.command[1:]...)
	cmd.Env = env
	cmd.Stdout = outW
	cmd.Stderr = errW
	cmd.SysProcAttr = ranks.SysProcAttr()
	err = cmd.Start()
	// The rank holds its own copies of the write ends; closing ours makes
	// the readers see EOF once the rank's group is gone.
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return err
	}

	rk := &rank{id: r, cmd: cmd, pid: cmd.Process.Pid}
	j.ranks = append(j.ranks, rk)
	j.pipes = append(j.pipes, outR, errR)
	prefix := "[" + strconv.Itoa(r) + "] "
	j.copiers.Add(2)
	go func() {
		defer j.copiers.Done()
		_ = copyLines(j.stdout, outR, prefix, maxLineBytes)
	}()
	go func() {
		defer j.copiers.Done()
		_ = copyLines(j.stderr, errR, prefix, maxLineBytes)
	}()
	go func() {
		err := cmd.Wait()
		// Whatever the rank left behind in its group dies with it. The
		// group id cannot have been reused: this runs right after the
		// reap, and a group with members keeps its id.
		_ = syscall.Kill(-rk.pid, syscall.SIGKILL)
		j.exits <- exitEvent{rank: rk, state: cmd.ProcessState, err: err}
	}()
	return nil
}

// supervise waits until every started rank has exited and returns starrun's
// exit code. code is non-zero when starting the ranks failed, in which case
// the started ranks are stopped at once and code is the result.
//
// The first rank to fail decides the code and stops the others; a forwarded
// signal stops all ranks and the first non-zero result after it decides.
// Stopping sends a signal to every running rank's group and SIGKILL when the
// grace period is over or a second signal arrives.
func (j *job) supervise(code int) int {
	running := len(j.ranks)
	decided := code != 0 // the exit code is fixed
	stopping := false    // the ranks have been told to stop
	var grace *time.Timer
	var graceOver <-chan time.Time
	stop := func(sig syscall.Signal) {
		stopping = true
		for _, rk := range j.ranks {
			if !rk.exited {
				rk.signalGroup(sig)
			}
		}
		grace = time.NewTimer(j.cfg.grace)
		graceOver = grace.C
	}
	if decided {
		stop(syscall.SIGTERM)
	}

	for running > 0 {
		select {
		case ev := <-j.exits:
			running--
			ev.rank.exited = true
			c, what := exitStatus(ev)
			switch {
			case c == 0 || decided:
			case !stopping: // the job's first failure
				code, decided = c, true
				msg := fmt.Sprintf("starrun: rank %d (pid %d) %s", ev.rank.id, ev.rank.pid, what)
				if running > 0 {
					msg += "; stopping the other ranks"
				}
				j.stderr.Printf("%s", msg)
				stop(syscall.SIGTERM)
			default: // stopped by a forwarded signal: the first non-zero result
				code, decided = c, true
			}

		case sig := <-j.signals:
			s, ok := sig.(syscall.Signal)
			if !ok {
				s = syscall.SIGTERM
			}
			if !stopping {
				j.stderr.Printf("starrun: received %s; forwarding it to all ranks", signalName(s))
				stop(s)
			} else {
				j.stderr.Printf("starrun: received %s while stopping; killing all ranks", signalName(s))
				j.killRunning()
			}

		case <-graceOver:
			graceOver = nil
			j.stderr.Printf("starrun: grace period of %v is over; killing %s", j.cfg.grace, j.describeRunning())
			j.killRunning()
		}
	}
	if grace != nil {
		grace.Stop()
	}
	return code
}

// describeRunning names the ranks that have not exited yet, e.g. "ranks 1, 3".
func (j *job) describeRunning() string {
	var ids []string
	for _, rk := range j.ranks {
		if !rk.exited {
			ids = append(ids, strconv.Itoa(rk.id))
		}
	}
	if len(ids) == 1 {
		return "rank " + ids[0]
	}
	return "ranks " + strings.Join(ids, ", ")
}

// killRunning sends SIGKILL to every rank that has not exited yet.
func (j *job) killRunning() {
	for _, rk := range j.ranks {
		if !rk.exited {
			rk.kill()
		}
	}
}

// drain waits for the output copiers to finish, at most drainTimeout, then
// closes the pipes' read ends, which ends any copier still reading.
func (j *job) drain() {
	done := make(chan struct{})
	go func() {
		j.copiers.Wait()
		close(done)
	}()
	timer := time.NewTimer(drainTimeout)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		j.stderr.Printf("starrun: rank output still open %v after all ranks exited (held by a process outside their process groups); no longer copying it", drainTimeout)
		for _, f := range j.pipes {
			f.Close()
		}
		<-done
	}
	for _, f := range j.pipes {
		f.Close()
	}
}
