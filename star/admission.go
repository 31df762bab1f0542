package star

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/starcomm/starcomm/transport"
)

// admission is the coordinator's start-up. One goroutine (run) owns every
// decision: which rank each registered connection holds, how many have
// joined, whether start-up is complete. Other goroutines only report to
// it, through events:
//
//   - the accept loop accepts connections and starts a handshake goroutine
//     for each;
//   - a handshake goroutine reads the Handshake frame (within
//     HandshakeTimeout; a silent or garbled connection is dropped without
//     taking a rank) and asks run to register it; a refused one gets an
//     Abort with the reason, and the real ranks keep coming;
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
	deadline time.Time // the end of ConnectTimeout
	events   chan event
	done     chan struct{} // closed when run has decided: reporters stop
	wg       sync.WaitGroup

	mu   sync.Mutex
	over bool                    // no new handshake starts
	open map[transport.Conn]bool // accepted, not registered: closed at the end

	// Owned by run.
	slots    []*slot
	joined   int
	holding  int  // hold goroutines running
	sealing  bool // every worker has registered; the holds are stopping
	refusals []string
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
	reply chan string // evHello: "" (registered) or the refusal's reason
	text  string      // evBad: why the handshake failed
	n     int         // evHeld: bytes the hold read
	err   error       // evHeld: the hold read's error
}

type eventKind uint8

const (
	evHello eventKind = iota // a valid Handshake frame arrived
	evBad                    // a handshake failed (garbage, silence, EOF)
	evHeld                   // a hold read returned
)

// admit runs the coordinator's start-up and returns the links of workers
// 1..size-1, indexed by rank (links[0] is nil), each Acked.
func admit(ctx context.Context, cfg Config) ([]*link, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	defer cancel()
	deadline, _ := ctx.Deadline()
	a := &admission{cfg: cfg, deadline: deadline, events: make(chan event), done: make(chan struct{}),
		open: map[transport.Conn]bool{}, slots: make([]*slot, cfg.Size)}
	a.wg.Add(1)
	go a.acceptLoop()
	err := a.run(ctx)
	a.stop()
	if err == nil {
		err = a.ack()
	}
	if err != nil {
		a.abortJoined(err)
		return nil, err
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
	return links, nil
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
		a.refusals = append(a.refusals, ev.text)
	case evHello:
		reason := checkHandshake(ev.rank, ev.size, a.cfg.Size, func(r int) bool { return a.slots[r] != nil })
		if reason != "" {
			a.refusals = append(a.refusals, reason)
			ev.reply <- reason
			return
		}
		s := &slot{rank: int(ev.rank), link: ev.link}
		s.link.peer = s.rank
		a.mu.Lock()
		delete(a.open, ev.link.conn)
		a.mu.Unlock()
		a.slots[s.rank] = s
		a.joined++
		ev.reply <- ""
		a.hold(s)
		if testHook != nil {
			testHook(s.rank, hookRegistered)
		}
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
		a.refusals = append(a.refusals, fmt.Sprintf("rank %d left before start-up completed: %s", s.rank, why))
		a.slots[s.rank] = nil
		a.joined--
		_ = s.link.conn.Close()
	}
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
// handshake for each.
func (a *admission) acceptLoop() {
	defer a.wg.Done()
	for {
		conn, err := a.cfg.Listener.Accept()
		if err != nil {
			return
		}
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

// handshake reads one connection's Handshake and has run register it.
func (a *admission) handshake(conn transport.Conn) {
	defer a.wg.Done()
	l := newLink(-1, conn, a.cfg.HandshakeTimeout)
	// The whole Handshake frame within HandshakeTimeout.
	l.until = time.Now().Add(a.cfg.HandshakeTimeout)
	var payload [handshakeLen]byte
	if err := l.readFrame(TagHandshake, payload[:]); err != nil {
		reason := fmt.Sprintf("bad handshake: %v", err)
		if a.report(event{kind: evBad, text: reason}) {
			a.refuse(l, reason)
		}
		return
	}
	rank, size, _ := ParseHandshake(payload[:])
	reply := make(chan string, 1)
	if !a.report(event{kind: evHello, link: l, rank: rank, size: size, reply: reply}) {
		return
	}
	if reason := <-reply; reason != "" {
		a.refuse(l, reason)
	}
}

// refuse answers a connection that takes no rank with an Abort saying why,
// and closes it.
func (a *admission) refuse(l *link, reason string) {
	until := time.Now().Add(a.cfg.ShutdownTimeout)
	l.wdirty = false
	l.startDrain(until)
	_ = l.sendFinal(TagAbort, abortPayload(-1, OpStartup, errRefusedRemote, reason), until)
	l.finish()
	a.mu.Lock()
	delete(a.open, l.conn)
	a.mu.Unlock()
}

// stop ends every goroutine of the start-up but the registered
// connections: no more accepts, and connections that hold no rank close.
func (a *admission) stop() {
	a.mu.Lock()
	a.over = true
	for c := range a.open {
		_ = c.Close()
	}
	a.mu.Unlock()
	_ = a.cfg.Listener.Close()
	close(a.done)
	for _, s := range a.slots {
		if s != nil && s.holding {
			_ = s.link.conn.SetReadDeadline(past)
		}
	}
	a.wg.Wait()
}

// missing is the error of a start-up that ended (cause) before every
// worker had registered.
func (a *admission) missing(cause error) error {
	var missing []int
	for r := 1; r < a.cfg.Size; r++ {
		if a.slots[r] == nil {
			missing = append(missing, r)
		}
	}
	msg := fmt.Sprintf("%d of %d workers registered within %v; missing ranks %v", a.cfg.Size-1-len(missing), a.cfg.Size-1, a.cfg.ConnectTimeout, missing)
	if len(a.refusals) > 0 {
		msg += fmt.Sprintf("; refused %d connection(s), last: %s", len(a.refusals), a.refusals[len(a.refusals)-1])
	}
	return &startupError{msg: msg, missing: missing[0], cause: cause}
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
