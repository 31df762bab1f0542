package launch

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/internal/errfile"
	"github.com/starcomm/starcomm/shm"
	"github.com/starcomm/starcomm/star"
)

// Output chooses where the ranks' output goes.
type Output int

const (
	// PrefixAll copies every line a rank writes to the launcher's stream of
	// the same kind (standard output to Stdout, standard error to Stderr),
	// prefixed with "[r] ". This is starrun's presentation.
	PrefixAll Output = iota
	// Rank0Stdout copies rank 0's standard output to Stdout unchanged and
	// every other line (rank 0's standard error, both streams of the other
	// ranks) to Stderr prefixed with "[r] ". This is starbench's: the
	// results alone on standard output.
	Rank0Stdout
)

// Exit codes of the launcher's own failures; the others come from the
// ranks (see Result.Code).
const (
	ExitLaunchError = 1   // the job could not be set up (port, directory, pipes, fork)
	ExitCannotExec  = 126 // the command exists but could not be started
	ExitNotFound    = 127 // the command was not found
)

// The backends a job can run.
const (
	BackendTCP = "tcp"
	BackendShm = "shm"
)

// MaxRanks is the largest number of ranks a job of backend ("" is
// BackendTCP) can have: the largest communicator Size of the star
// (star.MaxSize) or of the shm backend (shm.MaxSize). A launcher refuses a
// larger job before it starts a process, instead of starting that many
// ranks that each fail on their own. 0 for an unknown backend.
func MaxRanks(backend string) int {
	switch backend {
	case "", BackendTCP:
		return star.MaxSize
	case BackendShm:
		return shm.MaxSize
	}
	return 0
}

// backendName is backend as a user names it ("" is tcp).
func backendName(backend string) string {
	if backend == "" {
		return BackendTCP
	}
	return backend
}

// DefaultGrace is the time ranks get between SIGTERM and SIGKILL when a job
// is stopped, unless Config.Grace says otherwise.
const DefaultGrace = 5 * time.Second

// DefaultSettle is the time the other ranks get to end on their own after
// the first one fails, before they are stopped, unless Config.Settle says
// otherwise: starcomm tells every rank of a failure within milliseconds,
// so they end with their own errors and codes, and a rank that panics
// finishes printing its stack trace.
const DefaultSettle = time.Second

// The range of a launcher's --timeout flag, in seconds: that of the
// variables it sets, COBRE_TCP_TIMEOUT_SECS and COBRE_SHM_TIMEOUT_SECS (1
// ms, the tcp transport's least, to a year), so that a value the ranks
// would refuse is a usage error of the launcher's.
const (
	MinTimeoutSecs = 0.001
	MaxTimeoutSecs = 31536000
	TimeoutRange   = "0.001..31536000 (1 ms to a year)"
)

// TimeoutOK reports whether secs is in MinTimeoutSecs..MaxTimeoutSecs
// (NaN is not).
func TimeoutOK(secs float64) bool { return secs >= MinTimeoutSecs && secs <= MaxTimeoutSecs }

// DefaultWaitNotice is how long after the first rank's clean exit the
// launcher, still waiting for others that neither exited nor failed, says
// which ranks it waits for, unless Config.WaitNotice says otherwise.
const DefaultWaitNotice = 10 * time.Second

// drainTimeout bounds how long the launcher waits, after every rank has
// exited, for their output pipes to reach end of file. Only a process that
// left its rank's process group can keep a pipe open that long; the
// launcher then closes its end and stops copying.
const drainTimeout = 2 * time.Second

// Config describes one job: N ranks of one command on this host.
type Config struct {
	// Name is the launcher's name, put before each of its messages
	// ("starrun: ...").
	Name string
	// Command is the program each rank runs and its arguments; not empty.
	Command []string
	// Ranks is the number of ranks, at least 1.
	Ranks int
	// Backend is the ranks' backend: "" or BackendTCP (rank 0 a TCP
	// coordinator on this host), or BackendShm (every rank maps one
	// shared-memory segment).
	Backend string
	// ShmName is the segment's name with BackendShm (COBRE_SHM_NAME); ""
	// picks one unique to the job (see the package doc).
	ShmName string
	// Port is rank 0's TCP port (COBRE_TCP_PORT); 0 picks a free one. Not
	// used with BackendShm.
	Port int
	// Timeout is the collective timeout in seconds passed as
	// COBRE_TCP_TIMEOUT_SECS (COBRE_SHM_TIMEOUT_SECS with BackendShm); 0
	// leaves the variable as inherited.
	Timeout float64
	// Bind is the address rank 0 listens on, passed as COBRE_TCP_BIND_ADDR
	// and used to pick a free port; "" means the inherited
	// COBRE_TCP_BIND_ADDR, or 127.0.0.1 without one (the ranks all run on
	// this host: nothing else may join). Workers dial it (DialHost).
	Bind string
	// Grace is the time between SIGTERM and SIGKILL when the job is
	// stopped; 0 sends SIGKILL right after SIGTERM.
	Grace time.Duration
	// Settle is how long, after the first rank fails, the others get to
	// end on their own before they are stopped (see DefaultSettle); 0
	// stops them at once.
	Settle time.Duration
	// WaitNotice is how long after the first rank exits 0 the launcher
	// waits, while other ranks still run and none has failed, before it
	// says once which ranks it is still waiting for (a rank left running
	// outside the collectives, for example); 0 never says it.
	WaitNotice time.Duration
	// Env is the environment every rank starts from; nil means
	// os.Environ().
	Env []string
	// Stdout and Stderr receive the ranks' output (see Output) and, on
	// Stderr, the launcher's messages. Both must be set. Each receives
	// whole lines, one Write per line.
	Stdout, Stderr io.Writer
	// Output is how the ranks' output is presented.
	Output Output
	// Signals delivers the signals the launcher received (see
	// StopSignals); nil means none. Each is forwarded to every rank still
	// running, a second one kills them; SIGPIPE (the launcher's output is
	// a closed pipe) stops them with SIGTERM instead, and only once.
	Signals <-chan os.Signal
	// PeerFailedCode, when not 0, is an exit code by which a rank says it
	// failed because another rank failed first. It is a hint for the blame
	// rule when no error record decides (see Blame).
	PeerFailedCode int
}

// Result is the outcome of a job.
type Result struct {
	// Code is the job's exit code:
	//   - 0 when every rank exited 0;
	//   - when a rank failed on its own, the root cause's code (its exit
	//     code, or 128+n when signal n killed it), or, when the launcher had
	//     to stop the root cause, the code of the first rank to fail;
	//   - after a forwarded signal, the first non-zero result of a rank
	//     (130 or 143 when it died from the signal), 0 if all exited 0;
	//   - ExitNotFound, ExitCannotExec or ExitLaunchError when the job could
	//     not be set up or a rank could not be started.
	Code int
	// Interrupted is the forwarded signal that stopped the job, 0 when the
	// job was not stopped by a signal (or a rank failed before it came).
	Interrupted syscall.Signal
	// SetupFailed is true when the job could not be set up or a rank could
	// not be started.
	SetupFailed bool
	// Verdict is the blame rule's conclusion when a rank failed on its own
	// (Interrupted and SetupFailed unset); nil otherwise.
	Verdict *Verdict
	// Ends are how the started ranks ended, indexed by rank.
	Ends []End
}

// job is one running launch: its ranks, its output streams and the channel
// their exits arrive on.
type job struct {
	cfg     *Config
	stdout  *SyncWriter
	stderr  *SyncWriter
	procs   []*proc
	exits   chan exitEvent // buffered for every rank, so waiters never block
	pipes   []*os.File     // read ends of the ranks' output pipes
	copiers sync.WaitGroup // the goroutines copying the pipes
	reaped  int            // ranks whose exit the supervise loop has seen
	notes   *notes         // the launcher's own messages
	giveUp  time.Time      // when a stopped job gives up on stuck output
}

// proc is one started rank process. Its fields are owned by the supervise
// loop, apart from the ones set before the waiter starts.
type proc struct {
	id        int
	cmd       *exec.Cmd
	pid       int                     // also the rank's process-group id
	exited    bool                    // its exit has been received
	sent      map[syscall.Signal]bool // signals the launcher sent it
	signalled time.Time               // when the launcher first signalled it
	end       End
	outDone   chan struct{} // closed once both its output streams are copied
}

// exitEvent reports that a rank's process has ended and been reaped.
type exitEvent struct {
	proc  *proc
	state *os.ProcessState // nil when waiting failed
	err   error            // the error from Wait when state is nil
}

// Run starts the job cfg describes, supervises it until every rank has
// exited and been reaped, reports on cfg.Stderr and returns the outcome.
//
// Every rank runs in its own process group, with cfg.Env plus the COBRE_*
// variables (see the package documentation). As soon as one rank fails
// (exits non-zero or is killed by a signal), every other rank gets
// cfg.Settle to end on its own, is then sent SIGTERM, and SIGKILL once
// cfg.Grace is over; a signal from cfg.Signals is
// forwarded to every rank the same way, and a second one kills them. Once
// all have exited, the launcher reads their error records, names the root
// cause (Blame) and removes the records.
//
// The launcher's own messages never hold up the supervision: when nobody
// reads its output, the job is still stopped on a failure or a signal.
// Run returns once its messages are written, or, if its output stays stuck
// once the ranks have ended, when a signal arrives (the code is then the
// signal's, 128+n, unless the job already had a non-zero one); a job
// stopped by a signal gives up on stuck output after drainTimeout.
func Run(cfg Config) (res Result) {
	// One lock for both when they may be one file (2>&1), so that a line
	// of one never lands inside a line of the other; one each when they
	// are two files, so that standard output nobody reads does not hold
	// up standard error (and the launcher's messages).
	var outLock, errLock sync.Mutex
	stdoutLock := &errLock
	if distinctFiles(cfg.Stdout, cfg.Stderr) {
		stdoutLock = &outLock
	}
	j := &job{cfg: &cfg, stderr: &SyncWriter{W: cfg.Stderr, Lock: &errLock}, exits: make(chan exitEvent, max(cfg.Ranks, 0))}
	j.stdout = &SyncWriter{W: cfg.Stdout, Lock: stdoutLock}
	j.notes = newNotes(j.stderr)
	defer func() {
		var bound <-chan time.Time
		if res.Interrupted != 0 {
			// The user asked to stop: stuck output is given up
			// drainTimeout after the last rank ended, all told.
			t := time.NewTimer(time.Until(j.giveUp))
			defer t.Stop()
			bound = t.C
		}
		if sig := j.notes.flush(cfg.Signals, bound); sig != 0 && res.Code == 0 {
			res.Code = 128 + int(sig)
		}
	}()
	if cfg.Ranks < 1 || len(cfg.Command) == 0 {
		j.printf("no ranks to start (ranks=%d, command %q)", cfg.Ranks, cfg.Command)
		return Result{Code: ExitLaunchError, SetupFailed: true}
	}
	if most := MaxRanks(cfg.Backend); most > 0 && cfg.Ranks > most {
		j.printf("%d ranks is more than the %s backend's %d", cfg.Ranks, backendName(cfg.Backend), most)
		return Result{Code: ExitLaunchError, SetupFailed: true}
	}
	errDir, err := os.MkdirTemp("", "starcomm-job-")
	if err != nil {
		j.printf("cannot create the directory for the ranks' error records: %v", err)
		return Result{Code: ExitLaunchError, SetupFailed: true}
	}
	defer os.RemoveAll(errDir)
	port := cfg.Port
	bindFrom := "" // where an inherited bind address came from, for messages
	base := cfg.Env
	if base == nil {
		base = os.Environ()
	}
	switch cfg.Backend {
	case "", BackendTCP:
		if cfg.Bind == "" && lookupEnv(base, "COBRE_TCP_BIND_ADDR") != "" {
			bindFrom = " (COBRE_TCP_BIND_ADDR, inherited from the environment)"
		}
		cfg.Bind = bindAddr(base, &cfg)
	case BackendShm:
		if cfg.ShmName == "" {
			cfg.ShmName = jobName()
		}
		// The segment goes when the job ends: the ranks remove it, but a
		// job whose every rank was killed at once cannot.
		defer shm.RemoveFiles("", cfg.ShmName)
	default:
		j.printf("unknown backend %q (want %s or %s)", cfg.Backend, BackendTCP, BackendShm)
		return Result{Code: ExitLaunchError, SetupFailed: true}
	}
	if cfg.Backend != BackendShm {
		host := strings.TrimSuffix(strings.TrimPrefix(cfg.Bind, "["), "]")
		if port == 0 {
			p, err := freePort(host)
			if err != nil {
				j.printf("cannot pick a free port on %s%s: %v", host, bindFrom, err)
				return Result{Code: ExitLaunchError, SetupFailed: true}
			}
			port = p
		} else if err := portFree(host, port); err != nil {
			j.printf("%v", err)
			return Result{Code: ExitLaunchError, SetupFailed: true}
		}
	}
	startCode := 0
	for r := 0; r < cfg.Ranks; r++ {
		if err := j.start(r, rankEnv(base, &cfg, port, r, errDir)); err != nil {
			msg := fmt.Sprintf("cannot start rank %d: %v", r, err)
			if len(j.procs) > 0 {
				msg += "; stopping the other ranks"
			}
			j.printf("%s", msg)
			startCode = exitCodeForStart(err)
			break
		}
	}
	res, failed := j.supervise(startCode)
	j.giveUp = time.Now().Add(drainTimeout)
	if sig := j.drain(res.Interrupted != 0); sig != 0 {
		// The output is stuck and the user wants out: no blame, which
		// would need the rest of the output.
		if res.Code == 0 {
			res.Code = 128 + int(sig)
		}
		return res
	}
	if failed {
		recs := j.readRecords(errDir)
		v := Blame(res.Ends, recs, cfg.PeerFailedCode)
		res.Verdict, res.Code = &v, v.Code
		if cfg.Ranks > 1 || v.Records > 0 {
			j.printf("%s", v.Summary(cfg.Name, res.Ends))
		}
	}
	return res
}

// printf writes one of the launcher's messages, a line starting with its
// name, to Stderr.
func (j *job) printf(format string, args ...any) {
	j.notes.add(nil, "%s: "+format, append([]any{j.cfg.Name}, args...)...)
}

// jobName returns a segment name unique to this job: the launcher's
// process id and 8 random bytes.
func jobName() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("job-%d-%x", os.Getpid(), b)
}

// freePort asks the kernel for a free TCP port on host and releases it;
// another program could take it before rank 0 listens.
func freePort(host string) (int, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// portFree returns an error when something already listens on the given
// port of host: it listens there and closes the socket. A port another
// job's rank 0 holds would otherwise let this job's workers join that job
// (both coordinators on one address, one of them refused), each job then
// failing with a message about the other's ranks. Other failures to
// listen (an address not on this host, a port the user may not bind) are
// left to rank 0 to report, as it would without the check.
func portFree(host string, port int) error {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("port %d on %s is in use (another job's rank 0, or another program, listens on it): choose another --port, or leave it out for a free one", port, host)
		}
		return nil
	}
	return ln.Close()
}

// exitCodeForStart is the exit code when a rank cannot be started: 127
// when the command does not exist, 126 when it cannot be executed, 1 when
// something else (a pipe, fork) failed.
func exitCodeForStart(err error) int {
	var execErr *exec.Error
	switch {
	case errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist):
		return ExitNotFound
	case errors.As(err, &execErr) || errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.ENOEXEC):
		return ExitCannotExec
	default:
		return ExitLaunchError
	}
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
	cmd := exec.Command(j.cfg.Command[0], j.cfg.Command[1:]...)
	cmd.Env = env
	cmd.Stdin = nil // /dev/null
	cmd.Stdout = outW
	cmd.Stderr = errW
	cmd.SysProcAttr = sysProcAttr()
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

	p := &proc{id: r, cmd: cmd, pid: cmd.Process.Pid, sent: map[syscall.Signal]bool{}, outDone: make(chan struct{})}
	j.procs = append(j.procs, p)
	j.pipes = append(j.pipes, outR, errR)
	prefix := "[" + strconv.Itoa(r) + "] "
	copyOut := func() error { return copyLines(j.stdout, outR, prefix, MaxLineBytes) }
	switch {
	case j.cfg.Output == Rank0Stdout && r == 0:
		copyOut = func() error { return copyRaw(j.stdout, outR) }
	case j.cfg.Output == Rank0Stdout:
		copyOut = func() error { return copyLines(j.stderr, outR, prefix, MaxLineBytes) }
	}
	j.copiers.Add(2)
	var left atomic.Int32
	left.Store(2)
	copied := func() {
		if left.Add(-1) == 0 {
			close(p.outDone)
		}
		j.copiers.Done()
	}
	go func() {
		defer copied()
		_ = copyOut()
	}()
	go func() {
		defer copied()
		_ = copyLines(j.stderr, errR, prefix, MaxLineBytes)
	}()
	go func() {
		err := cmd.Wait()
		// Whatever the rank left behind in its group dies with it.
		killLeftovers(p.pid)
		j.exits <- exitEvent{proc: p, state: cmd.ProcessState, err: err}
	}()
	return nil
}

// signal sends sig to rank p's process group, noting when and what.
func (j *job) signal(p *proc, sig syscall.Signal) {
	if p.signalled.IsZero() {
		p.signalled = time.Now()
	}
	p.sent[signalGroup(p.cmd.Process, sig)] = true
}

// kill sends SIGKILL to rank p's process group and to p itself.
func (j *job) kill(p *proc) {
	if p.signalled.IsZero() {
		p.signalled = time.Now()
	}
	p.sent[syscall.SIGKILL] = true
	killGroup(p.cmd.Process)
}

// ended turns a rank's reaped exit into its End.
func (j *job) ended(ev exitEvent) End {
	p := ev.proc
	e := End{PID: p.pid, Signalled: p.signalled, Order: j.reaped}
	j.reaped++
	if ev.state == nil {
		e.Code, e.How = ExitLaunchError, fmt.Sprintf("could not be waited for: %v", ev.err)
		return e
	}
	code, sig, signaled, core := decodeStatus(ev.state)
	e.Code = code
	if !signaled {
		e.How = fmt.Sprintf("exited with code %d", code)
		return e
	}
	e.How = "was killed by signal " + SignalName(sig)
	if core {
		e.How += " (core dumped)"
	}
	e.Stopped = p.sent[sig]
	return e
}

// supervise waits until every started rank has exited and returns the
// job's result before blame, and whether a rank failed on its own first
// (then the blame rule decides the code). startCode is non-zero when
// starting the ranks failed, in which case the started ranks are stopped
// at once and startCode is the result's code.
//
// The first rank to fail on its own stops the others; a forwarded signal
// stops all ranks and the first non-zero result after it decides the code. Stopping sends a signal to
// every running rank's group and SIGKILL when the grace period is over or
// a second signal arrives.
func (j *job) supervise(startCode int) (res Result, failed bool) {
	res = Result{Code: startCode, SetupFailed: startCode != 0}
	running := len(j.procs)
	stopping := false
	var grace, settle, notice *time.Timer
	var graceOver, settleOver, noticeDue <-chan time.Time
	noticed := false // the first rank exited 0 (the notice's timer is set)
	stop := func(sig syscall.Signal) {
		stopping = true
		settleOver, noticeDue = nil, nil
		for _, p := range j.procs {
			if !p.exited {
				j.signal(p, sig)
			}
		}
		grace = time.NewTimer(j.cfg.Grace)
		graceOver = grace.C
	}
	if res.SetupFailed {
		stop(syscall.SIGTERM)
	}

	for running > 0 {
		select {
		case ev := <-j.exits:
			running--
			p := ev.proc
			p.exited = true
			p.end = j.ended(ev)
			switch {
			case p.end.Code == 0 || res.SetupFailed || failed:
				if p.end.Code == 0 && !noticed && running > 0 && !stopping && !failed && j.cfg.WaitNotice > 0 {
					noticed = true
					notice = time.NewTimer(j.cfg.WaitNotice)
					noticeDue = notice.C
				}
			case !stopping: // the job's first failure
				failed = true
				noticeDue = nil
				msg := fmt.Sprintf("rank %d (pid %d) %s", p.id, p.pid, p.end.How)
				switch {
				case running > 0 && j.cfg.Settle > 0:
					// They get Settle to end on their own first.
					msg += "; stopping the other ranks"
					settle = time.NewTimer(j.cfg.Settle)
					settleOver = settle.C
				case running > 0:
					msg += "; stopping the other ranks"
					stop(syscall.SIGTERM)
				}
				// After the rank's own last lines (its panic, its error).
				j.notes.add(p.outDone, "%s: %s", j.cfg.Name, msg)
			case res.Code == 0: // stopped by a forwarded signal: the first non-zero result
				res.Code = p.end.Code
			}

		case sig := <-j.cfg.Signals:
			s, ok := sig.(syscall.Signal)
			if !ok {
				s = syscall.SIGTERM
			}
			if isSigPipe(s) {
				// The launcher's output is a closed pipe (| head): stop the
				// job as a forwarded SIGTERM would, once; every later write
				// raises SIGPIPE again.
				if !stopping {
					res.Interrupted = s
					j.printf("its output is a closed pipe (SIGPIPE); stopping %s with SIGTERM", j.describeRunning())
					stop(syscall.SIGTERM)
				}
				continue
			}
			if !stopping {
				res.Interrupted = s
				to := "all ranks"
				if running < len(j.procs) {
					to = "the ranks still running, " + j.describeRunning()
				}
				j.printf("received %s; forwarding it to %s", SignalName(s), to)
				stop(s)
			} else {
				j.printf("received %s while stopping; killing all ranks", SignalName(s))
				j.killRunning()
			}

		case <-noticeDue:
			noticeDue = nil
			var gone []int
			for _, q := range j.procs {
				if q.exited {
					gone = append(gone, q.id)
				}
			}
			j.printf("%s exited 0 (the first %v ago); still waiting for %s to exit (Ctrl-C stops the job)",
				rankList(gone), j.cfg.WaitNotice, j.describeRunningPids())

		case <-settleOver:
			settleOver = nil
			if running > 0 {
				stop(syscall.SIGTERM)
			}

		case <-graceOver:
			graceOver = nil
			j.printf("grace period of %v is over; killing %s", j.cfg.Grace, j.describeRunning())
			j.killRunning()
		}
	}
	for _, t := range []*time.Timer{grace, settle, notice} {
		if t != nil {
			t.Stop()
		}
	}
	res.Ends = make([]End, len(j.procs))
	for i, p := range j.procs {
		res.Ends[i] = p.end
	}
	return res, failed
}

// describeRunning names the ranks that have not exited yet, e.g. "ranks 1, 3".
func (j *job) describeRunning() string {
	var ids []int
	for _, p := range j.procs {
		if !p.exited {
			ids = append(ids, p.id)
		}
	}
	return rankList(ids)
}

// describeRunningPids is describeRunning with each rank's pid, e.g.
// "rank 1 (pid 4242)" or "ranks 1 (pid 4242), 3 (pid 4250)".
func (j *job) describeRunningPids() string {
	var ids []string
	for _, p := range j.procs {
		if !p.exited {
			ids = append(ids, fmt.Sprintf("%d (pid %d)", p.id, p.pid))
		}
	}
	if len(ids) > comm.MaxRanksItems {
		return j.describeRunning()
	}
	if len(ids) == 1 {
		return "rank " + ids[0]
	}
	return "ranks " + strings.Join(ids, ", ")
}

// killRunning sends SIGKILL to every rank that has not exited yet.
func (j *job) killRunning() {
	for _, p := range j.procs {
		if !p.exited {
			j.kill(p)
		}
	}
}

// drain waits for the output copiers to finish, at most drainTimeout, then
// closes the pipes' read ends, which ends any copier still reading. A
// copier still writing (the launcher's output is not being read) is waited
// for until a signal other than SIGPIPE arrives, which drain returns (0
// when drained), or, when the job was stopped by a signal (interrupted),
// not at all.
func (j *job) drain(interrupted bool) syscall.Signal {
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
		j.printf("rank output still open %v after all ranks exited (held by a process outside their process groups, or not read by the launcher's reader); no longer copying it", drainTimeout)
		for _, f := range j.pipes {
			f.Close()
		}
		if interrupted {
			return 0 // the user asked to stop: no more waiting
		}
		if sig := waitOrSignal(done, j.cfg.Signals, nil); sig != 0 {
			return sig
		}
	}
	for _, f := range j.pipes {
		f.Close()
	}
	return 0
}

// readRecords returns every started rank's error record from dir, nil for
// a rank without one. An unreadable record is reported and counts as none.
func (j *job) readRecords(dir string) []*errfile.Record {
	recs := make([]*errfile.Record, len(j.procs))
	for r := range j.procs {
		rec, err := errfile.Read(errorFile(dir, r))
		switch {
		case err == nil:
			recs[r] = &rec
		case !errors.Is(err, fs.ErrNotExist):
			j.printf("rank %d's error record is unreadable: %v", r, strings.TrimPrefix(err.Error(), "errfile: "))
		}
	}
	return recs
}

// distinctFiles reports whether a and b are known to be two different
// files: both *os.File whose file status says so. Anything else may be
// one file (2>&1), or one writer.
func distinctFiles(a, b io.Writer) bool {
	fa, ok1 := a.(*os.File)
	fb, ok2 := b.(*os.File)
	if !ok1 || !ok2 || fa == nil || fb == nil {
		return false
	}
	sa, err1 := fa.Stat()
	sb, err2 := fb.Stat()
	return err1 == nil && err2 == nil && !os.SameFile(sa, sb)
}
