package star

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/xtaci/smux"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/transport"
)

// admission is the coordinator's start-up. One goroutine (run) owns every
// decision: which rank each registered connection holds, how many have
// joined, whether start-up is complete. Other goroutines only report to
// it, through events:
//
//   - the accept loop accepts connections and starts a handshake goroutine
//     for each;
//   - a handshake goroutine reads the Handshake frame and, with a token,
//     challenges the connection and checks its answer (all within
//     HandshakeTimeout of the accept; a silent, garbled or
//     unauthenticated connection is dropped without taking a rank), and
//     asks run to register it; a refused one gets an Abort with the
//     reason, and the real ranks keep coming;
//   - a registered connection is watched by a hold goroutine, blocked in a
//     read: a worker sends nothing until its Ack, so a read that returns
//     means it left (or broke the protocol), and its rank is free again.
//
// Once every worker has registered, run stops the holds (a read deadline
// in the past) and, if every one of them is still there, start-up is
// complete: the listener closes and every worker gets its Ack at once, so
// that all ranks leave start-up together and the collective timeout starts
// counting for all of them at the same time. A worker that left while the
// holds stopped frees its rank, and the others are watched again.
type admission struct {
	cfg      Config
	begun    time.Time // when start-up began
	deadline time.Time // the end of ConnectTimeout (or of the caller's context)
	// callerDeadline is set when the caller's context has a deadline
	// before the end of ConnectTimeout: that deadline is then start-up's.
	callerDeadline bool
	events         chan event
	done           chan struct{} // closed when run has decided: reporters stop
	wg             sync.WaitGroup

	// started is set once every worker has registered: with a token, a
	// Handshake that comes later is refused (its job is running) without
	// a challenge, so that a worker of the next job on the same port,
	// whatever its token, tries again as it would without one.
	started atomic.Bool

	mu   sync.Mutex
	over bool                    // no new handshake starts
	open map[transport.Conn]bool // accepted, not registered: dropped at the end
	// drop holds the connections dropped in their handshake (see
	// dropOpenLocked).
	drop map[transport.Conn]bool

	// Owned by run.
	slots   []*slot
	joined  int
	holding int  // hold goroutines running
	sealing bool // every worker has registered; the holds are stopping
	// refusals counts the connections refused (or workers that left)
	// during start-up, and lastRefusal says why the last one was: only
	// these, so that a flood of hostile connections costs no memory here.
	refusals    int
	lastRefusal string
	// outOfFiles is set while Accept fails for want of file descriptors
	// (EMFILE, ENFILE; cleared by the next Accept that works): rank 0's
	// own limit, not a worker's fault, when start-up ends so.
	outOfFiles atomic.Bool
	// After start-up (see serve): which ranks have a control session, or
	// one being set up, and what to do with a new one.
	serving  bool
	controls []bool
	attach   func(rank int, ctl *controlConn)
	log      func(msg string, args ...any)

	closeOnce sync.Once     // closes the listener
	closed    chan struct{} // closed once the listener is

	// sessions tells the desync check which control sessions may still
	// come (see awaitSession).
	sessions sessionWatch
}

// sessionWatch follows the control sessions after start-up for a
// coordinator that must wait for a worker's (Config.CheckCollectives): a
// session comes once its connection is approved and set up, and no new
// one is approved once the listener has closed.
type sessionWatch struct {
	mu      sync.Mutex
	change  chan struct{} // closed, and replaced, at every change
	setting []bool        // approved and being set up, by rank
	over    bool          // the listener has closed
}

// update applies f under the lock and wakes every waiter.
func (s *sessionWatch) update(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f()
	close(s.change)
	s.change = make(chan struct{})
}

// state reports whether rank's session is being set up, whether the
// listener has closed (no other session will be approved), and a channel
// that closes at the next change.
func (s *sessionWatch) state(rank int) (setting, over bool, change <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.setting[rank], s.over, s.change
}

// controlConn is a control connection the coordinator has set up, for the
// coordinator to attach to its link.
type controlConn struct {
	conn transport.Conn
	sess *smux.Session
	hb   *smux.Stream
	msgs *smux.Stream
}

// slot is a registered worker.
type slot struct {
	rank    int
	link    *link
	holding bool
}

// event is a report to run.
type event struct {
	kind  eventKind
	link  *link
	rank  uint32 // evHello: the Handshake's rank; evHeld: the slot's rank
	size  uint32
	reply chan refusal // evHello, evControl: the zero refusal (registered, approved) or why not
	text  string       // evBad: why the handshake failed
	n     int          // evHeld: bytes the hold read
	err   error        // evHeld: the hold read's error
	// authed is set on evHello and evControl when the connection answered
	// the challenge (with a token; without one there is none).
	authed bool
}

// refusal is run's answer to a Handshake or Control frame: why it is
// refused ("" when it is not), and the cause class its Abort carries.
type refusal struct {
	reason string
	cause  error
}

type eventKind uint8

const (
	evHello       eventKind = iota // a valid Handshake frame arrived
	evBad                          // a handshake failed (garbage, silence, EOF)
	evHeld                         // a hold read returned
	evControl                      // a Control frame arrived
	evControlLost                  // an approved control connection failed to set up
)

// admit runs the coordinator's start-up and returns the links of workers
// 1..size-1, indexed by rank (links[0] is nil), each Acked, and the
// admission, which the coordinator serves on (see serve) or stops.
func admit(ctx context.Context, cfg Config) (*admission, []*link, error) {
	begun := time.Now()
	parent, hasParent := ctx.Deadline()
	ctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	defer cancel()
	deadline, _ := ctx.Deadline()
	// WithTimeout keeps the parent's deadline, exactly, when it is earlier.
	callerDeadline := hasParent && parent.Equal(deadline)
	a := &admission{cfg: cfg, begun: begun, deadline: deadline, callerDeadline: callerDeadline, events: make(chan event), done: make(chan struct{}), closed: make(chan struct{}),
		open: map[transport.Conn]bool{}, slots: make([]*slot, cfg.Size), controls: make([]bool, cfg.Size),
		sessions: sessionWatch{change: make(chan struct{}), setting: make([]bool, cfg.Size)}}
	a.wg.Add(1)
	go a.acceptLoop()
	err := a.run(ctx)
	if err == nil {
		a.started.Store(true)
		a.stopHolds()
		// Connections still in their handshake hold no rank and are no
		// control connections (those come after the Ack): they are
		// dropped now, as start-up ends.
		a.mu.Lock()
		a.dropOpenLocked()
		a.mu.Unlock()
		err = a.ack()
	}
	if err != nil {
		a.stop()
		a.abortJoined(err)
		return nil, nil, err
	}
	links := make([]*link, cfg.Size)
	for r, s := range a.slots {
		if s != nil {
			l := s.link
			l.until, l.timeout = time.Time{}, cfg.Timeout
			l.resume()
			links[r] = l
		}
	}
	return a, links, nil
}

// serve keeps the listener after start-up, for the workers' control
// connections (see control.go): each is approved once per registered rank
// and handed to attach. Any other connection is refused with a reason.
//
// The listener closes as soon as every worker's control connection is
// approved (before the last one is answered, so that once a worker has its
// session, nothing listens on the port any more: a worker of the next job
// on the same port never reaches this one), or once ConnectTimeout has
// passed since start-up (a worker that opens none, like a spec-only one,
// keeps it open no longer), or at stop, whichever comes first. Requests
// already accepted are served to the end.
func (a *admission) serve(attach func(rank int, ctl *controlConn), log func(msg string, args ...any)) {
	a.mu.Lock()
	a.attach, a.log = attach, log
	a.mu.Unlock()
	window := time.NewTimer(a.cfg.ConnectTimeout)
	a.wg.Go(func() {
		defer window.Stop()
		a.serving = true
		for {
			select {
			case ev := <-a.events:
				a.handle(ev)
				if a.allControls() {
					a.closeListener()
				}
			case <-window.C:
				a.closeListener()
			case <-a.done:
				return
			}
		}
	})
}

// allControls reports whether every worker's control connection has been
// approved. Owned by run (or serve).
func (a *admission) allControls() bool {
	for r := 1; r < a.cfg.Size; r++ {
		if !a.controls[r] {
			return false
		}
	}
	return true
}

// closeListener stops accepting connections: the accept loop ends, and
// the handshakes it started go on. It is idempotent.
func (a *admission) closeListener() {
	a.closeOnce.Do(func() {
		close(a.closed)
		_ = a.cfg.Listener.Close()
		a.sessions.update(func() { a.sessions.over = true })
	})
}

// run decides, until every worker has registered and stayed, or ctx ends.
func (a *admission) run(ctx context.Context) error {
	want := a.cfg.Size - 1
	for {
		if !a.sealing && a.joined == want {
			a.sealing = true
			for _, s := range a.slots {
				if s != nil {
					_ = s.link.conn.SetReadDeadline(past) // stop the hold
				}
			}
		}
		if a.sealing && a.holding == 0 {
			if a.joined == want {
				return nil
			}
			// A worker left just as the last one joined: wait for it
			// again, and watch the others again.
			a.sealing = false
			for _, s := range a.slots {
				if s != nil {
					a.hold(s)
				}
			}
			continue
		}
		select {
		case ev := <-a.events:
			a.handle(ev)
		case <-ctx.Done():
			return a.missing(ctx.Err())
		}
	}
}

// handle applies one report.
func (a *admission) handle(ev event) {
	switch ev.kind {
	case evBad:
		a.refused(ev.text)
	case evControl:
		reason := ""
		r := int(ev.rank)
		switch {
		case len(a.cfg.Token) > 0 && !ev.authed:
			reason = "authentication failed: the control connection did not answer a challenge"
		case !a.serving:
			reason = "start-up is not complete: a control connection comes after the Ack"
		case ev.size != uint32(a.cfg.Size):
			reason = fmt.Sprintf("size mismatch: control connection of rank %d says size %d, coordinator has size %d", ev.rank, ev.size, a.cfg.Size)
		case ev.rank == 0 || ev.rank >= uint32(a.cfg.Size):
			reason = fmt.Sprintf("rank %d out of range 1..%d", ev.rank, a.cfg.Size-1)
		case a.controls[r]:
			reason = fmt.Sprintf("rank %d already has a control session", ev.rank)
		default:
			a.controls[r] = true
			a.sessions.update(func() { a.sessions.setting[r] = true })
		}
		if reason != "" {
			a.refused(reason)
		}
		ev.reply <- refusal{reason: reason, cause: errRefusedRemote}
	case evControlLost:
		a.controls[ev.rank] = false
	case evHello:
		if a.serving {
			// Most likely a worker of the next job on this port, while
			// this one still runs: it tries again.
			reason := a.runningReason(int(ev.rank), int(ev.size))
			a.refused(reason)
			ev.reply <- refusal{reason: reason, cause: errRunningRemote}
			return
		}
		if len(a.cfg.Token) > 0 && !ev.authed {
			// Never the case: handshake asks for the answer first.
			reason := "authentication failed: the connection did not answer a challenge"
			a.refused(reason)
			ev.reply <- refusal{reason: reason, cause: ErrAuthentication}
			return
		}
		reason := checkHandshake(ev.rank, ev.size, a.cfg.Size, func(r int) bool { return a.slots[r] != nil })
		if reason != "" {
			a.refused(reason)
			ev.reply <- refusal{reason: reason, cause: errRefusedRemote}
			return
		}
		s := &slot{rank: int(ev.rank), link: ev.link}
		s.link.peer = s.rank
		a.mu.Lock()
		delete(a.open, ev.link.conn)
		a.mu.Unlock()
		a.slots[s.rank] = s
		a.joined++
		ev.reply <- refusal{}
		a.hold(s)
		callHook(s.rank, hookRegistered)
	case evHeld:
		s := a.slots[ev.rank]
		if s == nil || s.link != ev.link {
			return
		}
		s.holding = false
		a.holding--
		if ev.n == 0 && isTimeout(ev.err) {
			// Stopped by run, or the connect timeout is over (run ends
			// too): the worker is still there.
			return
		}
		why := "it sent data before its Ack"
		if ev.n == 0 {
			why = describe(ev.err, a.cfg.Timeout)
		}
		a.refusals++
		a.lastRefusal = fmt.Sprintf("rank %d left before start-up completed: %s", s.rank, why)
		a.slots[s.rank] = nil
		a.joined--
		_ = s.link.conn.Close()
	}
}

// runningReason is why a Handshake that comes after start-up is refused.
// For a Handshake of one of this job's ranks (rank of size; -1: not
// known), it also says that the rank joined already: without a token,
// another process may have taken it.
func (a *admission) runningReason(rank, size int) string {
	why := fmt.Sprintf("start-up is complete: this coordinator's job of %d ranks is running (a worker of another job on the same port?)", a.cfg.Size)
	if rank > 0 && rank < a.cfg.Size && size == a.cfg.Size && len(a.cfg.Token) == 0 {
		why += fmt.Sprintf("; rank %d joined it already: if that was not this process, another took its rank (a token, COBRE_TCP_TOKEN, keeps out processes that do not hold it)", rank)
	}
	return why
}

// refused records a refusal (after start-up, it is logged).
func (a *admission) refused(reason string) {
	if a.serving {
		if a.log != nil {
			a.log("refused a connection after start-up", "reason", reason)
		}
		return
	}
	a.refusals++
	a.lastRefusal = reason
}

// hold starts watching a registered connection until run stops it (at
// once, while sealing).
func (a *admission) hold(s *slot) {
	s.holding = true
	a.holding++
	if a.sealing {
		_ = s.link.conn.SetReadDeadline(past)
	} else {
		_ = s.link.conn.SetReadDeadline(a.deadline)
	}
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		var b [1]byte
		n, err := s.link.conn.Read(b[:])
		a.report(event{kind: evHeld, link: s.link, rank: uint32(s.rank), n: n, err: err})
	}()
}

// report sends ev to run, unless run has decided.
func (a *admission) report(ev event) bool {
	select {
	case a.events <- ev:
		return true
	case <-a.done:
		return false
	}
}

// acceptLoop accepts connections until the listener closes, and starts a
// handshake for each. An Accept that fails while the listener is open (out
// of file descriptors, say, because of a flood of connections, or a
// connection reset before it was set up) does not end it: it is reported,
// and the loop accepts again after a pause that doubles from
// acceptBackoffMin up to acceptBackoffMax, so that the real ranks still
// get in once the flood ebbs.
func (a *admission) acceptLoop() {
	defer a.wg.Done()
	var pause time.Duration
	for {
		conn, err := a.cfg.Listener.Accept()
		if err != nil {
			select {
			case <-a.closed:
				return
			default:
			}
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				a.outOfFiles.Store(true)
			}
			if !a.report(event{kind: evBad, text: fmt.Sprintf("accepting a connection failed: %v", err)}) {
				return
			}
			pause = min(max(2*pause, acceptBackoffMin), acceptBackoffMax)
			t := time.NewTimer(pause)
			select {
			case <-t.C:
			case <-a.closed:
				t.Stop()
				return
			}
			continue
		}
		pause = 0
		a.outOfFiles.Store(false) // it passed
		a.mu.Lock()
		if a.over {
			a.mu.Unlock()
			_ = conn.Close()
			continue
		}
		a.open[conn] = true
		a.wg.Add(1)
		a.mu.Unlock()
		go a.handshake(conn)
	}
}

// The pauses of acceptLoop after a failed Accept.
const (
	acceptBackoffMin = 5 * time.Millisecond
	acceptBackoffMax = time.Second
)

// handshake reads one connection's first frame: a Handshake, which run
// registers, or, after start-up, a Control frame, which run approves and
// this goroutine then sets up and hands to attach. With a token, run
// hears of either only once the connection has answered its challenge.
func (a *admission) handshake(conn transport.Conn) {
	defer a.wg.Done()
	l := newLink(-1, conn, a.cfg.HandshakeTimeout)
	// The whole first frame within HandshakeTimeout.
	l.until = time.Now().Add(a.cfg.HandshakeTimeout)
	var payload [handshakeLen]byte
	err := l.readFrame(TagHandshake, payload[:])
	var te *tagError
	control := errors.As(err, &te) && te.got == TagControl && te.n == controlLen
	if control {
		err = l.readFull(payload[:], 0)
	}
	if err != nil {
		if a.dropped(l.conn) {
			a.refuseDropped(l)
			return
		}
		reason := fmt.Sprintf("bad handshake: %v", err)
		if a.report(event{kind: evBad, text: reason}) {
			a.refuse(l, reason)
		}
		return
	}
	rank, size, _ := ParseHandshake(payload[:])
	kind, first := evHello, TagHandshake
	if control {
		kind, first = evControl, TagControl
	}
	authed := false
	if len(a.cfg.Token) > 0 {
		if kind == evHello && a.started.Load() {
			reason := a.runningReason(int(rank), int(size))
			if a.report(event{kind: evBad, text: reason}) {
				a.refuseWith(l, reason, errRunningRemote)
			}
			return
		}
		if r := challenge(l, a.cfg.Token, first, rank, size, a.cfg.HandshakeTimeout); r != nil {
			if a.dropped(l.conn) {
				a.refuseDropped(l)
				return
			}
			if a.report(event{kind: evBad, text: r.reason}) {
				a.refuseWith(l, r.reason, r.cause)
			}
			return
		}
		authed = true
	}
	reply := make(chan refusal, 1)
	if !a.report(event{kind: kind, link: l, rank: rank, size: size, reply: reply, authed: authed}) {
		if a.dropped(l.conn) {
			a.refuseDropped(l)
		}
		return
	}
	if r := <-reply; r.reason != "" {
		a.refuseWith(l, r.reason, r.cause)
		return
	}
	if control {
		a.setUpControl(l, int(rank))
	}
}

// setUpControl answers an approved Control frame, runs the smux session
// and hands it to attach.
func (a *admission) setUpControl(l *link, rank int) {
	sess, hb, msgs, err := acceptControl(l, rank, a.cfg.Size, time.Now().Add(a.cfg.HandshakeTimeout))
	a.mu.Lock()
	delete(a.open, l.conn)
	attach, over := a.attach, a.over
	a.mu.Unlock()
	// Whatever the outcome, this rank's session is no longer being set up
	// (attached first, so that a waiter woken finds it).
	defer a.sessions.update(func() { a.sessions.setting[rank] = false })
	if err != nil || over {
		_ = l.conn.Close()
		if sess != nil {
			_ = sess.Close()
		}
		a.report(event{kind: evControlLost, rank: uint32(rank)})
		return
	}
	callHook(rank, hookSessionSetUp)
	attach(rank, &controlConn{conn: l.conn, sess: sess, hb: hb, msgs: msgs})
}

// refuse answers a connection that takes no rank with an Abort saying why,
// and closes it.
func (a *admission) refuse(l *link, reason string) {
	a.refuseWith(l, reason, errRefusedRemote)
}

// refuseWith is refuse with the Abort's cause class.
func (a *admission) refuseWith(l *link, reason string, cause error) {
	until := time.Now().Add(a.cfg.ShutdownTimeout)
	l.wdirty = false
	l.startDrain(until)
	_ = l.sendFinal(TagAbort, abortPayload(-1, OpStartup, cause, reason), until)
	l.finish()
	a.mu.Lock()
	delete(a.open, l.conn)
	a.mu.Unlock()
}

// stopHolds ends the hold goroutines once start-up is decided.
func (a *admission) stopHolds() {
	for _, s := range a.slots {
		if s != nil && s.holding {
			_ = s.link.conn.SetReadDeadline(past)
		}
	}
	for a.holding > 0 {
		ev := <-a.events
		if ev.kind == evHeld {
			a.slots[ev.rank].holding = false
			a.holding--
			continue
		}
		a.handle(ev)
	}
}

// stop ends every goroutine of the admission but the registered
// connections and the control sessions handed over: no more accepts, and
// connections that hold no rank close. It is idempotent.
func (a *admission) stop() {
	a.mu.Lock()
	if a.over {
		a.mu.Unlock()
		a.wg.Wait()
		return
	}
	a.over = true
	a.dropOpenLocked()
	a.mu.Unlock()
	a.closeListener()
	close(a.done)
	for _, s := range a.slots {
		if s != nil && s.holding {
			_ = s.link.conn.SetReadDeadline(past)
		}
	}
	a.wg.Wait()
}

// dropOpenLocked drops the connections still in their handshake (they
// hold no rank): each one's handshake goroutine, woken by a passed
// deadline, refuses its connection with cause "running" and closes it.
// Closing them under their goroutines instead gave a worker of the next
// job on this port, which got in just as this job's start-up ended or as
// it closed, an end of file where it retries on that refusal. a.mu must be
// held.
func (a *admission) dropOpenLocked() {
	if a.drop == nil {
		a.drop = map[transport.Conn]bool{}
	}
	for c := range a.open {
		a.drop[c] = true
		_ = c.SetReadDeadline(past)
	}
}

// dropped reports whether conn was dropped in its handshake.
func (a *admission) dropped(conn transport.Conn) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.drop[conn]
}

// refuseDropped answers a connection dropped in its handshake (see
// dropOpenLocked): a refusal with cause "running", so that a worker tries
// again, within a short bound, since the admission is ending.
func (a *admission) refuseDropped(l *link) {
	until := time.Now().Add(min(a.cfg.ShutdownTimeout, droppedWait))
	l.wdirty = false
	l.startDrain(until)
	_ = l.sendFinal(TagAbort, abortPayload(-1, OpStartup, errRunningRemote, a.runningReason(-1, -1)), until)
	l.finish()
	a.mu.Lock()
	delete(a.open, l.conn)
	delete(a.drop, l.conn)
	a.mu.Unlock()
}

// droppedWait bounds how long a dropped connection's refusal may take.
const droppedWait = 500 * time.Millisecond

// missing is the error of a start-up that ended (cause) before every
// worker had registered.
func (a *admission) missing(cause error) error {
	var missing []int
	for r := 1; r < a.cfg.Size; r++ {
		if a.slots[r] == nil {
			missing = append(missing, r)
		}
	}
	within := a.cfg.ConnectTimeout.String()
	if !errors.Is(cause, context.DeadlineExceeded) || a.callerDeadline {
		// The caller's context ended start-up, not ConnectTimeout.
		within = time.Since(a.begun).Round(time.Millisecond).String() + ", when the caller's context ended start-up"
	}
	msg := fmt.Sprintf("%d of %d workers registered within %s; missing ranks %s", a.cfg.Size-1-len(missing), a.cfg.Size-1, within, comm.FormatRanks(missing))
	if a.refusals > 0 {
		msg += fmt.Sprintf("; refused %d connection(s), last: %s", a.refusals, a.lastRefusal)
	}
	blame := missing[0]
	if a.outOfFiles.Load() {
		// The workers may well have come: rank 0 could not take them.
		blame = 0
		msg += fmt.Sprintf("; rank 0 ran out of open files (it holds 2 per worker: %d ranks need a limit, ulimit -n, above %d)", a.cfg.Size, 2*a.cfg.Size+64)
	}
	return &startupError{msg: msg, missing: blame, cause: cause}
}

// startupError is a start-up that failed because of rank missing.
type startupError struct {
	msg     string
	missing int
	cause   error
}

func (e *startupError) Error() string { return e.msg + ": " + e.cause.Error() }
func (e *startupError) Unwrap() error { return e.cause }

// ack sends every registered worker its Ack, all at once.
func (a *admission) ack() error {
	until := time.Now().Add(a.cfg.HandshakeTimeout)
	errs := make([]error, a.cfg.Size)
	var wg sync.WaitGroup
	for _, s := range a.slots {
		if s != nil {
			wg.Go(func() {
				s.link.until = until
				s.link.resume()
				if err := s.link.writeAll(EncodeAck(a.cfg.Size), nil); err != nil {
					errs[s.rank] = err
				}
			})
		}
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			msg := fmt.Sprintf("%d of %d workers registered, but the Ack could not be sent to rank %d (its connection failed before start-up completed: %v); missing ranks [%d]", a.cfg.Size-1, a.cfg.Size-1, r, err, r)
			return &startupError{msg: msg, missing: r, cause: err}
		}
	}
	return nil
}

// abortJoined tells the workers that registered why start-up failed,
// naming the rank that never came, so that they fail naming it too, and
// closes their connections.
func (a *admission) abortJoined(err error) {
	blame := -1
	var cause error = err
	var se *startupError
	if errors.As(err, &se) {
		blame = se.missing
		if se.cause == context.DeadlineExceeded {
			cause = remoteTimeout{} // the rank did not come in time
		}
	}
	reason := fmt.Sprintf("rank %d failed during %s (seen by rank 0): %v", blame, OpStartup, err)
	payload := abortPayload(blame, OpStartup, cause, reason)
	until := time.Now().Add(a.cfg.ShutdownTimeout)
	var wg sync.WaitGroup
	for _, s := range a.slots {
		if s != nil {
			wg.Go(func() {
				s.link.resume()
				s.link.startDrain(until)
				_ = s.link.sendFinal(TagAbort, payload, until)
				s.link.finish()
			})
		}
	}
	wg.Wait()
}
