package star

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/starcomm/starcomm/comm"
)

// Comm is one rank of a star communicator. Rank 0 holds a link to every
// worker; a worker holds one link to rank 0. Create it with New.
type Comm struct {
	cfg  Config
	rank int
	size int
	role role // *coordinator on rank 0, *worker elsewhere

	// ops is held by the running collective, and by Close's shutdown
	// after it (a collective that finds it held fails with
	// comm.ErrConcurrentCall, or ErrInvalidCommunicator once closed): a
	// one-slot semaphore (a channel rather than a mutex, so that a Close
	// waiting for a collective is durably blocked inside a testing/synctest
	// bubble, and the fake clock moves on).
	ops chan struct{}
	// holder is the collective that holds ops ("" when none does); it
	// changes with ops, under stateMu.
	holder string

	stateMu sync.Mutex
	// closed is set when Close begins: no collective may start after it.
	closed bool
	// running is set while a collective is between begin and its end:
	// Close and the collective's context cancel its links only then.
	running bool
	// cancelled is set when they did, so the links are resumed after.
	cancelled bool
	// failed is the first failure; the communicator is fail-stop after it.
	failed error
	// pending is a failure found outside a collective's own I/O (a peer
	// unresponsive, an out-of-band Abort): it fails the running collective
	// (whose links it cancels) or the next one.
	pending error
	// pendingAfter, when not 0, keeps pending for the collectives numbered
	// after it (see interruptAfter).
	pendingAfter uint64
	// seq counts the collectives begun; op and opStart are the running
	// one's, for reports.
	seq     uint64
	op      string
	opStart time.Time
	// spinNow is the spin of the next polled wait (see waited); 0 until
	// the first polled wait ends (spin then gives Spin). Only the
	// collective's goroutine uses it.
	spinNow time.Duration
	// bcastRoot is the root of the running collective when it is a
	// broadcast, else -1 (see awaitsUnread).
	bcastRoot int
	// reported is set once OnFailure has been called.
	reported bool
	// shutting is set while a healthy worker's Close waits for rank 0's
	// Shutdown: a failure declared meanwhile (rank 0 unresponsive, its
	// process gone, its Abort on the control session) ends that wait.
	shutting bool
	// closeDone is closed when Close has finished.
	closeDone chan struct{}

	// The context watched for cancellation (see watchLocked): wctx, registered
	// with context.AfterFunc (wstop undoes it) under generation wgen, is
	// kept across collectives, so that a program passing the same context
	// to every collective registers it once, not once per collective.
	// ctxLive is set while its cancellation cancels the running
	// collective's links.
	wctx    context.Context
	wstop   func() bool
	wgen    uint64
	ctxLive bool

	// bg counts the links ending in the background after a failure.
	bg sync.WaitGroup

	// The away detector (see watchAway and away), on the monotonic clock
	// from epoch (the communicator's creation): beatAt is when it last
	// ticked (0: never), awayGap the last gap between two of its ticks of
	// more than awayMin (this process was stopped, paused or starved of
	// CPU), absentGap the last of more than absentMin.
	epoch  time.Time
	beatAt atomic.Int64
	// seqNow is seq, for the links' I/O, which does not take stateMu
	// (see link.lateAt).
	seqNow             atomic.Uint64
	awayGap, absentGap atomic.Pointer[tickGap]
	awayOnce           sync.Once

	// Scratch reused across collectives so steady state does not allocate.
	parts [][]byte
	// cl is the running collective's call, for the desync check.
	cl call
}

// role is what the coordinator and a worker each do in a collective. The
// collective's goroutine calls every method but links while it holds the
// communicator's ops.
type role interface {
	// allgatherv gathers send into parts (every rank's region of recv, in
	// rank order).
	allgatherv(send []byte, parts [][]byte) error
	allreduce(send, recv comm.View, op comm.ReduceOp) error
	broadcast(buf []byte, root int) error
	barrier() error
	// links returns this rank's links (nil entries excluded).
	links() []*link
	// shutdown ends a healthy, idle communicator gracefully (Shutdown, as
	// docs/protocol.md describes it) and closes its links.
	shutdown() error
	// checkCall runs the desync check of collective seq (see
	// Config.CheckCollectives): a worker sends its fingerprint, the
	// coordinator compares every rank's.
	checkCall(seq uint64, cl *call) error
	// stop ends the role's goroutines once every link is closed.
	stop()
}

var _ comm.Communicator = (*Comm)(nil)

// Errors a link is cancelled with. They never leave the package as they
// are: the communicator turns them into its errors.
var (
	// errClosed: Close was called during the collective.
	errClosed = errors.New("star: communicator closed during the collective")
	// errCut: another link of the collective failed first.
	errCut = errors.New("star: another link failed first")
)

// New starts this rank: the coordinator (rank 0) accepts and handshakes
// every worker on cfg.Listener, and answers them all once every one has
// joined; a worker dials cfg.Addr, handshakes and waits for that answer.
// So New returns on every rank at about the same time, once the whole
// communicator is up (as MPI_Init does), or with an
// *comm.InitializationFailedError; start-up is bounded by
// cfg.ConnectTimeout alone. A communicator of size 1 opens no connection
// (cfg.Listener, if any, is closed).
func New(ctx context.Context, cfg Config) (*Comm, error) {
	if err := cfg.Validate(); err != nil {
		if cfg.Listener != nil {
			_ = cfg.Listener.Close()
		}
		return nil, &comm.InitializationFailedError{Backend: "star", Err: err}
	}
	cfg = cfg.withDefaults()
	c := &Comm{cfg: cfg, rank: cfg.Rank, size: cfg.Size, closeDone: make(chan struct{}), ops: make(chan struct{}, 1), epoch: time.Now()}
	var err error
	switch {
	case cfg.Rank == 0 && cfg.Size == 1:
		if cfg.Listener != nil {
			_ = cfg.Listener.Close()
		}
		c.role = newCoordinator(c, nil)
	case cfg.Rank == 0:
		var gate *admission
		var links []*link
		if gate, links, err = admit(ctx, cfg); err == nil {
			co := newCoordinator(c, links)
			c.role = co
			if cfg.control() {
				co.gate, co.graceEnd = gate, time.Now().Add(sessionGrace)
				// Until its control session is up (it then takes over),
				// a worker's host is held to the liveness timeout by its
				// data link's system (before serve: attach restores it).
				co.setPeerTimeouts(cfg.Liveness)
				gate.serve(co.attach, func(msg string, args ...any) { c.log(slog.LevelWarn, msg, args...) })
			} else {
				gate.stop()
			}
		}
	default:
		var up *link
		if up, err = dial(ctx, cfg); err == nil {
			w := newWorker(c, up)
			c.role = w
			if cfg.control() {
				w.startControl()
			}
		} else {
			err = fmt.Errorf("rank %d: %w", cfg.Rank, err)
		}
	}
	if err != nil {
		err = &comm.InitializationFailedError{Backend: "star", Err: err}
		c.report(OpStartup, startupBlame(err), err)
		return nil, err
	}
	return c, nil
}

// OpStartup and OpClose name the operations of start-up and of Close in
// failure reports (Failure.Op), beside the collectives' names.
const (
	OpStartup = "start-up"
	OpClose   = "close"
)

// startupBlame is the rank a failed start-up blames: on a worker the rank
// the coordinator named in its Abort (the one that never came), or rank 0
// when the coordinator could not be reached or ended the connection, or
// fell silent, before it answered (see coordinatorFault); on the
// coordinator the first rank that never registered; else -1.
func startupBlame(err error) int {
	var ab *AbortError
	if errors.As(err, &ab) {
		return ab.Rank
	}
	var se *startupError
	if errors.As(err, &se) {
		return se.missing
	}
	var cf *coordinatorFault
	if errors.As(err, &cf) {
		return 0
	}
	return -1
}

// Rank returns this rank.
func (c *Comm) Rank() int { return c.rank }

// Size returns the number of ranks.
func (c *Comm) Size() int { return c.size }

// Close ends the communicator; it may be called at any time from any
// goroutine, and more than once (later calls wait for the first, then
// return nil).
//
//   - During a collective, Close cancels it through the same path as any
//     failure: the collective fails at once on this rank (with an error
//     wrapping comm.ErrInvalidCommunicator), its peers are told by an Abort
//     naming this rank, and every connection closes. Close returns nil.
//   - After a failure, Close closes every connection at once (the Aborts
//     went out when the collective failed) and returns nil.
//   - On a healthy, idle coordinator, Close is the spec's graceful
//     shutdown: it sends Shutdown to every worker and waits
//     up to ShutdownTimeout for each to take it and close its end. It
//     returns a *comm.CollectiveFailedError (Operation "close") naming a
//     worker that could not be sent the Shutdown, or that was still in a
//     collective the coordinator never called.
//   - After a failure found between collectives that no collective has
//     reported (the control session found a peer unresponsive or gone, or
//     rank 0 said so on it), Close does not try the graceful shutdown: it
//     tells the peers as a failing collective does (rank 0 sends each
//     worker an Abort instead of Shutdown) and returns that failure, a
//     *comm.CollectiveFailedError (Operation "close") naming the rank at
//     fault.
//   - On a healthy, idle worker, Close waits for the coordinator's
//     Shutdown, at most Timeout (the coordinator calls Close when it is
//     done, like MPI_Finalize), or until the control session finds rank 0
//     unresponsive or gone, or rank 0's Abort comes on it. It returns nil
//     on Shutdown, and a *comm.CollectiveFailedError (Operation "close",
//     Rank 0, or the rank an Abort names) when rank 0 closed the
//     connection without it (it crashed or exited), sent something else,
//     sent nothing in time, or was found so.
func (c *Comm) Close() error {
	c.stateMu.Lock()
	if c.closed {
		done := c.closeDone
		c.stateMu.Unlock()
		<-done
		return nil
	}
	c.closed = true
	if c.running {
		c.cancelLinks(errClosed)
	}
	c.stateMu.Unlock()
	c.hook(hookClosing)

	// A running collective was cancelled: it ends promptly.
	c.ops <- struct{}{}
	defer func() {
		<-c.ops
		close(c.closeDone)
	}()
	c.stateMu.Lock()
	failed, pending := c.failed, c.pending
	c.shutting = failed == nil && pending == nil && c.rank != 0
	c.unwatchLocked() // the context may outlive the communicator
	c.stateMu.Unlock()
	var err error
	switch {
	case failed != nil || c.size == 1:
	case pending != nil:
		// A failure found between collectives (a peer unresponsive or
		// gone, an Abort from rank 0) that no collective has reported:
		// no graceful shutdown, which could only fail on the ranks that
		// have gone or were told to; the peers are told as after a
		// failed collective (a worker without a control session learns
		// it only so), and Close reports it.
		// A rank found unresponsive is the peer that timed out (its
		// Abort, like every other, is waited for at most abortFlushMax).
		var ur *UnresponsiveError
		if errors.As(pending, &ur) {
			pending = &linkError{peer: ur.Rank, err: pending}
		}
		err = c.failSparing(context.Background(), OpClose, pending, c.seq)
	default:
		if err = c.role.shutdown(); err != nil {
			c.report(OpClose, blameOf(err, -1), err)
		}
	}
	for _, l := range c.role.links() {
		_ = l.conn.Close()
	}
	c.bg.Wait()
	c.role.stop()
	return err
}

// cancelLinks cancels every link of the running collective with err.
// stateMu must be held.
func (c *Comm) cancelLinks(err error) {
	c.cancelled = true
	for _, l := range c.role.links() {
		l.cancel(err)
	}
}

// begin checks that a collective may start and marks it running. It
// returns a pending failure (see interrupt) for the collective to fail
// with.
func (c *Comm) begin(ctx context.Context, op string, root int) (pending, err error) {
	c.stateMu.Lock()
	defer c.stateMu.Unlock()
	if err := c.admitLocked(ctx, op); err != nil {
		return nil, err
	}
	c.watchLocked(ctx)
	c.running = true
	c.seq++
	c.seqNow.Store(c.seq)
	c.op, c.opStart, c.bcastRoot = op, time.Now(), root
	switch r := c.role.(type) {
	case *worker:
		r.up.unstretch() // a stretch was for an earlier collective
	case *coordinator:
		r.busyEdge(c.seq, true)
	}
	if c.seq <= c.pendingAfter {
		return nil, nil // the pending failure is for later collectives
	}
	return c.pending, nil
}

// admitLocked checks that a collective may start, as begin does, without
// marking it running. stateMu must be held.
func (c *Comm) admitLocked(ctx context.Context, op string) error {
	if c.closed {
		return comm.ErrInvalidCommunicator // whatever the arguments
	}
	if err := comm.CheckContext(op, ctx); err != nil {
		return err
	}
	if c.failed != nil {
		return &comm.CollectiveFailedError{Operation: op, Rank: blameOf(c.failed, -1), Message: "communicator is fail-stop after an earlier failure", Err: c.failed}
	}
	if err := ctx.Err(); err != nil {
		return &comm.CollectiveFailedError{Operation: op, Rank: c.rank, Message: "context done before the collective started", Err: err}
	}
	return nil
}

// hasFailed reports whether a collective of this communicator failed.
func (c *Comm) hasFailed() bool {
	c.stateMu.Lock()
	defer c.stateMu.Unlock()
	return c.failed != nil
}

// interrupt fails the running collective with cause (cancelling its
// links), or, when none runs, the next one. It reports whether it took
// effect: not after a failure, a Close, or an earlier interrupt.
func (c *Comm) interrupt(cause error) bool { return c.interruptAfter(0, cause) }

// interruptAfter fails the collectives numbered after `after` with cause
// (0: every one): the running collective if it is one of them (cancelling
// its links), else the next one that is. A collective whose result the
// coordinator has sent in full does not fail for what came later: a
// worker may still be reading that result, or not have called it yet. It
// reports whether it took effect: not after a failure, a Close, or an
// earlier interrupt (unless that one spares more collectives than this
// one: this one, which concerns an earlier collective, takes its place).
func (c *Comm) interruptAfter(after uint64, cause error) bool {
	c.stateMu.Lock()
	defer c.stateMu.Unlock()
	if c.failed != nil {
		return false
	}
	if c.closed {
		if !c.shutting {
			return false
		}
		// A worker's Close waiting for rank 0's Shutdown: it will not
		// come (see worker.shutdown).
		c.shutting = false
		c.pending, c.pendingAfter = cause, after
		for _, l := range c.role.links() {
			l.cancel(cause)
		}
		return true
	}
	hits := c.running && c.seq > after
	if c.pending != nil && (after >= c.pendingAfter || hits && c.cancelled) {
		return false // (cancelled: the running collective fails as it is)
	}
	c.pending, c.pendingAfter = cause, after
	if hits {
		c.cancelLinks(cause)
	}
	return true
}

// unresponsive declares peer unresponsive: its control session was silent
// for the liveness timeout (lost, when the session ended first). Every
// collective of this rank fails naming it; the coordinator also tells every
// other worker at once, over their control sessions, whatever it is doing.
//
// A coordinator that hears from none of its workers (at least two of them
// with a session, each silent for half the liveness timeout or more) is
// itself the one cut off, or was the one frozen: it names itself, as every
// worker does. It first gives them one heartbeat interval (a tenth of the
// liveness timeout) to be heard: a coordinator whose own process was kept
// off the CPU (a loaded host) finds its timers due before it has read the
// heartbeats waiting in its sockets, and only a coordinator that still
// hears nobody after that is the one cut off. That wait ends early, with
// nothing declared, when stopped (the control session's) is closed.
func (c *Comm) unresponsive(peer int, silence time.Duration, lost error, stopped <-chan struct{}) {
	cause := &UnresponsiveError{Rank: peer, Silence: silence, Lost: lost}
	if co, ok := c.role.(*coordinator); ok {
		if _, ok := co.allSilent(time.Now()); ok {
			c.hook(hookAllSilent)
			wait := time.NewTimer(c.cfg.Liveness / 10)
			select {
			case <-wait.C:
			case <-stopped:
				wait.Stop()
				return
			}
			if n, ok := co.allSilent(time.Now()); ok {
				cause = &UnresponsiveError{Rank: 0, Silence: silence, Lost: lost, Workers: n}
			}
		}
	}
	c.declare(cause.Rank, cause, "peer unresponsive")
}

// declare fails this rank's current or next collective with cause, which
// blames rank (logged as msg), unless something failed it first (see
// interrupt); the coordinator also tells every other worker at once, over
// their control sessions, whatever it is doing.
//
// On the coordinator, a worker that already has its result of the latest
// collective (the running one, or the last one when none runs) is not
// needed by that collective any more: a worker that exits without Close
// the moment its last collective returns must not fail the others', some
// of whom may still be reading their result, or not have called it yet.
// The failure is then for the collectives after that one, on every rank.
func (c *Comm) declare(rank int, cause error, msg string) { c.declareOp(rank, cause, msg, "") }

// declareOp is declare for a failure that rank says it had in op ("":
// what this rank ran last, and during it or after it, as declare says).
func (c *Comm) declareOp(rank int, cause error, msg, op string) {
	co, isCo := c.role.(*coordinator)
	c.stateMu.Lock()
	after, during := c.seq, false // the collectives after the latest
	if c.running && (!isCo || rank <= 0 || rank >= c.size || co.byRank[rank].prog.done.Load() != c.seq) {
		after, during = c.seq-1, true // the running collective still needs it
	}
	c.stateMu.Unlock()
	if !c.interruptAfter(after, cause) {
		return
	}
	c.log(slog.LevelError, msg, "rank", rank, "cause", cause)
	if isCo {
		verb := "after"
		if during || op != "" {
			verb = "during"
		}
		if op == "" {
			op = c.currentOp()
		}
		reason := fmt.Sprintf("rank %d failed %s %s (seen by rank 0): %v", rank, verb, op, cause)
		co.broadcastAbort(after, abortPayload(rank, op, cause, reason), rank, nil)
	}
}

// peerFailed is the coordinator's part when worker rank says, on its
// control session, that it failed collective seq for a cause of its own,
// or because this rank let its timeout pass (ab, its Abort, then naming
// rank 0; see msgFailed): it takes no further part in that
// collective, nor in any after it. They fail on every rank, naming it (as
// declare says: a collective whose result that worker already has is
// spared), as when its Abort is read on its data link, in place of its
// part; but a worker that had sent its part already would be read only
// for its next frame, after the others' collective had waited for the
// slowest rank and succeeded, or a process that exited at once would be
// found out only at the liveness timeout.
func (c *Comm) peerFailed(rank int, seq uint64, ab *AbortError) {
	c.stateMu.Lock()
	late := seq > c.seq+1 // not one the worker could be in: ignored
	c.stateMu.Unlock()
	if late || seq == 0 {
		return
	}
	if ab.Rank == 0 {
		// The worker timed out waiting for this rank (see Comm.fail):
		// the fault is here.
		c.declareOp(0, ab, "a worker timed out waiting for this rank", ab.Op)
		return
	}
	c.declareOp(rank, ab, "peer failed its collective", ab.Op)
}

// awaitsUnread reports whether this rank should not declare peer gone
// yet, its control connection having ended without a farewell, because
// the peer may have said more on its data link than this rank has read
// (see control.exited). A link that cannot tell counts as holding bytes.
//
// A worker waits while it may: the coordinator's results, or its Abort,
// come before its end, and the worker, reading its data link in any
// collective, sees that end itself after them.
//
// The coordinator waits only while those bytes may complete collectives
// that it has not reached: when it is between collectives, when the
// worker already has its result of the running one, or when the running
// one is a broadcast from that worker (whose root returns as soon as it
// has sent its frame, without waiting for anyone). In any other running
// collective the worker needs a result it will never read: its bytes are
// at most its contribution, which rank 0 may not read for long (a relay
// reads every header first; the desync check reads one rank at a time).
func (c *Comm) awaitsUnread(peer int) bool {
	switch r := c.role.(type) {
	case *worker:
		return r.up.mayHoldUnread()
	case *coordinator:
		if peer <= 0 || peer >= len(r.byRank) {
			return false
		}
		l := r.byRank[peer]
		c.stateMu.Lock()
		later := !c.running || c.bcastRoot == peer || l.prog.done.Load() == c.seq
		c.stateMu.Unlock()
		return later && l.mayHoldUnread()
	}
	return false
}

// currentOp names the running collective (or the last one).
func (c *Comm) currentOp() string {
	c.stateMu.Lock()
	defer c.stateMu.Unlock()
	if c.op == "" {
		return "start-up"
	}
	return c.op
}

// log writes one record to the configured Logger, if any.
func (c *Comm) log(level slog.Level, msg string, args ...any) {
	if lg := c.cfg.Logger; lg != nil {
		lg.Log(context.Background(), level, msg, append(args, "self", c.rank)...)
	}
}

// settle ends a collective that did not fail: it is no longer running,
// and links cancelled after their last I/O are resumed. A collective that
// overlapped Close fails all the same.
func (c *Comm) settle(ctx context.Context, op string) error {
	c.stateMu.Lock()
	closed, cancelled := c.closed, c.cancelled
	if !closed {
		c.running, c.cancelled = false, false
	}
	seq := c.seq
	c.stateMu.Unlock()
	if co, ok := c.role.(*coordinator); ok && !closed && !cancelled {
		co.busyEdge(seq, false)
	}
	if closed {
		// Its I/O is over: the workers have their results in full, and
		// only what follows fails for them.
		return c.failSparing(ctx, op, errClosed, c.seq)
	}
	if cancelled {
		for _, l := range c.role.links() {
			l.resume()
		}
	}
	return nil
}

// blameOf returns the rank err blames (a CollectiveFailedError's Rank),
// or def.
func blameOf(err error, def int) int {
	var cf *comm.CollectiveFailedError
	if errors.As(err, &cf) && cf.Rank >= 0 {
		return cf.Rank
	}
	return def
}

// linkError is a failure on the link to peer.
type linkError struct {
	peer int
	err  error
}

func (e *linkError) Error() string { return fmt.Sprintf("link to rank %d: %v", e.peer, e.err) }
func (e *linkError) Unwrap() error { return e.err }

// watchLocked makes ctx's cancellation cancel the links of the collective
// about to begin, until endWatch. A context is registered once and kept
// while the collectives pass the same one (a pointer, so comparable): a
// registration per collective would cost allocations and the parent
// context's lock each time. A registration for another context is
// dropped, and its callback, should it still run, no longer acts (the
// generation has moved on). stateMu must be held.
func (c *Comm) watchLocked(ctx context.Context) {
	c.ctxLive = false
	if ctx.Done() == nil {
		return // never cancelled: nothing to watch
	}
	if c.wstop != nil && reflect.TypeOf(ctx).Kind() == reflect.Pointer && ctx == c.wctx {
		c.ctxLive = true
		return
	}
	c.unwatchLocked()
	c.wgen++
	gen := c.wgen
	c.wctx = ctx
	c.wstop = context.AfterFunc(ctx, func() {
		c.stateMu.Lock()
		if c.ctxLive && c.wgen == gen {
			c.cancelLinks(ctx.Err())
		}
		c.stateMu.Unlock()
	})
	c.ctxLive = true
}

// unwatchLocked drops the context registration, if any. stateMu must be
// held.
func (c *Comm) unwatchLocked() {
	if c.wstop != nil {
		c.wstop()
	}
	c.wctx, c.wstop = nil, nil
	c.wgen++
}

// endWatch ends the running collective's watch of its context: a
// cancellation after it no longer touches the links (see watchLocked).
func (c *Comm) endWatch() {
	c.stateMu.Lock()
	c.ctxLive = false
	c.stateMu.Unlock()
}

// fail turns err from a collective into the error the caller sees, makes
// the communicator fail-stop, tells every peer that can still hear (an
// Abort naming the rank at fault and the cause, handed to the system
// before fail returns, so that a process exiting the instant it sees the
// error still tells the truth), reports the failure, and leaves the links
// to end in the background.
func (c *Comm) fail(ctx context.Context, op string, err error) error {
	return c.failSparing(ctx, op, err, c.seq-min(c.seq, 1))
}

// failSparing is fail whose Aborts over the control sessions (on the
// coordinator) spare the collectives numbered up to spare (see
// interruptAfter): those before the failing one, or, when the failing
// one's I/O is over, that one too.
func (c *Comm) failSparing(ctx context.Context, op string, err error, spare uint64) error {
	peer := -1
	var le *linkError
	if errors.As(err, &le) {
		peer, err = le.peer, le.err
	}
	if co, ok := c.role.(*coordinator); ok && peer > 0 && peer < len(co.byRank) {
		// A worker that failed said why on its control session (msgFailed)
		// and may have exited before its data link's Abort went out.
		err = c.sessionWords(co.byRank[peer].ctl.Load(), err)
	}
	var ab *AbortError
	if c.rank == 0 && errors.As(err, &ab) && ab.From > 0 && ab.From < c.size {
		// A worker's Abort read on its control session (see peerFailed)
		// cancels every link: it concerns the link to that worker, not
		// the one whose cancel came first.
		peer = ab.From
	}
	out := c.classify(ctx, op, peer, err)
	// The rank at fault: as the error names it; else the peer whose frame
	// was wrong (a length mismatch alone cannot tell which of the two
	// ranks' arguments are wrong); else this rank.
	blame := blameOf(out, peer)
	if blame < 0 {
		blame = c.rank
	}

	c.stateMu.Lock()
	c.running, c.cancelled = false, false
	if c.failed == nil {
		c.failed = out
	}
	c.stateMu.Unlock()
	c.hook(hookFailing)

	reason := fmt.Sprintf("rank %d failed during %s (seen by rank %d): %v", blame, op, c.rank, out)
	payload := abortPayload(blame, op, err, reason)
	var oob chan int
	noob := 0
	var told *atomic.Bool
	if co, ok := c.role.(*coordinator); ok {
		co.closeGate()
		// Out of band first: a worker in the middle of a long frame
		// learns at once, whatever the data links do. endLinks waits for
		// these sends as for the data links' Aborts: a relayed frame cut
		// short carries no Abort, and a process that exits the instant
		// this returns must have told those workers all the same.
		oob = make(chan int, len(co.workers))
		noob = co.broadcastAbort(spare, payload, -1, oob)
	} else if w, ok := c.role.(*worker); ok && w.up.ctl.Load() != nil {
		ctl := w.up.ctl.Load()
		// The farewell: rank 0 must not take this process's exit, which
		// may follow at once, for a crash (see control.listen).
		// Not waited for when rank 0 let nothing move for the timeout
		// (a cut link would add up to 200 ms to every such failure): a
		// rank 0 that was only stopped, and resumes, reads this rank's
		// Abort on the data link, which is waited for (see endLinks).
		// A failure of its own (its context, or Close) goes to rank 0 on
		// the control session too (msgFailed), before the farewell: rank
		// 0 reads this rank's data link, and so its Abort, only for its
		// next frame, which it may already have. So does rank 0's own
		// timeout (blamed on rank 0): a rank 0 that computed past it
		// would otherwise read this rank's part of the collective, finish
		// it, and find the Abort behind that part only at its next one.
		// The system's ETIMEDOUT too (a large frame that rank 0, stopped
		// or computing, left unread for the timeout: its window closed),
		// and that one is waited for like a failure of its own: the
		// system has ended the data link, so no Abort can follow on it,
		// and rank 0 would otherwise read the link's end and name this
		// rank as crashed.
		oob = make(chan int, 1)
		by := time.Now().Add(min(abortFlushMax, c.cfg.ShutdownTimeout/2))
		own := ownFailure(ctx, err)
		var body []byte
		if own || blame == 0 && peer == 0 && isTimeout(err) {
			body = append(binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(payload)), c.seq), payload...)
		}
		told = new(atomic.Bool)
		if ctl.goUnlessStopped(func() {
			if body != nil {
				told.Store(ctl.send(msgFailed, body, by) == nil)
			}
			ctl.bidFarewell(by, ctl.stopped)
			oob <- -1
		}) && (own || !isTimeout(err) || errors.Is(err, syscall.ETIMEDOUT)) {
			noob = 1
		}
	}
	c.endLinks(payload, peer, err, oob, noob, told)
	c.report(op, blame, out)
	return out
}

// classify maps a collective's failure on the link to peer (-1: none) to
// its comm error (CollectiveFailed, or InvalidBufferSize for a length
// mismatch; the README's "Errors" table lists each case).
func (c *Comm) classify(ctx context.Context, op string, peer int, err error) error {
	var le *lengthError
	var ab *AbortError
	switch {
	case errors.Is(err, errClosed):
		return &comm.CollectiveFailedError{Operation: op, Rank: c.rank, Message: "communicator closed during the collective", Err: comm.ErrInvalidCommunicator}
	case ownFailure(ctx, err):
		return &comm.CollectiveFailedError{Operation: op, Rank: c.rank, Message: "context done during the collective", Err: ctx.Err()}
	case errors.As(err, &le):
		detail := fmt.Sprintf("%s frame from rank %d; ranks disagree on the buffer sizes", TagName(le.tag), peer)
		if le.tag == TagAllreduceSend && le.got > 0 && le.expected > 0 {
			// The lengths are the frame's payload: the op byte and the data.
			detail = fmt.Sprintf("%s frame from rank %d: its payload is the reduce op's byte and then the data, here %d bytes of data where this rank has %d; ranks disagree on the buffer sizes", TagName(le.tag), peer, le.got-1, le.expected-1)
		}
		if le.got < 0 {
			detail = fmt.Sprintf("frame from rank %d with LEN 0, no room for its tag (a corrupt stream: no rank sends it), where a %s frame was due", peer, TagName(le.tag))
		}
		return &comm.InvalidBufferSizeError{Operation: op, Expected: le.expected, Actual: le.got, Unit: "bytes", Detail: detail}
	case errors.As(err, &ab):
		blamed := ab.Rank
		if blamed < 0 || blamed >= c.size {
			blamed = ab.From // no rank, or one that does not exist
		}
		if c.rank == 0 && blamed == 0 && ab.From != 0 {
			// A worker blames rank 0, which is here to read its Abort,
			// for silence (the silence is on that worker's side: its
			// link, or its process, unless rank 0's own process was
			// away, see away) or for a control connection that ended
			// (it was cut on that worker's side, or on the way): rank
			// 0 names that worker, and tells the others so.
			what := ""
			switch ab.Cause.(type) {
			case remoteUnresponsive:
				d := ab.away // the verdict when the Abort came
				if d == 0 {
					d, _ = c.away(time.Now())
				}
				if d > 0 {
					// Rank 0 was not there to be heard: the worker
					// was right.
					return &comm.CollectiveFailedError{Operation: op, Rank: 0, Message: fmt.Sprintf("rank %d found rank 0 unresponsive while rank 0's process was away (stopped, paused or starved of CPU) for %v, past the %v liveness timeout: %v", ab.From, d.Round(time.Millisecond), c.cfg.Liveness, ab), Err: ab}
				}
				what = "lost contact with rank 0 (rank 0 is responsive)"
			case remoteExited:
				what = "lost its control connection to rank 0 (rank 0's process is running)"
			}
			if what != "" {
				return &comm.CollectiveFailedError{Operation: op, Rank: ab.From, Message: fmt.Sprintf("rank %d %s: %s", ab.From, what, ab.Reason), Err: ab}
			}
		}
		return &comm.CollectiveFailedError{Operation: op, Rank: blamed, Message: fmt.Sprintf("aborted by rank %d: %s", ab.From, ab.Reason), Err: ab}
	case errors.Is(err, ErrShutdown):
		return &comm.CollectiveFailedError{Operation: op, Rank: 0, Message: "rank 0 shut the communicator down while this rank was in the collective (the ranks called different numbers of collectives)", Err: err}
	}
	var ur *UnresponsiveError
	var ex *ExitedError
	var de *DesyncError
	var om *opMismatchError
	switch {
	case errors.As(err, &ur):
		return &comm.CollectiveFailedError{Operation: op, Rank: ur.Rank, Message: ur.Error(), Err: ur}
	case errors.As(err, &ex):
		return &comm.CollectiveFailedError{Operation: op, Rank: ex.Rank, Message: ex.Error(), Err: ex}
	case errors.As(err, &de):
		return &comm.CollectiveFailedError{Operation: op, Rank: de.Rank, Message: de.Error(), Err: de}
	case errors.As(err, &om):
		return &comm.CollectiveFailedError{Operation: op, Rank: om.rank, Message: om.Error(), Err: om}
	}
	msg := fmt.Sprintf("link to rank %d: %s", peer, describe(err, c.cfg.Timeout))
	if co, ok := c.role.(*coordinator); ok && isTimeout(err) {
		// What the collective waited for, as the stall report says it.
		seq, op, start, _ := c.current()
		msg += "; " + co.stall(seq, op, start, time.Now(), "waited")
	}
	return &comm.CollectiveFailedError{Operation: op, Rank: peer, Message: msg, Err: err}
}

// ownFailure reports whether err, a collective's failure, has a cause of
// this rank's own: its context ended during the collective, or Close was
// called during it.
func ownFailure(ctx context.Context, err error) bool {
	return errors.Is(err, errClosed) || ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded))
}

// abortFlushMax bounds how long a failing collective waits for its Aborts
// to be taken by the system (or, on an unbuffered transport, by the peer).
const abortFlushMax = 200 * time.Millisecond

// endLinks ends every link after a failure: it sends payload (an Abort) on
// each link whose stream is at a frame boundary and whose peer did not end
// it itself (the link to peer, when cause says the peer sent Abort or
// Shutdown), all at once, meanwhile draining what peers still send, so
// that a peer blocked writing to us can move on and read. It returns once
// every Abort has been taken (by the system, or on an unbuffered
// transport by the peer) and, where the transport tells (TCP on Linux),
// sent, with everything written before it (see link.awaitUnsent), and the
// noob control-session sends begun
// before (the coordinator's Aborts, a worker's farewell) have each put
// their token in oob, or after abortFlushMax (or
// half ShutdownTimeout, if shorter), the Abort to a peer that timed out
// included (its kernel may still take it: a process that was stopped,
// and resumes, reads it even when this one has exited the moment the
// collective returned). When told is set by the time an oob token comes (a
// worker that told rank 0 its own failure on the control session, and
// said farewell), that token ends the wait: rank 0 knows, and the data
// link's Abort, which may be queued behind megabytes of this rank's part
// that rank 0 has not read, adds nothing. On the coordinator, a worker
// told on its control session needs its data link's Abort no more (it may
// be queued behind a relayed frame that the worker, failing, no longer
// reads): the wait ends once every worker has been told one way or the
// other. The links then end in the background: an Abort not
// taken yet keeps trying, and each link waits for its peer to close, up
// to ShutdownTimeout in all, then closes (Close cuts that short).
func (c *Comm) endLinks(payload []byte, peer int, cause error, oob <-chan int, noob int, told *atomic.Bool) {
	lingerUntil := time.Now().Add(c.cfg.ShutdownTimeout)
	flushBy := time.Now().Add(min(abortFlushMax, c.cfg.ShutdownTimeout/2))
	links := c.role.links()
	sent := make(chan int, len(links))
	// untold: the peers whose data link has not taken and sent the Abort
	// and who have not been told on their control session either.
	untold := make(map[int]bool, len(links))
	n := 0
	for _, l := range links {
		l.resume()
		if l.peer == peer && peerEnded(cause) {
			_ = l.conn.Close()
			continue
		}
		l.startDrain(lingerUntil)
		// A peer that let nothing move for the timeout is waited for too,
		// up to flushBy like the others: a process that was stopped, or a
		// host that paused, still has a kernel that takes the Abort, and
		// the peer reads it when it resumes, even after this process has
		// exited the moment the collective returned (without the wait it
		// read a closed connection, and blamed this rank as crashed). A
		// peer whose link is cut costs the failure flushBy more.
		n++
		untold[l.peer] = true
		c.bg.Go(func() {
			told := -1 // not sent: the stream was cut mid-frame, or the link failed
			if err := l.sendFinal(TagAbort, payload, lingerUntil); err == nil {
				l.awaitUnsent(flushBy)
				told = l.peer
			}
			sent <- told
			l.finish()
		})
	}
	_, isCo := c.role.(*coordinator)
	if n+noob == 0 {
		return
	}
	flush := time.NewTimer(time.Until(flushBy))
	defer flush.Stop()
	for n+noob > 0 {
		select {
		case p := <-sent:
			n--
			delete(untold, p)
		case p := <-oob:
			noob--
			if told != nil && told.Load() {
				return
			}
			// A worker told on its control session knows; its data
			// link's Abort, queued behind a relayed frame that the
			// worker, failing, no longer reads, adds nothing.
			delete(untold, p)
		case <-flush.C:
			return
		}
		if isCo && len(untold) == 0 {
			return
		}
	}
}

// peerEnded reports whether err shows that the peer ended the link itself,
// with an Abort or Shutdown: there is no one left to tell.
func peerEnded(err error) bool {
	var ab *AbortError
	return errors.As(err, &ab) || errors.Is(err, ErrShutdown)
}

// report calls OnFailure, once per communicator.
func (c *Comm) report(op string, blame int, err error) {
	if c.cfg.OnFailure == nil {
		return
	}
	c.stateMu.Lock()
	first := !c.reported
	c.reported = true
	c.stateMu.Unlock()
	if first {
		c.cfg.OnFailure(Failure{Op: op, Rank: c.rank, Blamed: blame, Err: err})
	}
}

// describe explains a link error in words.
func describe(err error, timeout time.Duration) string {
	switch {
	case errors.Is(err, syscall.ETIMEDOUT):
		// TCP_USER_TIMEOUT or keep-alive: the collective timeout, or for a
		// worker without a control session the liveness timeout (see
		// coordinator.setPeerTimeout).
		return fmt.Sprintf("the system gave up on the connection: the peer's host acknowledged nothing, or kept its receive window closed, for the timeout (host gone, network cut, or the peer's process stopped with its socket full): %v", err)
	case isTimeout(err):
		return fmt.Sprintf("no progress within the %v timeout (peer hung or unreachable): %v", timeout, err)
	case errors.Is(err, io.EOF):
		return "connection closed by the peer (it crashed or exited, or called Close: then it called fewer collectives)"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed in the middle of a frame (peer crashed)"
	}
	return err.Error()
}

// run executes one collective: the common checks, the context watch, and
// the failure handling around body.
func (c *Comm) run(ctx context.Context, op string, check func() error, body func() error) error {
	return c.runRooted(ctx, op, -1, check, body)
}

// runRooted is run for a broadcast from root (-1: any other collective).
func (c *Comm) runRooted(ctx context.Context, op string, root int, check func() error, body func() error) error {
	c.stateMu.Lock()
	select {
	case c.ops <- struct{}{}:
	default:
		// Held by a collective that has not returned, or by Close.
		closed, holder := c.closed, c.holder
		c.stateMu.Unlock()
		if closed {
			return comm.ErrInvalidCommunicator
		}
		return comm.ConcurrentCall(op, holder)
	}
	c.holder = op
	// The call is admitted here, and begins (marked running) only after
	// its arguments are checked: a call refused for them never runs, so a
	// Close or a context cancelled meanwhile has nothing of it to cancel.
	// A pending failure that begin will return comes before them.
	err := c.admitLocked(ctx, op)
	hasPending := c.pending != nil && c.seq+1 > c.pendingAfter
	c.stateMu.Unlock()
	defer func() {
		c.cl = call{} // no slice of the caller's kept, whatever the outcome
		c.stateMu.Lock()
		c.holder = ""
		<-c.ops
		c.stateMu.Unlock()
	}()
	if err != nil {
		return err
	}
	if !hasPending {
		if err := check(); err != nil {
			// Refused before it began: the call does not count, so that
			// the next one keeps the number every other rank gives it
			// (the desync check and the stall reports match collectives
			// by it).
			return err
		}
	}
	pending, err := c.begin(ctx, op, root)
	if err != nil {
		return err
	}
	if pending != nil {
		c.endWatch()
		return c.fail(ctx, op, pending)
	}
	c.hook(hookBegin)
	if w, ok := c.role.(*worker); ok && w.noSession.Load() != nil {
		w.warnNoSession()
	}
	if c.cfg.CheckCollectives && c.size > 1 {
		err = c.role.checkCall(c.seq, &c.cl)
	}
	if err == nil {
		err = body()
	}
	c.release()
	c.endWatch()
	c.hook(hookEnd)
	if err != nil {
		return c.fail(ctx, op, err)
	}
	return c.settle(ctx, op)
}

// release drops the references to the caller's memory (recv's regions,
// the broadcast buffer, counts) that the collective just over kept in
// reused scratch, so that no slice of the caller's outlives the call, even
// for the garbage collector. Every link's goroutine is idle by then: body
// returns once every request it handed out has its result.
func (c *Comm) release() {
	clear(c.parts)
	c.parts = c.parts[:0]
	c.cl = call{}
	for _, l := range c.role.links() {
		clear(l.rparts)
		l.rparts = l.rparts[:0]
	}
	if co, ok := c.role.(*coordinator); ok {
		co.one[0] = nil
	}
}

// frameLimit checks that a payload of n bytes fits a frame: LEN, its
// tag and payload, is at most MaxFrameLen.
func frameLimit(op string, n int) error {
	if uint64(n)+1 > MaxFrameLen {
		return &comm.InvalidArgumentError{Operation: op, Message: fmt.Sprintf("payload of %d bytes exceeds the wire limit of %d bytes per frame", n, uint64(MaxFrameLen-1))}
	}
	return nil
}

// regions returns the byte slices of recv holding each rank's region, in
// rank order, in c.parts.
func (c *Comm) regions(recv comm.View, counts, displs []int) [][]byte {
	es := recv.Type.Size()
	parts := c.parts[:0]
	for r := range counts {
		parts = append(parts, recv.Bytes[displs[r]*es:(displs[r]+counts[r])*es])
	}
	c.parts = parts
	return parts
}

// spin is how long to poll for a frame of n payload bytes before parking:
// the adapted spin (see waited) for small frames, Spin when polling is off
// (not positive), 0 (no polling) for large frames. A large frame also
// brings the adapted spin back to Spin: the copies bound a collective that
// moves one, and a rank that polls long right after it (its next small
// collective waits for rank 0's other large writes) takes the CPU they
// need.
func (c *Comm) spin(n int) time.Duration {
	if n > pollMax {
		c.spinNow = 0
		return 0
	}
	if c.cfg.Spin <= 0 || c.spinNow <= 0 {
		return c.cfg.Spin
	}
	return c.spinNow
}

// waited adapts the spin to a polled wait of w that ended with every
// frame waited for in (see Config.SpinMax): twice w, between Spin and
// SpinMax, after a wait of at most SpinMax; Spin after a longer one.
// Only the collective's goroutine calls it, and spin.
func (c *Comm) waited(w time.Duration) {
	lo, hi := c.cfg.Spin, c.cfg.SpinMax
	if lo <= 0 || hi <= lo {
		return
	}
	if w > hi {
		c.spinNow = lo
		return
	}
	c.spinNow = min(hi, max(lo, 2*w))
}

// Allgatherv gathers every rank's send into recv.
// Workers send AllgathervSend; the coordinator places each at displs[r] and
// sends every worker one AllgathervRecv holding all regions in rank order.
func (c *Comm) Allgatherv(ctx context.Context, send, recv comm.View, counts, displs []int) error {
	check := func() error {
		total, err := comm.CheckAllgatherv(c.rank, c.size, send, recv, counts, displs)
		if err == nil {
			err = frameLimit(comm.OpAllgatherv, total*send.Type.Size())
		}
		c.cl = call{op: comm.OpAllgatherv, dt: send.Type, counts: counts}
		return err
	}
	return c.run(ctx, comm.OpAllgatherv, check, func() error {
		return c.role.allgatherv(send.Bytes, c.regions(recv, counts, displs))
	})
}

// Allreduce reduces send across ranks into recv. Workers
// send AllreduceSend (op byte + data); the coordinator reduces in rank order
// 0, 1, ..., R-1 and sends AllreduceRecv to every worker.
func (c *Comm) Allreduce(ctx context.Context, send, recv comm.View, op comm.ReduceOp) error {
	check := func() error {
		if err := comm.CheckAllreduce(send, recv, op); err != nil {
			return err
		}
		c.cl = call{op: comm.OpAllreduce, dt: send.Type, n: send.Len(), rop: op}
		return frameLimit(comm.OpAllreduce, len(send.Bytes)+1)
	}
	return c.run(ctx, comm.OpAllreduce, check, func() error {
		return c.role.allreduce(send, recv, op)
	})
}

// Broadcast copies root's buf to every rank. Root 0
// sends Broadcast to every worker; a worker root sends Broadcast to the
// coordinator, which forwards it to every other worker.
func (c *Comm) Broadcast(ctx context.Context, buf comm.View, root int) error {
	check := func() error {
		if err := comm.CheckBroadcast(buf, root, c.size); err != nil {
			return err
		}
		c.cl = call{op: comm.OpBroadcast, dt: buf.Type, n: buf.Len(), root: root}
		return frameLimit(comm.OpBroadcast, len(buf.Bytes))
	}
	return c.runRooted(ctx, comm.OpBroadcast, root, check, func() error {
		return c.role.broadcast(buf.Bytes, root)
	})
}

// Barrier returns once every rank has entered it:
// workers send BarrierReady; once the coordinator has all of them it sends
// BarrierGo to every worker.
func (c *Comm) Barrier(ctx context.Context) error {
	return c.run(ctx, comm.OpBarrier, func() error { c.cl = call{op: comm.OpBarrier}; return nil }, c.role.barrier)
}
