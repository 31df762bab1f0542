package star

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xtaci/smux"

	"github.com/starcomm/starcomm/transport"
)

// The control session (see the package documentation): its frames,
// streams and heartbeats.

// TagControl is the first frame of a control connection, in each
// direction: payload rank u32 BE, size u32 BE. It never appears on a data
// link.
const TagControl byte = 0x0C

// controlLen is the payload size of a Control frame.
const controlLen = 8

// EncodeControl returns the Control frame for rank of a communicator of
// size ranks.
func EncodeControl(rank, size int) []byte {
	b := make([]byte, HeaderSize+controlLen)
	PutHeader(b, TagControl, controlLen)
	binary.BigEndian.PutUint32(b[5:9], uint32(rank))
	binary.BigEndian.PutUint32(b[9:13], uint32(size))
	return b
}

// Message kinds on the control session's message stream.
const (
	// msgAbort, coordinator to worker: an Abort frame's payload, for the
	// worker's running or next collective (as coordinators before
	// msgAbortAfter sent it; still understood).
	msgAbort byte = 1
	msgCall  byte = 2 // worker to coordinator: a collective's fingerprint
	// msgAbortAfter, coordinator to worker: a collective's sequence
	// number (u64 BE; 0: none), then an Abort frame's payload, for the
	// worker's collectives after that one (see Comm.interruptAfter): the
	// coordinator's Aborts, which leave alone a collective whose result
	// it has sent in full.
	msgAbortAfter byte = 3
	// msgFailed, worker to coordinator: a collective's sequence number
	// (u64 BE), then an Abort frame's payload: the worker failed that
	// collective for a cause of its own (its context ended, or its
	// communicator was closed), or because rank 0 let its timeout pass
	// (the Abort names rank 0), whether or not it had sent its part (see
	// Comm.peerFailed). Its data link's Abort says the same, but rank 0
	// reads that link only for the worker's next frame.
	msgFailed byte = 4
	// msgHere, coordinator to worker: a collective's sequence number (u64
	// BE), then how long ago the coordinator began it (nanoseconds, u64
	// BE): sent once its wait for every worker's header has lasted
	// hereAfter. Sent for a streamed allreduce,
	// whose worker frames the coordinator takes only as the lower ranks'
	// data comes, and a relayed allgatherv, whose worker frames it takes
	// once every header is in (see link.hereExtend). Workers that do not
	// know it skip it.
	msgHere byte = 5
	// msgBusy, coordinator to worker: a collective's sequence number (u64
	// BE), sent while the coordinator is still in that collective (sending
	// the result to a slower rank, or waiting for one), every busyEvery
	// once the collective has lasted that long, to the workers that
	// busyMonitor names: a worker that runs it, or already waits for the
	// coordinator in a later one, moves its deadlines on to a timeout from
	// then (see link.busyExtend); one that has not begun it ignores it. Workers
	// that do not know it skip it (earlier versions heed it only in a
	// later collective).
	msgBusy byte = 6
)

// maxCalls bounds the fingerprints a coordinator keeps unread per worker
// (see control.calls), and those a worker keeps while its session opens
// (see worker.checkCall): the coordinator's collective takes one per
// collective, and a worker runs at most one collective ahead of it, so
// only fingerprints of collectives already over are ever dropped.
const maxCalls = 64

// Bytes on the heartbeat stream: a heartbeat, and the farewell an end
// writes when it ends its session on purpose (Close, or a failed
// collective), so that its peer can tell that end from the end of a
// process (see exitGrace).
const (
	hbBeat     byte = 0
	hbFarewell byte = 1
)

// exitGrace is how long an end whose peer's control connection ended
// without a farewell (its process ended: the system closed or reset the
// connection) waits before it declares the peer gone: long enough for what
// the peer's process said before it went (a worker's Abort on a data link
// being read, the coordinator's Abort on the message stream) to arrive
// first, short against any timeout.
const exitGrace = 100 * time.Millisecond

// maxMsg bounds a control message's body.
const maxMsg = MaxAbortReason + 64

// smuxConfig is the smux configuration of every control session: small
// buffers, and no keep-alive (see above).
func smuxConfig() *smux.Config {
	c := smux.DefaultConfig()
	c.KeepAliveDisabled = true
	c.MaxFrameSize = 8 << 10
	c.MaxReceiveBuffer = 1 << 20
	c.MaxStreamBuffer = 256 << 10
	return c
}

// control is one end of a control session.
type control struct {
	c     *Comm
	peer  int
	conn  transport.Conn
	sess  *smux.Session
	hb    *smux.Stream
	msgs  *smux.Stream
	heard atomic.Int64 // when the peer last showed life (unix nanoseconds)
	// farewell is set once the peer's farewell was read; bade once this
	// end wrote its own. hbmu (a lock: a token in it) orders the writes
	// on the heartbeat stream; bade is read and written under it.
	farewell atomic.Bool
	bade     bool
	hbmu     chan struct{}

	stopped  chan struct{}
	stopOnce sync.Once
	// aborted gets a token when the coordinator's Abort was read (on a
	// worker) or the worker's news that it failed (msgFailed, on the
	// coordinator), msgsDone closes when the reader of messages ends
	// (msgsErr is then why): what a rank whose data link ended waits for
	// (see Comm.sessionWords).
	aborted  chan struct{}
	msgsDone chan struct{}
	msgsErr  error
	// On the coordinator: the worker's fingerprints that the reader of
	// messages read and the collective's goroutine has not taken yet
	// (see takeCall), oldest first, under callsMu; callsIn gets a token
	// when one comes, and when the collective's link is cancelled.
	callsMu sync.Mutex
	calls   [][]byte
	callsIn chan struct{}
	// wg counts the session's goroutines; gomu orders starting one (see
	// goUnlessStopped) against stop's Wait.
	wg   sync.WaitGroup
	gomu sync.Mutex
	// wmu (a lock: a token in it) lets one writer at a time on msgs; a
	// writer waits for it as for the write itself, durably (a sync.Mutex
	// behind a write that waits for its deadline would stop a
	// testing/synctest bubble's clock).
	wmu  chan struct{}
	wbuf []byte // a message being written, under wmu
	rhdr [5]byte
}

// newControl wraps an established session.
func newControl(c *Comm, peer int, conn transport.Conn, sess *smux.Session, hb, msgs *smux.Stream) *control {
	ctl := &control{c: c, peer: peer, conn: conn, sess: sess, hb: hb, msgs: msgs, stopped: make(chan struct{}),
		aborted: make(chan struct{}, 1), msgsDone: make(chan struct{}), hbmu: make(chan struct{}, 1), wmu: make(chan struct{}, 1), callsIn: make(chan struct{}, 1)}
	ctl.heard.Store(time.Now().UnixNano())
	return ctl
}

// start runs the heartbeats and the reader of the peer's messages (and,
// once per communicator, its away detector).
func (ctl *control) start() {
	ctl.c.watchAway()
	ctl.wg.Go(ctl.beat)
	ctl.wg.Go(ctl.listen)
	if ctl.c.rank != 0 {
		ctl.wg.Go(ctl.readMessages)
	} else {
		ctl.wg.Go(ctl.readWorkerMessages)
	}
}

// stop ends the session, with a farewell unless the communicator failed,
// and waits for its goroutines.
func (ctl *control) stop() {
	ctl.stopOnce.Do(func() {
		ctl.gomu.Lock()
		close(ctl.stopped)
		ctl.gomu.Unlock()
		if !ctl.c.hasFailed() {
			// After a failure the worker said it already (see Comm.fail),
			// and the coordinator's Aborts said more: Close is then at once.
			ctl.bidFarewell(time.Now().Add(farewellWait), nil)
		}
		_ = ctl.sess.Close()
		_ = ctl.conn.Close()
	})
	ctl.wg.Wait()
}

// goUnlessStopped runs f on a goroutine of the session, which stop waits
// for, unless stop has begun; it reports whether f runs. (A goroutine
// started once stop's Wait may have returned would outlive the session.)
func (ctl *control) goUnlessStopped(f func()) bool {
	ctl.gomu.Lock()
	defer ctl.gomu.Unlock()
	if ctl.isStopped() {
		return false
	}
	ctl.wg.Go(f)
	return true
}

// isStopped reports whether stop has begun.
func (ctl *control) isStopped() bool {
	select {
	case <-ctl.stopped:
		return true
	default:
		return false
	}
}

// beat writes a heartbeat every Liveness/10 until the session ends.
func (ctl *control) beat() {
	live := ctl.c.cfg.Liveness
	t := time.NewTicker(live / 10)
	defer t.Stop()
	b := [1]byte{hbBeat}
	for {
		select {
		case <-ctl.stopped:
			return
		case <-t.C:
		}
		ctl.c.hook(hookBeat)
		select {
		case ctl.hbmu <- struct{}{}:
		case <-ctl.stopped:
			return
		}
		_ = ctl.hb.SetWriteDeadline(time.Now().Add(live))
		_, err := ctl.hb.Write(b[:])
		<-ctl.hbmu
		if err != nil {
			return // the peer's end notices the silence
		}
	}
}

// watchAway starts, once, the away detector (see Comm.away): a goroutine
// that does nothing but tick (see tickEvery), until
// Close has finished. It does no I/O, so nothing but this process not
// running can hold a tick up (a heartbeat blocked on a peer that reads
// nothing does not).
func (c *Comm) watchAway() {
	c.awayOnce.Do(func() {
		c.beatAt.Store(int64(c.since(time.Now()))) // a process stopped before the first tick was away too
		t := time.NewTicker(c.tickEvery())
		go func() {
			defer t.Stop()
			for {
				select {
				case <-c.closeDone:
					return
				case <-t.C:
					c.ticked(time.Now())
				}
			}
		}()
	})
}

// since is now on the monotonic clock of the communicator, from its epoch
// (at least 1 ns: 0 stands for "never").
func (c *Comm) since(now time.Time) time.Duration { return max(now.Sub(c.epoch), 1) }

// awayMin is the least gap between two ticks of the away detector that
// counts as this process being away: eight tenths of the liveness
// timeout. A peer declares this rank unresponsive after a whole liveness
// timeout without a heartbeat (they go every tenth of it), so a shorter
// absence cannot be the reason.
func (c *Comm) awayMin() time.Duration { return c.cfg.Liveness * 8 / 10 }

// ticked records a tick of the away detector at now (see Comm.away and
// Comm.absentAfter). It records a gap before it moves beatAt: a reader
// that sees the new beat sees the gap that ended there too (the ticker is
// the only writer).
func (c *Comm) ticked(now time.Time) {
	at := c.since(now)
	prev := time.Duration(c.beatAt.Load())
	if prev != 0 {
		g := &tickGap{end: at, length: at - prev}
		if g.length > c.absentMin() {
			c.absentGap.Store(g)
		}
		if g.length > c.awayMin() {
			c.awayGap.Store(g)
		}
	}
	c.beatAt.Store(int64(at))
}

// tickGap is a gap between two ticks of the away detector: when it ended
// and how long it was, on the communicator's clock (see Comm.since),
// stored and read as one.
type tickGap struct{ end, length time.Duration }

// tickEvery is the away detector's period: a tenth of the liveness
// timeout, as the heartbeats. Each tick wakes the process (about 150 µs
// of CPU on a 2-vCPU VM): ten times as often made a rank that waits a
// second for a late peer burn 2.1 ms instead of 0.5 ms.
func (c *Comm) tickEvery() time.Duration { return c.cfg.Liveness / 10 }

// absentMin is the least gap between two ticks of the away detector that
// counts as an absence for the data links (see absentAfter): three
// periods (3 s by default; a shorter absence is what lateMin finds). A
// tick held up by a busy host counts too; it only lets a read take bytes
// that are there.
func (c *Comm) absentMin() time.Duration { return 3 * c.tickEvery() }

// absentAfter reports whether this process was absent (see absentMin)
// at some time after t: its away detector has not ticked for longer than
// absentMin (it is only now running again), or such a gap ended after t.
// A read whose deadline, set at t, passed while its bytes waited unread
// then reads on (see link.late), whenever the process noticed it.
func (c *Comm) absentAfter(t time.Time) bool {
	return c.goneSince(t, time.Now(), c.absentMin(), &c.absentGap)
}

// absentAcross reports whether this process was absent at t, a deadline
// that it noticed only at now, for longer than least and absentMin: its away
// detector has not ticked since before t for that long (it is only now
// running again), or its last gap that long began before t and ended
// after it. Without control sessions: never.
func (c *Comm) absentAcross(t, now time.Time, least time.Duration) bool {
	beat := time.Duration(c.beatAt.Load())
	if c.cfg.Liveness <= 0 || beat == 0 {
		return false
	}
	at, at2 := c.since(t), c.since(now)
	least = max(least, c.absentMin())
	if beat < at && at2-beat > least {
		return true
	}
	g := c.absentGap.Load()
	return g != nil && g.end > at && g.end-g.length < at && g.length > least
}

// goneSince reports whether, by now, the away detector has not ticked for
// longer than least, or a gap that long (the last, in *last) ended after
// t. Without control sessions: never.
func (c *Comm) goneSince(t, now time.Time, least time.Duration, last *atomic.Pointer[tickGap]) bool {
	beat := time.Duration(c.beatAt.Load())
	if c.cfg.Liveness <= 0 || beat == 0 {
		return false
	}
	if c.since(now)-beat > least {
		return true
	}
	g := last.Load()
	return g != nil && g.end > c.since(t)
}

// away reports whether this process was away (stopped, its VM paused, or
// starved of CPU) long enough for its peers to find it unresponsive, and
// for how long (0 if not): the away detector has not ticked for more than
// awayMin (the process is only now running again), or a gap that long
// between its ticks ended less than two liveness timeouts ago. A rank
// without control sessions never knows.
func (c *Comm) away(now time.Time) (time.Duration, bool) {
	live := c.cfg.Liveness
	beat := time.Duration(c.beatAt.Load())
	if live <= 0 || beat == 0 {
		return 0, false
	}
	at := c.since(now)
	if gap := at - beat; gap > c.awayMin() {
		return gap, true
	}
	if g := c.awayGap.Load(); g != nil && at-g.end < 2*live {
		return g.length, true
	}
	return 0, false
}

// awaySince reports whether this process was away (see away) at some time
// after t: it is only now running again, or its last absence ended after
// t.
func (c *Comm) awaySince(t, now time.Time) bool {
	return c.goneSince(t, now, c.awayMin(), &c.awayGap)
}

// farewellWait bounds how long stop waits for its farewell to be written
// and sent.
const farewellWait = 100 * time.Millisecond

// bidFarewell writes the farewell, once, within until, and waits, at most
// until then, for the system to have sent it (where the conn tells): a
// process that exits with heartbeats it received unread resets the
// connection, and the system drops what it had not sent yet. It gives up
// when quit (nil: never) closes first.
func (ctl *control) bidFarewell(until time.Time, quit <-chan struct{}) {
	// A beat being written holds hbmu; it can block only while the
	// peer reads nothing, and then the farewell would not get through
	// either.
	select {
	case ctl.hbmu <- struct{}{}:
	default:
		wait := time.NewTimer(time.Until(until))
		defer wait.Stop()
		select {
		case ctl.hbmu <- struct{}{}:
		case <-wait.C:
			return
		case <-quit:
			return
		}
	}
	defer func() { <-ctl.hbmu }()
	if ctl.bade {
		return
	}
	ctl.bade = true
	_ = ctl.hb.SetWriteDeadline(until)
	if _, err := ctl.hb.Write([]byte{hbFarewell}); err != nil {
		return
	}
	if uc, ok := ctl.conn.(transport.UnsentCounter); ok {
		awaitUnsent(uc, until, quit)
	}
}

// listen reads the peer's heartbeats and declares the peer unresponsive
// once nothing has been heard from it for Liveness, whether the session
// stays open and silent (a frozen process, a cut link) or ends after the
// peer's farewell (the peer closed, or failed: its data link will tell
// more, if it can). A session that ends without the peer's farewell
// (closed or reset by the peer's system) means that the peer's process
// ended: after exitGrace the peer is declared gone (see exited).
func (ctl *control) listen() {
	live := ctl.c.cfg.Liveness
	var buf [64]byte
	var lost error
	graced := false // the grace of a late deadline was given (see below)
	for lost == nil {
		callHook(ctl.peer, hookHeartbeat)
		last := time.Unix(0, ctl.heard.Load())
		_ = ctl.hb.SetReadDeadline(last.Add(live))
		n, err := settled{ctl.hb}.Read(buf[:])
		if n > 0 {
			ctl.heardBytes(buf[:n])
			graced = false
			continue
		}
		switch {
		case ctl.isStopped():
			return
		case errors.Is(err, smux.ErrTimeout):
			// The stream's own deadline. A timeout of the connection
			// under the session (ETIMEDOUT from the system's user
			// timeout or keep-alive, a deadline on the connection)
			// ends the session: smux then returns it from every read
			// at once, and it is lost below, not waited on here.
			now := time.Now()
			if (ctl.c.awaySince(last, now) || now.Sub(last.Add(live)) >= lateMin(live)) && !graced {
				// This process was away itself (stopped, paused,
				// starved: its tickers stopped, or it saw the
				// deadline late), and the peer's heartbeats may wait
				// unread in the connection: silence while this
				// process was away is not the peer's. Once, until
				// the peer is heard again, the peer gets a whole
				// liveness timeout from now.
				graced = true
				ctl.heard.Store(now.UnixNano())
				continue
			}
			if time.Since(last) >= live {
				ctl.c.unresponsive(ctl.peer, time.Since(last), nil, ctl.stopped)
				return
			}
		case err != nil:
			lost = err
		}
	}
	if !ctl.farewell.Load() && (errors.Is(lost, io.EOF) || peerGone(lost)) {
		ctl.exited(lost)
		return
	}
	// The session ended: silence from now on.
	wait := time.NewTimer(time.Until(time.Unix(0, ctl.heard.Load()).Add(live)))
	defer wait.Stop()
	select {
	case <-ctl.stopped:
	case <-wait.C:
		if ctl.c.rank != 0 && ctl.farewell.Load() && ctl.c.awaitsUnread(ctl.peer) {
			// The coordinator said farewell, and its data link may
			// hold more (its Shutdown, an Abort): the worker reads
			// them in its next collective, and they say more than
			// silence.
			return
		}
		ctl.c.unresponsive(ctl.peer, time.Since(time.Unix(0, ctl.heard.Load())), fmt.Errorf("control connection lost: %w", lost), ctl.stopped)
	}
}

// settled reads a stream of the session so that the bytes that came
// before the connection's end are read before its error: smux's reader,
// when both are ready, may report the end first while such bytes are
// still buffered, and a second read returns those first.
type settled struct{ s *smux.Stream }

func (r settled) Read(p []byte) (int, error) {
	n, err := r.s.Read(p)
	if n == 0 && err != nil && len(p) > 0 && !errors.Is(err, smux.ErrTimeout) {
		if n, _ := r.s.Read(p); n > 0 {
			return n, nil
		}
	}
	return n, err
}

// heardBytes records bytes read from the heartbeat stream.
func (ctl *control) heardBytes(b []byte) {
	ctl.heard.Store(time.Now().UnixNano())
	if bytes.IndexByte(b, hbFarewell) >= 0 {
		ctl.farewell.Store(true)
	}
}

// exited declares the peer gone, its control connection having ended
// (lost) without its farewell, once exitGrace has passed (or, on a worker,
// the coordinator's messages are all read, if sooner), unless stop comes
// first. An Abort that arrives meanwhile, or a collective that fails on
// its own, wins (see Comm.interrupt).
//
// While the peer's data link may hold bytes that this end has not read
// and that may complete collectives this end has not reached yet (a
// worker that was the root of a broadcast rank 0 has not called yet; rank
// 0's results, or its Abort, that a worker has not read yet), it waits,
// looking again every exitGrace (see Comm.awaitsUnread): they are this
// end's to read first, and the data link tells what follows them (the end
// of the stream, or an Abort naming the rank really at fault). Once that
// wait is over it waits exitGrace more, so that a reader acts on what it
// read first.
func (ctl *control) exited(lost error) {
	grace := time.NewTimer(exitGrace)
	defer grace.Stop()
	for waited := false; ; {
		select {
		case <-ctl.stopped:
			return
		case <-grace.C:
		}
		if ctl.c.hasFailed() {
			return // nothing more to declare
		}
		was := waited
		waited = ctl.c.awaitsUnread(ctl.peer)
		if !waited && !was {
			break
		}
		grace.Reset(exitGrace)
	}
	if ctl.c.rank != 0 {
		// The coordinator's last messages come before its end: an Abort
		// among them names the rank really at fault, and the coordinator
		// that sent it is not taken for a crash.
		select {
		case <-ctl.stopped:
			return
		case <-ctl.msgsDone:
		}
		if ctl.farewell.Load() {
			return
		}
	}
	ctl.c.declare(ctl.peer, &ExitedError{Rank: ctl.peer, Err: lost}, "peer exited")
}

// readLoop reads the peer's messages, each a sign of life, and hands
// them to handle until the session ends; msgsDone then closes, msgsErr
// saying why.
func (ctl *control) readLoop(handle func(kind byte, body []byte)) {
	defer close(ctl.msgsDone)
	for {
		kind, body, err := ctl.readMsg(time.Time{})
		if err != nil {
			ctl.msgsErr = err
			return
		}
		ctl.heard.Store(time.Now().UnixNano())
		handle(kind, body)
	}
}

// readMessages reads the coordinator's messages on a worker.
func (ctl *control) readMessages() {
	ctl.readLoop(func(kind byte, body []byte) {
		switch {
		case kind == msgAbortAfter && len(body) >= 8:
			ctl.c.interruptAfter(binary.BigEndian.Uint64(body), parseAbort(0, body[8:]))
		case kind == msgAbort:
			ctl.c.interrupt(parseAbort(0, body))
		case kind == msgHere && len(body) >= 8:
			var ago time.Duration
			if len(body) >= 16 {
				ago = time.Duration(min(binary.BigEndian.Uint64(body[8:]), 1<<62))
			}
			if w, ok := ctl.c.role.(*worker); ok {
				w.up.hereExtend(binary.BigEndian.Uint64(body), time.Now().Add(-ago))
			}
			return
		case kind == msgBusy && len(body) >= 8:
			if w, ok := ctl.c.role.(*worker); ok {
				w.up.busyExtend(binary.BigEndian.Uint64(body), time.Now())
			}
			return
		default:
			return
		}
		// The coordinator told this worker why it ends: as good as a
		// farewell (see exited).
		ctl.farewell.Store(true)
		select {
		case ctl.aborted <- struct{}{}:
		default:
		}
	})
}

// readWorkerMessages reads a worker's messages on the coordinator: its
// fingerprints, kept for the collective's goroutine (see takeCall), and
// the news that it failed a collective (see Comm.peerFailed). Kinds it
// does not know are skipped.
func (ctl *control) readWorkerMessages() {
	defer ctl.poke() // a waiter sees msgsDone
	ctl.readLoop(func(kind byte, body []byte) {
		switch {
		case kind == msgCall && len(body) >= 8:
			ctl.callsMu.Lock()
			ctl.calls = pushCall(ctl.calls, body)
			ctl.callsMu.Unlock()
			ctl.poke()
		case kind == msgFailed && len(body) >= 8:
			ab := parseAbort(ctl.peer, body[8:])
			ab.away, _ = ctl.c.away(time.Now()) // whether this rank was away as it came
			ctl.c.peerFailed(ctl.peer, binary.BigEndian.Uint64(body), ab)
			select {
			case ctl.aborted <- struct{}{}: // see Comm.sessionWords
			default:
			}
		}
	})
}

// pushCall appends fingerprint fp to the queue q of at most maxCalls,
// dropping the oldest when it is full.
func pushCall(q [][]byte, fp []byte) [][]byte {
	if len(q) == maxCalls {
		q = append(q[:0], q[1:]...)
	}
	return append(q, fp)
}

// poke wakes the collective's goroutine waiting for a fingerprint (see
// takeCall).
func (ctl *control) poke() {
	select {
	case ctl.callsIn <- struct{}{}:
	default:
	}
}

// takeCall returns the worker's fingerprint of collective seq, if it has
// come, dropping those of earlier collectives (sent before the coordinator
// attached the session).
func (ctl *control) takeCall(seq uint64) ([]byte, bool) {
	ctl.callsMu.Lock()
	defer ctl.callsMu.Unlock()
	for len(ctl.calls) > 0 {
		fp := ctl.calls[0]
		ctl.calls[0] = nil
		ctl.calls = ctl.calls[1:]
		if binary.BigEndian.Uint64(fp) >= seq {
			return fp, true
		}
	}
	return nil, false
}

// send writes one message, within until.
func (ctl *control) send(kind byte, body []byte, until time.Time) error {
	ctl.wmu <- struct{}{}
	defer func() { <-ctl.wmu }()
	// One Write, so one smux frame: each Write waits for smux's sender.
	ctl.wbuf = binary.BigEndian.AppendUint32(ctl.wbuf[:0], uint32(len(body)+1))
	ctl.wbuf = append(append(ctl.wbuf, kind), body...)
	_ = ctl.msgs.SetWriteDeadline(until)
	_, err := ctl.msgs.Write(ctl.wbuf)
	if err != nil {
		// A Write that gave up (its deadline passed) may have left the
		// frame queued, smux's sender still to copy it from wbuf: the
		// next message gets a buffer of its own.
		ctl.wbuf = nil
	}
	return err
}

// readMsg reads one message, within until (zero: no deadline). Its one
// reader calls it: readMessages on a worker, readWorkerMessages on the
// coordinator.
func (ctl *control) readMsg(until time.Time) (kind byte, body []byte, err error) {
	_ = ctl.msgs.SetReadDeadline(until)
	if _, err := io.ReadFull(settled{ctl.msgs}, ctl.rhdr[:]); err != nil {
		return 0, nil, err
	}
	n := int(binary.BigEndian.Uint32(ctl.rhdr[:4])) - 1
	if n < 0 || n > maxMsg {
		return 0, nil, fmt.Errorf("star: control message of %d bytes", n)
	}
	body = make([]byte, n)
	if _, err := io.ReadFull(settled{ctl.msgs}, body); err != nil {
		return 0, nil, err
	}
	return ctl.rhdr[4], body, nil
}

// alive describes how long ago the peer was last heard of, for reports.
func (ctl *control) alive(now time.Time) string {
	ago := now.Sub(time.Unix(0, ctl.heard.Load()))
	if ago < ctl.c.cfg.Liveness/2 {
		return "alive"
	}
	return fmt.Sprintf("silent for %v", ago.Round(time.Millisecond))
}

// openControl opens a worker's control session (see above), within
// HandshakeTimeout. An error means the coordinator does not offer one (a
// spec-only coordinator) or could not be reached again; the worker then
// goes on without.
func openControl(ctx context.Context, c *Comm) (*control, error) {
	cfg := c.cfg
	ctx, cancel := context.WithTimeout(ctx, cfg.HandshakeTimeout)
	defer cancel()
	conn, err := cfg.Dialer.Dial(ctx, cfg.Addr)
	if err != nil {
		return nil, err
	}
	deadline, _ := ctx.Deadline()
	l := newLink(0, conn, cfg.HandshakeTimeout)
	l.until = deadline
	stop := context.AfterFunc(ctx, func() { l.cancel(ctx.Err()) })
	defer stop()
	var payload [controlLen]byte
	err = l.writeAll(EncodeControl(cfg.Rank, cfg.Size), nil)
	if err == nil && len(cfg.Token) > 0 {
		err = answer(l, cfg.Token, TagControl, cfg.Rank, cfg.Size)
	}
	if err == nil {
		err = l.readFrame(TagControl, payload[:])
	}
	if err == nil && (binary.BigEndian.Uint32(payload[0:4]) != uint32(cfg.Rank) || binary.BigEndian.Uint32(payload[4:8]) != uint32(cfg.Size)) {
		err = fmt.Errorf("the coordinator answered rank %d of %d", binary.BigEndian.Uint32(payload[0:4]), binary.BigEndian.Uint32(payload[4:8]))
	}
	if err == nil && !stop() {
		// The handshake timeout fired as the answer came: its cancel
		// may set the connection's deadline in the past at any moment
		// from now, which would poison the session.
		err = fmt.Errorf("control session: no answer within %v: %w", cfg.HandshakeTimeout, context.DeadlineExceeded)
	}
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	_ = conn.SetDeadline(time.Time{})
	sess, err := smux.Client(conn, smuxConfig())
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	hb, err := sess.OpenStream()
	var msgs *smux.Stream
	if err == nil {
		msgs, err = sess.OpenStream()
	}
	if err != nil {
		_ = sess.Close()
		_ = conn.Close()
		return nil, err
	}
	return newControl(c, 0, conn, sess, hb, msgs), nil
}

// acceptControl is the coordinator's end of a control connection whose
// Control frame (rank, size) it has approved: it answers it, runs the
// smux session and accepts the worker's two streams, within until.
func acceptControl(l *link, rank, size int, until time.Time) (sess *smux.Session, hb, msgs *smux.Stream, err error) {
	l.until = until
	if err := l.writeAll(EncodeControl(rank, size), nil); err != nil {
		return nil, nil, nil, err
	}
	_ = l.conn.SetDeadline(time.Time{})
	sess, err = smux.Server(l.conn, smuxConfig())
	if err != nil {
		return nil, nil, nil, err
	}
	_ = sess.SetDeadline(until)
	hb, err = sess.AcceptStream()
	if err == nil {
		msgs, err = sess.AcceptStream()
	}
	if err != nil {
		_ = sess.Close()
		return nil, nil, nil, err
	}
	_ = sess.SetDeadline(time.Time{})
	return sess, hb, msgs, nil
}

// UnresponsiveError is the cause when a rank's control session stayed
// silent for the liveness timeout: its process is frozen, its host gone or
// its network cut (heartbeats come from the process, so a rank busy in its
// own code keeps sending them). It matches os.ErrDeadlineExceeded in
// errors.Is.
type UnresponsiveError struct {
	// Rank is the silent rank.
	Rank int
	// Silence is how long nothing had been heard from it.
	Silence time.Duration
	// Lost is set when the control connection itself ended first.
	Lost error
	// Workers is set on rank 0 when it names itself: it heard from none
	// of its Workers workers (its own network was cut, or its process
	// was frozen).
	Workers int
}

// Error names the silent rank (or rank 0's lost workers) and how long it
// was silent.
func (e *UnresponsiveError) Error() string {
	s := fmt.Sprintf("rank %d unresponsive: no heartbeat for %v (a frozen process, a dead host or a cut link)", e.Rank, e.Silence.Round(time.Millisecond))
	if e.Workers > 0 {
		s = fmt.Sprintf("rank 0 unresponsive: it heard no heartbeat from any of its %d workers for %v (its own link was cut, or its process frozen)", e.Workers, e.Silence.Round(time.Millisecond))
	}
	if e.Lost != nil {
		s += ": " + e.Lost.Error()
	}
	return s
}

// Timeout reports true: no progress for the liveness timeout.
func (e *UnresponsiveError) Timeout() bool { return true }

// Is matches os.ErrDeadlineExceeded.
func (e *UnresponsiveError) Is(target error) bool { return isTimeoutTarget(target) }

// Unwrap returns the error that ended the control connection, if any.
func (e *UnresponsiveError) Unwrap() error { return e.Lost }

// ExitedError is the cause when a rank's control connection ended without
// the farewell that a rank writes when it closes or fails: its process
// ended (it crashed, was killed, or exited without Close) and its system
// closed the connection (Err io.EOF), or reset it (a process that exits
// with bytes unread; also a connection reset on the way, with the process
// alive). The rank that noticed fails its current or next collective with
// it, exitGrace after the connection ended; the coordinator tells the
// other workers, whose Abort has the cause "exited". Both match io.EOF in
// errors.Is, as a crash seen on a data link does.
type ExitedError struct {
	// Rank is the rank whose control connection ended.
	Rank int
	// Err is how it ended: io.EOF, or a reset.
	Err error
}

// Error names the rank and says how its control connection ended.
func (e *ExitedError) Error() string {
	if errors.Is(e.Err, io.EOF) {
		return fmt.Sprintf("rank %d's process ended: its control connection closed without a farewell (it crashed, was killed, or exited without Close): %v", e.Rank, e.Err)
	}
	return fmt.Sprintf("rank %d's control connection was reset without a farewell (its process ended, or the connection was reset on the way): %v", e.Rank, e.Err)
}

// Unwrap returns how the control connection ended.
func (e *ExitedError) Unwrap() error { return e.Err }

// Is matches io.EOF, whatever ended the connection.
func (e *ExitedError) Is(target error) bool { return target == io.EOF }

// remoteExited stands for a rank whose control connection another rank
// saw end without a farewell (an Abort's cause "exited").
type remoteExited struct{}

func (remoteExited) Error() string {
	return "control connection ended without a farewell (seen by another rank)"
}
func (remoteExited) Is(target error) bool { return target == io.EOF }

// isExited reports whether err is, or an Abort's cause says, a control
// connection that ended without a farewell.
func isExited(err error) bool {
	var ex *ExitedError
	var re remoteExited
	return errors.As(err, &ex) || errors.As(err, &re)
}

// remoteUnresponsive stands for a rank found unresponsive by another rank
// (an Abort's cause "unresponsive").
type remoteUnresponsive struct{}

func (remoteUnresponsive) Error() string        { return "unresponsive (seen by another rank)" }
func (remoteUnresponsive) Timeout() bool        { return true }
func (remoteUnresponsive) Is(target error) bool { return isTimeoutTarget(target) }
