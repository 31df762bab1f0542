package star

import (
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/starcomm/starcomm/transport"
)

// link is one end of a coordinator-worker connection: the conn, the peer's
// rank, the deadline it runs under, and the state of the frame being read
// or written, so that framing does not allocate.
//
// # Ownership
//
// At any moment one goroutine owns a link's I/O: the collective's goroutine
// (which polls it, or reads and writes it directly), or, on the
// coordinator, the link's own goroutine while it serves a request (see
// coordinator). Ownership passes with the request and its result over
// channels. Every read and write, polled or not, goes through arm first,
// so it runs under a deadline that is right at that moment, whatever ran
// on the socket before.
//
// Only cancel may be called by another goroutine: it makes the owner's
// current and later I/O fail at once with the cancel's cause (a closed
// communicator, a cancelled context, a failure on another link) until the
// owner calls resume.
type link struct {
	peer   int
	conn   transport.Conn
	bw     transport.BuffersWriter
	poller transport.Poller
	cw     transport.CloseWriter
	lw     transport.LowWaterReader
	uc     transport.UnsentCounter
	ur     transport.UnreadCounter
	// astage is the page-aligned buffer in which writeAll copies a
	// medium-sized frame, or a large frame's lead, before it writes it
	// (see alignedStageMax and leadFrag); allocated on first use (see
	// stage).
	astage []byte
	// direct is set when conn is a transport.DirectWriter that reports
	// true (see alignedStageMax).
	direct bool
	// onHost is set when the peer is on this host (transport.HostLocal).
	onHost bool
	// sw is conn as a transport.SpliceWriter, on a direct link, until it
	// reports that it cannot splice (see writeApart).
	sw transport.SpliceWriter
	// lowSet is set while lw has a low-water mark above 1 (see readFull).
	lowSet bool

	// owner is the communicator of a collective's link (nil during
	// start-up): its away detector tells late whether this process was
	// away (see Comm.absentAfter). Set before the link is shared.
	owner *Comm
	// spared is one more than the collective in which lateAt last gave
	// the peer a fresh timeout without its bytes to show (0: never).
	// Under dmu.
	spared uint64

	// timeout is the most an I/O call may wait without progress. until,
	// when set, replaces it with an absolute deadline (start-up).
	timeout time.Duration
	until   time.Time

	// rdl and wdl are the read and write deadlines set on conn now (zero:
	// unknown). Setting a deadline can wake the runtime's network poller,
	// a context switch per I/O, so arm sets one only when less than a
	// whole timeout of it remains. Owner only.
	rdl, wdl time.Time
	// dmu orders arm's deadline changes against cancel's, so that a
	// cancel is never undone by a concurrent re-arm.
	dmu   sync.Mutex
	cause atomic.Pointer[cancelCause]

	// The frame being read (see beginRead): the tag expected, where its
	// payload goes, how many header bytes have arrived, and how far into
	// rparts the payload has got.
	rhdr   [HeaderSize]byte
	rwant  byte
	rparts [][]byte
	rhave  int
	rpart  int
	roff   int
	// rstage receives a small frame whole (see pollStaged); carry holds
	// what it read past a header that turned out not to be the one
	// expected, for readFull to take first (an Abort's reason).
	rstage []byte
	carry  []byte
	// wstage holds a small frame staged for one write (see sendFrame).
	wstage []byte

	whdr  [HeaderSize + 1]byte
	wbufs [][]byte
	batch [][]byte
	// wrest is what a non-blocking write of a small frame did not take
	// (see postFrame).
	wrest []byte
	// wdirty is set while a frame is partly written: the stream can then no
	// longer carry another frame, so no Abort is sent on it.
	wdirty bool
	// wcallMax, when positive, caps what one write call of a frame takes
	// (chunk otherwise): a worker's frame of a streamed allreduce, which
	// rank 0 takes a chunk at a time as the lower ranks' data comes (see
	// worker.allreduce). Each call's deadline is armed as it begins, so a
	// call waits through one of rank 0's waits for a lower rank, not
	// several. rcallMax does the same for the reads of the reply, and for
	// the low-water mark they ask for (see readFull).
	wcallMax, rcallMax int

	// reqs feeds the link's goroutine on the coordinator (see
	// coordinator), wreqs its relay writer (see relay); nil elsewhere.
	reqs, wreqs chan request
	// relayReading is set while a relay's reader reads the link and its
	// writer writes it: a failed write then leaves the read side to the
	// reader, and sets wordsLater: the writer reads the peer's last words
	// once the reader is done (see coordinator.lastWordsAfterRead).
	relayReading atomic.Bool
	// wordsLater: see relayReading (the writer's own; relayWrite clears
	// it when it starts).
	wordsLater bool
	// relayRegionIn tells whether the relay's reader ended having read
	// the whole region (set with relayReading's clearing, under the relay
	// state's lock).
	relayRegionIn bool
	// writing is set while a worker's duplex exchange writes its frame
	// (see worker.exchangeDuplex), and wroteEnd is when it ended
	// (monoNow; 0 before): a read deadline that passes meanwhile, or
	// less than a timeout after, is not a failure (see readsOn).
	writing  atomic.Bool
	wroteEnd atomic.Int64
	// rfix, when set, is the read deadline armAt sets in place of a fresh
	// one (see readsOn and moving), until a read moves (see rfixMoved).
	// The reader's own.
	rfix time.Time
	// streamed is set while a worker runs an allreduce that rank 0
	// streams or an allgatherv that it may relay (see worker.allreduce,
	// worker.allgatherv and hereExtend).
	streamed atomic.Bool
	// sfree and sready pass the link's two chunk buffers (sbuf) between
	// its goroutine and the reducer of a streamed allreduce (see
	// reduce.go): free to fill, and filled.
	sfree, sready chan []byte
	sbuf          [2][]byte

	// stretched is set while hereExtend or busyExtend holds the system's
	// own timeout (transport.PeerTimeoutSetter) off past the link's (see
	// unstretch).
	stretched atomic.Bool

	// ctl is the control session with the peer, once there is one (the
	// coordinator attaches a worker's at any time after start-up).
	ctl atomic.Pointer[control]
	// ctlReads is set on the coordinator's links: the collective's
	// goroutine waits for the worker's fingerprints from ctl, and cancel
	// interrupts that wait too.
	ctlReads bool
	// prog is the coordinator's record of the worker's progress (see
	// stall.go).
	prog progress

	// drained is closed when the goroutine draining the link at its end
	// stops (see startDrain); drainedBytes is how much it read.
	drained      chan struct{}
	drainedBytes int
	// drainHead is the first bytes drained (at most drainHeadMax): an
	// Abort waiting there is the peer's last word (see drainedAbort).
	drainHead []byte

	// The slow-link fields, used only once a deadline has passed (kept
	// apart from the fields of every I/O call).
	// ar is the conn's transport.AckReporter, or nil.
	ar transport.AckReporter
	// onMoved, when set (the coordinator's links), is called when a call
	// goes on past its deadline because the link still moved (see
	// slowWrite, moving, coordinator.linkMoved). It takes no lock.
	onMoved func()
	// rfixMoved is set while rfix is moving's (a timeout after the link
	// last moved): a read that then takes bytes keeps it, for the bytes
	// may have waited unread below the read's low-water mark since before
	// the peer stopped (see readFull). The reader's own.
	rfixMoved bool
	// rmoved and wmoved are the conn's deadlines as moveDeadlines last
	// moved them past rdl and wdl, until the next arm (zero: not moved);
	// lateAt counts a deadline as passed from them. Under dmu.
	rmoved, wmoved time.Time
	// wfix, when set, is the write deadline armAt sets in place of a
	// fresh one: a timeout after the link last moved (see slowWrite),
	// until a write takes bytes (see wrote). The writer's own.
	wfix time.Time
}

// cancelCause is why a link was cancelled.
type cancelCause struct{ err error }

// past is a deadline that has passed: it makes pending I/O return at once.
var past = time.Unix(1, 0)

func newLink(peer int, conn transport.Conn, timeout time.Duration) *link {
	l := &link{peer: peer, conn: conn, timeout: timeout}
	l.bw, _ = conn.(transport.BuffersWriter)
	l.poller, _ = conn.(transport.Poller)
	l.cw, _ = conn.(transport.CloseWriter)
	l.lw, _ = conn.(transport.LowWaterReader)
	l.uc, _ = conn.(transport.UnsentCounter)
	l.ur, _ = conn.(transport.UnreadCounter)
	l.ar, _ = conn.(transport.AckReporter)
	if dw, ok := conn.(transport.DirectWriter); ok {
		l.direct = dw.WritesDirect()
	}
	if sw, ok := conn.(transport.SpliceWriter); ok && l.direct && !spliceOff.Load() {
		l.sw = sw
	}
	if hl, ok := conn.(transport.HostLocal); ok {
		l.onHost = hl.PeerOnHost()
	}
	return l
}

// cancelled returns the cause of a cancel, or nil.
func (l *link) cancelled() error {
	if c := l.cause.Load(); c != nil {
		return c.err
	}
	return nil
}

// cancel makes the link's current and later I/O fail with err (the first
// cause given wins) until resume. Any goroutine may call it.
func (l *link) cancel(err error) {
	l.dmu.Lock()
	defer l.dmu.Unlock()
	l.cause.CompareAndSwap(nil, &cancelCause{err})
	_ = l.conn.SetDeadline(past)
	if ctl := l.ctl.Load(); ctl != nil && l.ctlReads {
		ctl.poke()
	}
}

// resume ends a cancel. The owner calls it when no I/O is in progress; the
// socket's deadlines are then unknown and the next I/O sets them.
func (l *link) resume() {
	l.cause.Store(nil)
	l.dmu.Lock() // hereExtend reads them from the control session's reader
	l.rdl, l.wdl = time.Time{}, time.Time{}
	l.dmu.Unlock()
	l.wfix = time.Time{}
}

// arm makes sure the next I/O call in one direction fails if it makes no
// progress for the link's timeout: it sets the deadline to now + timeout +
// deadlineSlack(timeout), unless the one set is still at least a timeout
// away. So a silent peer is detected after between timeout and timeout +
// slack, and a deadline is set at most once per slack, not once per I/O.
// With an absolute deadline (until), that is the deadline. A cancelled
// link returns the cancel's cause instead.
func (l *link) arm(write bool) error { return l.armAt(write, time.Time{}) }

// armAt is arm for a caller that has just read the clock (now; zero: read
// it here): a polling loop arms every link in every round.
func (l *link) armAt(write bool, now time.Time) error {
	if err := l.cancelled(); err != nil {
		return err
	}
	cur := &l.rdl
	if write {
		cur = &l.wdl
	}
	var want time.Time
	switch {
	case !l.until.IsZero():
		if cur.Equal(l.until) {
			return nil
		}
		want = l.until
	case !write && !l.rfix.IsZero():
		if cur.Equal(l.rfix) {
			return nil
		}
		want = l.rfix
	case write && !l.wfix.IsZero():
		if cur.Equal(l.wfix) {
			return nil
		}
		want = l.wfix
	default:
		if now.IsZero() {
			now = time.Now()
		}
		if !cur.IsZero() && !cur.Before(now.Add(l.timeout)) {
			return nil
		}
		want = now.Add(l.timeout + deadlineSlack(l.timeout))
	}
	l.dmu.Lock()
	defer l.dmu.Unlock()
	if err := l.cancelled(); err != nil {
		return err
	}
	*cur = want
	if write {
		l.wmoved = time.Time{}
	} else {
		l.rmoved = time.Time{}
	}
	// A deadline that cannot be set (a pipe refuses once the peer has
	// closed) is not the error to report: the I/O reports the real one.
	if write {
		_ = l.conn.SetWriteDeadline(want)
	} else {
		_ = l.conn.SetReadDeadline(want)
	}
	return nil
}

// deadlineSlack is how much later than d a silent peer may be detected:
// min(d/20, 250 ms).
func deadlineSlack(d time.Duration) time.Duration {
	return min(d/20, 250*time.Millisecond)
}

// replyMargin is how much longer a worker waits for the coordinator than the
// coordinator waits for a worker: min(timeout/2, 500 ms). When a third rank
// hangs, the coordinator, which sees it first, can then name it to the
// workers before their own deadlines pass.
func replyMargin(timeout time.Duration) time.Duration {
	return min(timeout/2, 500*time.Millisecond)
}

// ioErr is the error of a failed I/O call: the cancel's cause when the
// link was cancelled (the passed deadline was ours), else err translated
// at the edge. A write that failed because the peer is gone may have been
// preceded by the peer's last words: an Abort it sent just before it
// closed, waiting in our receive buffer. That Abort is the truth, and it
// is returned instead (see lastWords).
func (l *link) ioErr(err error, write bool) error {
	if c := l.cancelled(); c != nil {
		return c
	}
	err = edgeErr(err, write)
	if write && peerGone(err) {
		if l.relayReading.Load() {
			l.wordsLater = true
		} else if ab := l.lastWords(); ab != nil {
			return ab
		}
	}
	return err
}

// late reports whether err, a failed read's, is a deadline that passed
// while this process, not the peer, was away: it saw the deadline at
// least lateMin after it passed, or its away detector (with control
// sessions) found it absent since the deadline was set (the process was
// stopped, its VM paused, or it was starved of CPU; see
// Comm.absentAfter), and the peer's bytes wait unread in the
// socket (they came, and no one read them). Or, with nothing waiting:
// the deadline passed in the middle of an absence longer than half the
// timeout that the away detector saw (see Comm.absentAcross), as when
// every rank's VM is paused together and the peer has not run since
// either. The link's read deadline is then cleared, so that the next arm
// sets a fresh one, and the caller reads on: the peer gets a whole
// timeout from this process's return (without its bytes to show, once
// per collective and link). A peer that sent nothing is
// otherwise failed as before; a peer that hangs mid-frame, or hung,
// while this process was away too is failed one timeout later. A link
// that cannot tell what waits unread (see transport.UnreadCounter) never
// reads on.
func (l *link) late(err error) bool {
	if l.readsOn(err) {
		return true
	}
	return l.ur != nil && l.lateAt(err, &l.rdl, func() bool { n, err := l.ur.Unread(); return err == nil && n > 0 }) ||
		l.moving(err)
}

// moving is late for a read deadline of the link's own that passed while
// the link still moved bytes (transport.AckReporter): the peer's data
// arrived less than a timeout ago (a slow link fills a read's low-water
// mark, see readFull, only every so often), or this end's data went to
// the peer, and its host acknowledged some, less than a timeout ago (a
// peer reads what came before it answers: the rest of a large result,
// say, that a slow link still carries while this end waits in the next
// collective). The read deadline becomes a timeout after the latest of
// those (rfix: the polling and relay reads clear it once bytes come;
// readFull keeps it through its bytes, which may have waited unread below
// its low-water mark since before the peer stopped, and clears it when the
// read ends; lateAt clears it when it reads on), and hookMoving and
// onMoved are called. A peer that stops sending, or whose host is lost (it stops
// acknowledging; a retransmission is sent but not acknowledged), or that
// stops reading (its window closes, after which no data goes) is failed
// at a later deadline, a timeout after the link last moved.
func (l *link) moving(err error) bool {
	if l.ar == nil || !isTimeout(err) || errors.Is(err, syscall.ETIMEDOUT) || !l.until.IsZero() || l.cancelled() != nil {
		return false
	}
	ack, aerr := l.ar.Acks()
	if aerr != nil {
		return false
	}
	last := ack.SinceReceived
	if ack.SinceAcked < l.timeout {
		// This end's data moved when it was both sent and acknowledged:
		// a retransmission to a lost host is sent, not acknowledged.
		last = min(last, max(ack.SinceSent, ack.SinceAcked))
	}
	if last >= l.timeout {
		return false
	}
	now := time.Now()
	fix := now.Add(l.timeout + deadlineSlack(l.timeout) - last)
	l.dmu.Lock()
	defer l.dmu.Unlock()
	if l.cancelled() != nil || l.rdl.IsZero() || now.Before(l.rdl) {
		return false
	}
	l.rdl, l.rfix, l.rfixMoved = time.Time{}, fix, true
	callHook(l.peer, hookMoving)
	if l.onMoved != nil {
		l.onMoved()
	}
	return true
}

// readsOn is late for a read deadline of the link's own that passed while
// the link's own frame was still going out, or less than a timeout after
// it went (a worker's duplex exchange): the reply is read on, as it would
// only be read from the frame's end on. While the frame goes out, from a
// fresh deadline; after it, until a timeout (with the slack) after the
// frame's end (rfix): the deadline it would have had read after the frame.
// A cancel, the system's own timeout, or a deadline error before the
// deadline the link set (not its own) still fail it.
func (l *link) readsOn(err error) bool {
	var fix time.Time
	if !l.writing.Load() {
		end := l.wroteEnd.Load()
		if end == 0 {
			return false
		}
		fix = monoTime(end).Add(l.timeout + deadlineSlack(l.timeout))
		if !time.Now().Before(fix) {
			return false
		}
	}
	if !isTimeout(err) || errors.Is(err, syscall.ETIMEDOUT) {
		return false
	}
	l.dmu.Lock()
	defer l.dmu.Unlock()
	if l.cancelled() != nil || l.rdl.IsZero() || time.Now().Before(l.rdl) {
		return false
	}
	l.rdl, l.rfix, l.rfixMoved = time.Time{}, fix, false
	return true
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// monoBase is the origin of monoNow: a time with a monotonic reading.
var monoBase = time.Now()

// monoNow is the monotonic time since monoBase, in nanoseconds (never 0:
// 0 means none): what a goroutine stores for another to compare, unmoved
// by steps of the wall clock.
func monoNow() int64 { return int64(time.Since(monoBase)) | 1 }

// monoTime is the time that monoNow returned n at.
func monoTime(n int64) time.Time { return monoBase.Add(time.Duration(n)) }

// lateWrite is late for a failed write: a deadline that this process saw
// pass at least lateMin late while the system had sent every byte written
// before (nothing waits unsent in the socket): the peer kept up, and this
// process was away; or a deadline that passed in the middle of a long
// absence (as for late); or a write that a slow link held up (see
// slowWrite). The write deadline is cleared, and the caller writes on (the
// rest of what it was writing). A peer that took nothing is otherwise
// failed as before.
func (l *link) lateWrite(err error) bool {
	return l.uc != nil && l.lateAt(err, &l.wdl, func() bool { n, err := l.uc.Unsent(); return err == nil && n == 0 }) ||
		l.slowWrite(err)
}

// wrote records that a write call took k bytes: when it took some, the
// link moved, and the next write arms a fresh deadline (wfix is cleared;
// slowWrite sets it again for a write that goes on past a deadline).
func (l *link) wrote(k int) {
	if k > 0 && !l.wfix.IsZero() {
		l.wfix = time.Time{}
	}
}

// slowWrite is lateWrite for a write whose own deadline passed while the
// link still moved (transport.AckReporter): the peer's host acknowledged
// bytes within the last timeout with its receive window open, or the
// peer's own data arrived within the last timeout, its window open or
// not. The link is slow, not the peer stalled: over TCP a write blocked on
// a full socket wakes only once a third of the send buffer is free,
// megabytes that a slow link takes seconds to move, so a write call can
// outlast a timeout while every byte moves; and a peer that sends its
// frame before it reads (a worker below duplexMin, whose region of a
// relayed allgatherv still comes over a slow link while rank 0's relay
// writer sends it the others') takes nothing until its frame is out,
// which where the system caps socket buffers low (net.core.wmem_max and
// rmem_max, often 208 KiB) is longer than a timeout
// (TestSlowUploadWhileRelayed). The write deadline becomes a timeout
// (with the slack) after the link last moved so (wfix, until a write
// takes bytes), hookSlowWrite is called, and so is onMoved. A peer that
// stops reading closes its window once its receive buffer is full, and is
// failed at a later deadline, within a timeout and a receive buffer's
// time on the link (a timeout after its data last came, if it came
// later); one whose host is lost stops acknowledging, and is failed a
// timeout (with the slack) after its last acknowledgment (the system's own
// timeout, TCP_USER_TIMEOUT, which is the link's timeout unless kind 5 or
// 6 stretched it, may end the link sooner). A fresh deadline instead, a
// timeout after the one that passed, failed it up to two timeouts after
// (TestSlowLinkThenLost).
func (l *link) slowWrite(err error) bool {
	if l.ar == nil || !isTimeout(err) || errors.Is(err, syscall.ETIMEDOUT) || !l.until.IsZero() || l.cancelled() != nil {
		return false
	}
	ack, aerr := l.ar.Acks()
	if aerr != nil {
		return false
	}
	last := ack.SinceReceived
	if ack.Open {
		last = min(last, ack.SinceAcked)
	}
	if last >= l.timeout {
		return false
	}
	now := time.Now()
	l.dmu.Lock()
	defer l.dmu.Unlock()
	if l.cancelled() != nil || l.wdl.IsZero() || now.Before(l.wdl) {
		return false
	}
	l.wdl, l.wfix = time.Time{}, now.Add(l.timeout+deadlineSlack(l.timeout)-last)
	callHook(l.peer, hookSlowWrite)
	if l.onMoved != nil {
		l.onMoved()
	}
	return true
}

// hereExtend moves the link's pending deadlines on to a timeout (this
// link's, with the reply margin) after at, when rank 0 said at that time
// (msgHere, on the control session) that it began collective seq, the
// streamed allreduce or relayed allgatherv this worker runs (see
// streamed): rank 0 takes the worker's frame only once every header is in
// (and a streamed allreduce's only as the lower ranks' data comes), and
// it fails the collective itself, naming the late rank, if a rank does
// not come within a timeout of its arrival. So the worker waits a timeout
// from rank 0's arrival, as a stored collective's worker waits a timeout
// from when rank 0 takes its frame. Only the conn's deadlines move: the
// next I/O after progress arms afresh, as ever, and a deadline that
// passes without progress fails as any. It runs on the control session's
// reader.
func (l *link) hereExtend(seq uint64, at time.Time) {
	if !l.streamed.Load() || l.owner == nil || l.owner.seqNow.Load() != seq {
		return
	}
	// The system's own timeout too, on a frame that rank 0 leaves unread
	// until every header is in (see busyExtend). current takes stateMu,
	// which comes before dmu (see cancelLinks).
	cur, _, start, running := l.owner.current()
	if !running || cur != seq {
		start = time.Time{}
	}
	if l.moveDeadlines(at.Add(l.timeout+deadlineSlack(l.timeout)), start) {
		callHook(l.peer, hookHere)
	}
}

// moveDeadlines moves the conn's pending deadlines that come before want
// on to want (see hereExtend and busyExtend), unless the link is
// cancelled or draining; it reports whether it looked. With from set (the
// running collective's start), it holds the system's own timeout on the
// link off until want too (see stretch).
func (l *link) moveDeadlines(want, from time.Time) bool {
	l.dmu.Lock()
	defer l.dmu.Unlock()
	if l.cancelled() != nil || !l.until.IsZero() {
		return false
	}
	if !from.IsZero() {
		l.stretch(want.Sub(from))
	}
	if !l.rdl.IsZero() && l.rdl.Before(want) {
		_ = l.conn.SetReadDeadline(want)
		l.rmoved = want
	}
	if !l.wdl.IsZero() && l.wdl.Before(want) {
		_ = l.conn.SetWriteDeadline(want)
		l.wmoved = want
	}
	return true
}

// busyExtend moves the link's pending deadlines on to a timeout (this
// link's, with the reply margin) after now, when rank 0 said at that time
// (msgBusy, on the control session) that it is still in collective seq,
// and this worker runs seq or a later one: rank 0 cannot take this
// worker's frame, or send it a result, before it has ended seq (sending
// the result to a slower rank, say), nor send it seq's result before the
// slower ranks' frames are in (a slower rank may still be taking the
// result of the collective before, see link.moving), and it fails seq
// itself, naming the rank at fault, if that rank makes no progress for a
// timeout. Without it the worker would wait a timeout from its own
// arrival, and fail naming rank 0 while rank 0 still serves a slow link.
// As for hereExtend, only the conn's deadlines move. It runs on the
// control session's reader.
func (l *link) busyExtend(seq uint64, now time.Time) {
	if l.owner == nil || l.owner.seqNow.Load() < seq {
		return
	}
	// The system's own timeout (TCP_USER_TIMEOUT, the link's timeout)
	// runs too, on a frame that rank 0 leaves unread, its window closed:
	// it is held off as long, counted from this collective's start (the
	// window can have closed no earlier), until the next one begins (see
	// unstretch). current takes stateMu, which comes before dmu.
	_, _, start, running := l.owner.current()
	if !running {
		start = time.Time{}
	}
	if l.moveDeadlines(now.Add(l.timeout+deadlineSlack(l.timeout)), start) {
		callHook(l.peer, hookBusy)
	}
}

// stretch holds the system's own timeout on the link
// (transport.PeerTimeoutSetter: TCP_USER_TIMEOUT, which also runs while
// the peer keeps its receive window closed) off for d, when d is longer
// than the link's timeout, until unstretch. dmu is held.
func (l *link) stretch(d time.Duration) {
	if ps, ok := l.conn.(transport.PeerTimeoutSetter); ok && d > l.timeout {
		if ps.SetPeerTimeout(d) == nil {
			l.stretched.Store(true)
		}
	}
}

// unstretch restores the system's own timeout on the link when
// hereExtend or busyExtend stretched it. A worker's collective calls it as
// it begins (stateMu held).
func (l *link) unstretch() {
	if !l.stretched.Load() {
		return
	}
	l.dmu.Lock()
	defer l.dmu.Unlock()
	if ps, ok := l.conn.(transport.PeerTimeoutSetter); ok && l.stretched.Swap(false) {
		_ = ps.SetPeerTimeout(0)
	}
}

// lateAt is late and lateWrite for the deadline *dl (l.rdl or l.wdl) and
// the peer's sign of life moved.
func (l *link) lateAt(err error, dl *time.Time, moved func() bool) bool {
	if !isTimeout(err) || errors.Is(err, syscall.ETIMEDOUT) || !l.until.IsZero() || l.cancelled() != nil {
		return false
	}
	l.dmu.Lock()
	defer l.dmu.Unlock()
	if l.cancelled() != nil || dl.IsZero() {
		return false
	}
	armed := dl.Add(-l.timeout - deadlineSlack(l.timeout))
	// The deadline the conn had: moveDeadlines may have moved it past *dl
	// (kind 5 or 6), and a deadline that passed when it was moved to is
	// not one this process saw late.
	mv := l.rmoved
	if dl == &l.wdl {
		mv = l.wmoved
	}
	passed := later(*dl, mv)
	late := time.Since(passed) >= lateMin(l.timeout) || l.owner != nil && l.owner.absentAfter(armed)
	if late && moved() {
		l.dropDeadline(dl)
		return true
	}
	if l.owner == nil || !l.owner.absentAcross(passed, time.Now(), l.timeout/2) {
		return false
	}
	// Once per collective and link: a process stopped again and again
	// across each new deadline still fails a peer that hangs, at the
	// second timeout of a collective.
	seq := l.owner.seqNow.Load()
	if l.spared == seq+1 {
		return false
	}
	l.spared = seq + 1
	l.dropDeadline(dl)
	callHook(l.peer, hookAbsent)
	return true
}

// dropDeadline clears the deadline *dl (l.rdl or l.wdl) and the fixed
// deadline of its direction (rfix or wfix): a passed fix would be armed
// again, and fail every call at once. dmu is held.
func (l *link) dropDeadline(dl *time.Time) {
	*dl = time.Time{}
	if dl == &l.rdl {
		l.rfix, l.rfixMoved = time.Time{}, false
	} else {
		l.wfix = time.Time{}
	}
}

// lateMin is how long after a deadline passed a rank must notice it to
// take the timeout for its own absence (see link.late): 10 ms, or a tenth
// of a shorter timeout. A rank that runs notices a deadline within
// microseconds, or a few milliseconds on a busy host; the bytes waiting
// are the peer's evidence, so a busy host's lateness costs at most one
// more timeout (a peer hung in the middle of a frame, its first bytes
// waiting under a read's low-water mark).
func lateMin(timeout time.Duration) time.Duration {
	return min(timeout/10, 10*time.Millisecond)
}

// peerGone reports whether a write failed because the peer closed or reset
// the connection.
func peerGone(err error) bool {
	return errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)
}

// lastWordsWait bounds how long lastWords waits for the peer's last frame;
// a peer that is gone has sent everything it will, so this is a safety
// bound only.
const lastWordsWait = 100 * time.Millisecond

// lastWords reads the next frame from a peer that closed while this end was
// writing, and returns it if it is an Abort (the peer told us why before
// it went), else nil. The system keeps the data that arrived before a
// connection was reset readable after the failed write. It is only called
// on a failed write, when no frame is being read from the link.
func (l *link) lastWords() *AbortError {
	l.dmu.Lock()
	if l.cancelled() != nil {
		l.dmu.Unlock()
		return nil
	}
	l.rdl = time.Time{}
	_ = l.conn.SetReadDeadline(time.Now().Add(min(l.timeout, lastWordsWait)))
	l.dmu.Unlock()
	var h [HeaderSize]byte
	if _, err := io.ReadFull(l.conn, h[:]); err != nil {
		return nil
	}
	n, tag, err := ParseHeader(h[:])
	if err != nil || tag != TagAbort || n > MaxAbortReason {
		return nil
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(l.conn, buf); err != nil {
		return nil
	}
	return parseAbort(l.peer, buf)
}

// writeFrame sends one frame: the header, extra (0 or 1 bytes that belong to
// the payload, e.g. the ReduceOp byte), then each part in order.
func (l *link) writeFrame(tag byte, extra []byte, parts ...[]byte) error {
	n := len(extra)
	for _, p := range parts {
		n += len(p)
	}
	PutHeader(l.whdr[:], tag, n)
	copy(l.whdr[HeaderSize:], extra)
	l.wdirty = true
	if err := l.writeAll(l.whdr[:HeaderSize+len(extra)], parts); err != nil {
		return err
	}
	l.wdirty = false
	return nil
}

// sendFrame is writeFrame for a worker's frame of a collective: a small
// frame on a link that can be polled is staged whole in l.wstage and goes
// out with one system call, as far as the socket takes it at once, and the
// rest, if any, waiting under the write timeout.
func (l *link) sendFrame(tag byte, extra []byte, parts ...[]byte) error {
	n := HeaderSize + len(extra)
	for _, p := range parts {
		n += len(p)
	}
	if l.poller == nil || n > stageMax {
		return l.writeFrame(tag, extra, parts...)
	}
	l.wstage = stageFrame(l.wstage, tag, extra, parts)
	done, err := l.postFrame(l.wstage)
	if err != nil || done {
		return err
	}
	return l.finishWrite()
}

// writeAll writes hdr and parts, at most chunk bytes per call, each call
// armed: a frame (hdr its header, with the op byte of an allreduce), or
// the rest of one that postFrame left (hdr that rest, parts nil). With a
// BuffersWriter each call is one writev. Over a direct writer, a frame of
// more than stageMax bytes goes through writeApart (its header spliced
// apart) when the link can splice; otherwise one of the size that
// alignedStageMax describes goes through writeStaged, and a larger one
// starts with the lead that leadFrag describes.
func (l *link) writeAll(hdr []byte, parts [][]byte) error {
	if l.direct && l.wcallMax > 0 {
		// Small calls: no stage, no lead (see wcallMax).
		if done, err := l.tryApart(hdr, parts); done {
			return err
		}
	} else if l.direct {
		n := len(hdr)
		for _, p := range parts {
			n += len(p)
		}
		if n > stageMax {
			if done, err := l.tryApart(hdr, parts); done {
				return err
			}
		}
		if n > stageMax && n <= alignedStageMax {
			return l.writeStaged(n, hdr, parts)
		}
		if n > alignedStageMax {
			return l.writeLong(hdr, parts)
		}
	}
	return l.writeGathered(hdr, parts)
}

// writeLong writes hdr and parts, the start (or the whole) of a frame of
// more than alignedStageMax bytes: over a direct writer, through
// writeApart when the link can splice, and otherwise the lead that
// leadFrag describes first, then the rest straight from parts (a relayed
// frame's later bytes follow with writeGathered, continuing the kernel's
// fragment at the distance the lead set).
func (l *link) writeLong(hdr []byte, parts [][]byte) error {
	if !l.direct {
		return l.writeGathered(hdr, parts)
	}
	if done, err := l.tryApart(hdr, parts); done {
		return err
	}
	m, i, k := l.stageLead(hdr, parts)
	if err := l.writeStage(m); err != nil {
		return err
	}
	if i == len(parts) {
		return nil
	}
	return l.writeGathered(parts[i][k:], parts[i+1:])
}

// tryApart writes hdr and parts with writeApart when splices allows it,
// and reports whether it did (successfully or not); done is false when
// the frame is still to be written another way (nothing was written).
func (l *link) tryApart(hdr []byte, parts [][]byte) (done bool, err error) {
	if !l.splices(hdr, parts) {
		return false, nil
	}
	err = l.writeApart(hdr, parts)
	if errors.Is(err, errors.ErrUnsupported) {
		return false, nil
	}
	return true, err
}

// splices reports whether writeApart is to write hdr and parts: the link
// can splice, hdr is a frame's header (at most len(l.whdr) bytes; not the
// rest of a frame that postFrame left, which may be 256 KiB) and parts
// hold payload bytes to follow it (a spliced header is held back until
// bytes follow; an empty first region of a relayed frame goes with its
// header).
func (l *link) splices(hdr []byte, parts [][]byte) bool {
	if l.sw == nil || len(hdr) == 0 || len(hdr) > len(l.whdr) {
		return false
	}
	for _, p := range parts {
		if len(p) > 0 {
			return true
		}
	}
	return false
}

// writeApart writes hdr through l.sw (see transport.SpliceWriter) and then
// parts straight from the caller's memory, at most chunk bytes per call:
// the header takes no room in the kernel's page fragments, so the payload
// lies in them at the distance it has in memory from where the kernel
// began, which for page-aligned buffers and payloads of whole 32-byte
// multiples (what a collective's float64 regions mostly are) is a
// multiple of 32 on both sides of the socket, the kernel's fastest copy on
// AMD EPYC, with no copy of the frame in user space. If the Conn cannot
// splice (no pipe), nothing is written, l.sw is dropped and the error
// wraps errors.ErrUnsupported: the caller writes the frame another way.
func (l *link) writeApart(hdr []byte, parts [][]byte) error {
	if err := l.arm(true); err != nil {
		return err
	}
	if err := l.sw.WriteSpliced(hdr); err != nil {
		if errors.Is(err, errors.ErrUnsupported) {
			l.sw = nil
			return err
		}
		return l.ioErr(err, true)
	}
	return l.writeGathered(nil, parts)
}

// writeGathered writes hdr (any first bytes) and parts as they are, at
// most chunk bytes per call.
func (l *link) writeGathered(hdr []byte, parts [][]byte) error {
	all := l.wbufs[:0]
	if len(hdr) > 0 {
		all = append(all, hdr)
	}
	for _, p := range parts {
		if len(p) > 0 {
			all = append(all, p)
		}
	}
	l.wbufs = all[:0]
	err := l.writeChunks(all)
	clear(all) // do not keep the caller's memory alive
	return err
}

// alignedStageMax is the largest frame, header included, that writeAll
// copies into a page-aligned buffer of the link's and writes from there
// with one system call, when the transport is a transport.DirectWriter
// (plain TCP; not TLS, which copies the bytes into records of its own)
// that cannot splice the header apart (see writeApart, which makes the
// stage and the lead below unneeded on Linux).
//
// The kernel copies what a process writes to a socket into pages of its
// own with "rep movsb" on processors with fast short string moves, and on
// AMD EPYC (Zen 4; measured in a KVM guest) that instruction runs about 15
// times slower (2.5-3.5 GB/s against 42-56 GB/s) when the destination lies
// 1 to 15 bytes past the source modulo 4096 (bench/repmovsb.c measures
// it). A frame's 5-byte header puts its payload 5 bytes past where a
// page-aligned buffer (as Go allocates large slices) starts, whenever the
// kernel begins the frame at the start of a page: every copy of that
// payload then takes the slow path. Writing the frame from a page-aligned
// stage, header first, keeps the distance at what it is for the stream (0
// from a fresh page). The copy into the
// stage (Go's vector copy, which has no such penalty) costs a fraction of
// what it saves; a larger frame is not copied whole (the buffer would
// have to stay allocated, and the extra copies of many MiB cost more than
// they saved) but starts with a lead (see leadFrag).
const alignedStageMax = 1 << 20

// spliceOff, set by tests before they build communicators, keeps new links
// from splicing headers (see writeApart), so that the staged writes and
// leads that other systems use are tested over TCP on Linux too.
var spliceOff atomic.Bool

// leadFrag is the size of the page fragments in which Linux's TCP keeps
// what a thread writes (32 KiB), and the basis of the lead with which
// writeAll starts a frame over alignedStageMax.
//
// Within a fragment the kernel copies a write's bytes contiguously, so the
// distance between source and destination that alignedStageMax describes
// stays what it was at the frame's start, and a frame written straight
// from a page-aligned buffer, header first, keeps the slow distance of 5
// throughout. The kernel starts a fresh fragment, at its first byte, when
// fewer than 32 bytes are left in the current one. So the lead, hdr and
// the first bytes of the payload copied into the stage, is leadFrag-31 to
// leadFrag-1 bytes long: when the frame starts a fragment (as it does
// once the peer has read what came before), the lead leaves 1 to 31 bytes
// of it, and the rest of the frame, written from the caller's memory,
// starts a fresh fragment with a distance set by its own address alone;
// stageLead makes that distance a multiple of leadAlign when it can, and
// never 1 to 15. When the frame starts elsewhere in a fragment, the rest
// continues it with the distance the frame had before: nothing is lost.
// On allgatherv-2MiB (R = 4, Zen 4) the lead took the median from 12.6 to
// 8.8 ms.
const leadFrag = 32 << 10

// writeStaged writes the frame of n bytes made of hdr and parts from
// l.astage (see alignedStageMax), under one armed deadline.
func (l *link) writeStaged(n int, hdr []byte, parts [][]byte) error {
	st := l.stage(n)
	k := copy(st, hdr)
	for _, p := range parts {
		k += copy(st[k:], p)
	}
	return l.writeStage(n)
}

// stageLead copies hdr and the first bytes of parts into l.astage, the
// lead that leadFrag describes: leadFrag-31 to leadFrag-1 bytes, ending
// where the next byte of parts lies at a multiple of 32 bytes in memory
// when the window allows it (the rest then starts a fresh fragment at
// distance 0 modulo 32, the kernel's fastest copy) and otherwise, if the
// next byte would lie 1 to 15 bytes before a page boundary, past it. It
// returns the lead's length m and where the rest starts: parts[i][k:]
// (i = len(parts) when nothing is left; k < len(parts[i]) otherwise).
func (l *link) stageLead(hdr []byte, parts [][]byte) (m, i, k int) {
	st := l.stage(leadFrag)
	m = copy(st, hdr)
	const lo, hi = leadFrag - 31, leadFrag - 1
	for i < len(parts) {
		p := parts[i][k:]
		if len(p) == 0 {
			i, k = i+1, 0
			continue
		}
		take := lo - m
		if take <= 0 {
			a := int(uintptr(unsafe.Pointer(&p[0])) & (pageSize - 1))
			switch {
			case a%leadAlign == 0:
				return m, i, k
			case m+leadAlign-a%leadAlign <= hi:
				take = leadAlign - a%leadAlign
			case a > pageSize-16:
				take = min(pageSize-a, hi-m)
			default:
				return m, i, k
			}
			if take == 0 {
				return m, i, k
			}
		}
		take = min(take, len(p))
		m += copy(st[m:], p[:take])
		k += take
		if k == len(parts[i]) {
			i, k = i+1, 0
		}
	}
	return m, i, k
}

// leadAlign is the alignment of source to destination at which the
// kernel's copy ran fastest on the Zen 4 host (55 GB/s at distances that
// are multiples of 32; 24 to 35 GB/s at other distances of 16 and more;
// 2.5 GB/s at 1 to 15).
const leadAlign = 32

// stage returns l.astage, at least n bytes long (n <= alignedStageMax),
// allocating it on first use and growing it once: a link that only ever
// writes leads (rank 0's, whose medium replies go out from the
// coordinator's shared stage) keeps leadFrag bytes, not a MiB.
func (l *link) stage(n int) []byte {
	l.astage = stageAligned(l.astage, n)
	return l.astage
}

// stageAligned returns st when it holds n bytes, and otherwise a new
// page-aligned buffer of leadFrag bytes (n <= leadFrag) or alignedStageMax
// bytes (n <= alignedStageMax).
func stageAligned(st []byte, n int) []byte {
	if len(st) >= n {
		return st
	}
	size := alignedStageMax
	if n <= leadFrag {
		size = leadFrag
	}
	b := make([]byte, size+pageSize)
	off := int(-uintptr(unsafe.Pointer(&b[0])) & (pageSize - 1))
	return b[off : off+size : off+size]
}

// writeStage writes l.astage[:n] under one armed deadline.
func (l *link) writeStage(n int) error { return l.writeArmed(l.astage[:n]) }

// writeArmed writes b under one armed deadline.
func (l *link) writeArmed(b []byte) error {
	for {
		if err := l.arm(true); err != nil {
			return err
		}
		k, err := l.conn.Write(b)
		l.wrote(k)
		if err == nil {
			return nil
		}
		if !l.lateWrite(err) {
			return l.ioErr(err, true)
		}
		b = b[k:] // this rank was away: on, under a fresh deadline
	}
}

// writeStagedFrame writes frame, a whole frame staged by the caller (see
// coordinator.scatter), under one armed deadline.
func (l *link) writeStagedFrame(frame []byte) error {
	l.wdirty = true
	if err := l.writeArmed(frame); err != nil {
		return err
	}
	l.wdirty = false
	return nil
}

// pageSize is the page size the stage of writeStaged is aligned to (the
// distance that matters is modulo 4096 whatever the system's page size).
const pageSize = 4096

// writeChunks writes bufs (which it consumes) in calls of at most chunk
// bytes (wcallMax, when set and smaller).
func (l *link) writeChunks(bufs [][]byte) error {
	most := chunk
	if l.wcallMax > 0 {
		most = min(most, l.wcallMax)
	}
	for len(bufs) > 0 {
		// Take up to most bytes from the front of bufs.
		batch := l.batch[:0]
		size := 0
		for len(bufs) > 0 && size < most {
			b := bufs[0]
			if size+len(b) > most {
				b = b[:most-size]
				bufs[0] = bufs[0][len(b):]
			} else {
				bufs = bufs[1:]
			}
			batch = append(batch, b)
			size += len(b)
		}
		l.batch = batch[:0]
		err := l.writeBatch(batch)
		clear(batch)
		if err != nil {
			return err
		}
	}
	return nil
}

// writeBatch writes batch, at most chunk bytes: with one gathered write
// under one armed deadline where the transport can, else one write per
// buffer, each armed.
func (l *link) writeBatch(batch [][]byte) error {
	if l.bw != nil && len(batch) > 1 {
		if err := l.arm(true); err != nil {
			return err
		}
		k, err := l.bw.WriteBuffers(batch)
		l.wrote(int(k))
		for err != nil {
			if !l.lateWrite(err) {
				return l.ioErr(err, true)
			}
			// This rank was away: the rest, under a fresh deadline.
			batch = skipBytes(batch, k)
			if err = l.arm(true); err != nil {
				return err
			}
			k, err = l.bw.WriteBuffers(batch)
			l.wrote(int(k))
		}
		return nil
	}
	for _, b := range batch {
		if err := l.writeArmed(b); err != nil {
			return err
		}
	}
	return nil
}

// skipBytes drops the first n bytes of bufs (which it may modify) and
// returns the rest.
func skipBytes(bufs [][]byte, n int64) [][]byte {
	for len(bufs) > 0 && n >= int64(len(bufs[0])) {
		n -= int64(len(bufs[0]))
		bufs = bufs[1:]
	}
	if len(bufs) > 0 {
		bufs[0] = bufs[0][n:]
	}
	return bufs
}

// lowWaterMax is the most a read of a large frame asks to find in the
// socket before it wakes (see readFull). A larger mark wakes the reader
// fewer times but leaves it idle while its sender copies the whole of a
// reply: on the AMD EPYC of family 26, with cubic on loopback, 256 KiB
// against 1 MiB gave allgatherv-cuts (an 800 KB reply at R=4) 0.88x to
// 1.10x the time in four series of 14 to 20 interleaved rounds (paired;
// three below 0.95x) and 0.91x at R=8, sddp-iteration 0.91x to 0.98x
// (0.97x at R=8), and left 2 and 16 MiB unchanged (0.95x to 1.02x).
const lowWaterMax = 256 << 10

// readFull fills p, at most chunk bytes per armed deadline, first from
// what a staged read carried past its header. left is how many bytes of
// the frame, p's included, are still to come; when more than pollMax, and
// the transport is a transport.LowWaterReader, each wait asks for
// min(left, lowWaterMax) bytes at once, so that a large frame is read in a
// few large reads and the reader sleeps while the sender copies (on
// loopback, a reader woken for every segment contends with the sender for
// the socket and the CPU). Once it has asked, it lowers the mark with left
// to the frame's end: a mark above what is still to come would wait for
// bytes that never come. endLowWater restores the mark. left = 0 reads
// as data comes.
func (l *link) readFull(p []byte, left int) error {
	if len(l.carry) > 0 {
		k := copy(p, l.carry)
		l.carry = l.carry[k:]
		p = p[k:]
		left -= k
	}
	most, mark := chunk, lowWaterMax
	if l.rcallMax > 0 {
		most, mark = min(most, l.rcallMax), min(mark, l.rcallMax)
	}
	for len(p) > 0 {
		n := min(len(p), most)
		if err := l.arm(false); err != nil {
			return err
		}
		if l.lw == nil || (left <= pollMax && !l.lowSet) {
			k, err := io.ReadFull(l.conn, p[:n])
			p, left = p[k:], left-k
			if k > 0 && !l.rfixMoved {
				l.rfix = time.Time{} // it moved: fresh deadlines again
			}
			if err != nil {
				if l.late(err) {
					continue
				}
				return l.ioErr(err, false)
			}
			continue
		}
		if err := l.lw.SetReadLowWater(min(left, mark)); err == nil {
			l.lowSet = true
		} else if l.lowSet && l.lw.SetReadLowWater(1) == nil {
			l.lowSet = false // a hint: without it, reads wake as data comes
		}
		k, err := l.conn.Read(p[:n])
		p, left = p[k:], left-k
		if k > 0 && !l.rfixMoved {
			l.rfix = time.Time{}
		}
		if err != nil && len(p) > 0 {
			if l.late(err) {
				continue
			}
			return l.ioErr(err, false)
		}
	}
	if l.rfixMoved {
		// moving's deadline held through this read's bytes (some may
		// have waited unread since before the peer stopped); the next
		// read arms afresh.
		l.rfix, l.rfixMoved = time.Time{}, false
	}
	return nil
}

// endLowWater restores the default low-water mark after readFull raised
// it, before any other read of the link (small frames are polled).
func (l *link) endLowWater() {
	if l.lowSet {
		l.lowSet = false
		_ = l.lw.SetReadLowWater(1)
	}
}

// beginRead starts reading a frame that must have tag want and a payload of
// exactly the bytes of parts (in order), which it fills. finishRead (which
// waits) and pollRead (which does not) move it forward; both may be used,
// in any order, on one frame.
func (l *link) beginRead(want byte, parts [][]byte) {
	// Copied into the link's own slice, so parts itself does not escape
	// and a variadic call does not allocate.
	l.rparts = append(l.rparts[:0], parts...)
	l.rwant, l.rhave, l.rpart, l.roff = want, 0, 0, 0
}

// checkHeader checks the header just read against the frame expected. An
// Abort or Shutdown frame is turned into its error; any other tag, or a
// length that differs, is refused without reading the payload (beyond what
// a staged read took with the header: at most the size of the frame
// expected, see pollStaged).
func (l *link) checkHeader() error {
	n, tag, err := ParseHeader(l.rhdr[:])
	if err == ErrZeroLength {
		// LEN 0 leaves no room for the tag: a length mismatch like any
		// other (InvalidBufferSize), reported as payload length -1.
		err = nil
		tag = l.rwant
	}
	if err != nil {
		return err
	}
	if tag != l.rwant {
		return l.unexpected(tag, l.rwant, n)
	}
	expected := 0
	for _, p := range l.rparts {
		expected += len(p)
	}
	if n != expected {
		return &lengthError{tag: tag, got: n, expected: expected}
	}
	return nil
}

// finishRead reads the rest of the frame begun by beginRead, waiting for it
// under the read timeout. An EOF before the frame's first byte is io.EOF;
// after it, io.ErrUnexpectedEOF.
func (l *link) finishRead() error {
	if err := l.readHeader(); err != nil {
		return err
	}
	left := -l.roff
	for _, p := range l.rparts[l.rpart:] {
		left += len(p)
	}
	defer l.endLowWater()
	for ; l.rpart < len(l.rparts); l.rpart, l.roff = l.rpart+1, 0 {
		part := l.rparts[l.rpart][l.roff:]
		if err := l.readFull(part, left); err != nil {
			return unexpectedEOF(err)
		}
		left -= len(part)
	}
	l.endRead()
	return nil
}

// readHeader reads the rest of the header of the frame begun by beginRead,
// if any, and checks it.
func (l *link) readHeader() error {
	if l.rhave >= HeaderSize {
		return nil
	}
	if err := l.readFull(l.rhdr[l.rhave:], 0); err != nil {
		if l.rhave > 0 {
			err = unexpectedEOF(err)
		}
		return err
	}
	l.rhave = HeaderSize
	return l.checkHeader()
}

// endRead forgets the buffers of a completed frame, so the link does not
// keep the caller's memory alive, and keeps the slice for the next one.
func (l *link) endRead() {
	clear(l.rparts)
	l.rparts = l.rparts[:0]
}

// pollRead moves the frame begun by beginRead forward with what has already
// arrived, without waiting (l.poller must be set). It reports whether the
// frame is complete and how many bytes it took.
func (l *link) pollRead() (done bool, got int, err error) { return l.pollReadAt(time.Time{}) }

// pollReadAt is pollRead at time now (see armAt).
func (l *link) pollReadAt(now time.Time) (done bool, got int, err error) {
	done, got, err = l.pollReadOnce(now)
	if got > 0 && !l.rfix.IsZero() {
		l.rfix, l.rfixMoved = time.Time{}, false // it moved: fresh deadlines again (see moving)
	}
	return done, got, err
}

// pollReadOnce is pollReadAt but for clearing l.rfix.
func (l *link) pollReadOnce(now time.Time) (done bool, got int, err error) {
	if err := l.armAt(false, now); err != nil {
		return false, 0, err
	}
	if l.rhave == 0 {
		if size := l.frameSize(); size > HeaderSize && size <= stageMax {
			// All that has arrived of the frame, in one read: the
			// socket has nothing more of it now.
			return l.pollStaged(size)
		}
	}
	for l.rhave < HeaderSize {
		n, err := l.poller.ReadNow(l.rhdr[l.rhave:])
		l.rhave += n
		got += n
		switch {
		case err != nil && l.late(err):
			return false, got, nil // the next round arms afresh
		case err != nil:
			err = l.ioErr(err, false)
			if l.rhave > 0 {
				err = unexpectedEOF(err)
			}
			return false, got, err
		case n == 0:
			return false, got, nil
		case l.rhave == HeaderSize:
			if err := l.checkHeader(); err != nil {
				return false, got, err
			}
		}
	}
	for l.rpart < len(l.rparts) {
		p := l.rparts[l.rpart][l.roff:]
		if len(p) > 0 {
			n, err := l.poller.ReadNow(p)
			l.roff += n
			got += n
			if err != nil {
				if l.late(err) {
					return false, got, nil
				}
				return false, got, unexpectedEOF(l.ioErr(err, false))
			}
			if n < len(p) {
				return false, got, nil
			}
		}
		l.rpart, l.roff = l.rpart+1, 0
	}
	l.endRead()
	return true, got, nil
}

// frameSize is the size, header included, of the frame begun by beginRead.
func (l *link) frameSize() int {
	n := HeaderSize
	for _, p := range l.rparts {
		n += len(p)
	}
	return n
}

// pollStaged begins polling a frame of want bytes (header included, at
// most stageMax) none of which has arrived: it reads as much of it as has
// arrived with one system call into l.rstage, never more than the frame
// expected, and moves it to the header and parts, so that pollReadAt goes
// on from there. It reports whether the frame is complete and how many
// bytes it took (0: nothing had arrived).
// When the header is not the one expected, what was read past it stays in
// l.carry for readFull.
func (l *link) pollStaged(want int) (done bool, got int, err error) {
	if cap(l.rstage) < want {
		l.rstage = make([]byte, want) // the largest small frame yet: once per link and size
	}
	buf := l.rstage[:want]
	n, err := l.poller.ReadNow(buf)
	if err != nil {
		if l.late(err) {
			return false, 0, nil
		}
		return false, 0, l.ioErr(err, false)
	}
	if n == 0 {
		return false, 0, nil
	}
	l.rhave = copy(l.rhdr[:], buf[:n])
	if l.rhave < HeaderSize {
		return false, n, nil
	}
	rest := buf[HeaderSize:n]
	l.carry = rest
	if err := l.checkHeader(); err != nil {
		return false, n, err
	}
	l.carry = nil
	for len(rest) > 0 {
		k := copy(l.rparts[l.rpart][l.roff:], rest)
		rest = rest[k:]
		l.roff += k
		if l.roff == len(l.rparts[l.rpart]) {
			l.rpart, l.roff = l.rpart+1, 0
		}
	}
	for l.rpart < len(l.rparts) && len(l.rparts[l.rpart]) == 0 {
		l.rpart++
	}
	if l.rpart == len(l.rparts) {
		l.endRead()
		return true, n, nil
	}
	return false, n, nil
}

// readFrame reads a frame that must have tag want and a payload of exactly
// the bytes of parts (in order), which it fills, waiting under the read
// timeout. An Abort or Shutdown frame is turned into its error; any other
// tag, or a length that differs, is refused without reading the payload.
func (l *link) readFrame(want byte, parts ...[]byte) error {
	l.beginRead(want, parts)
	return l.finishRead()
}

// awaitFrame is readFrame that first polls the link for up to spin without
// progress (when its transport is a transport.Poller and spin > 0), and
// parks only if the frame has not arrived by then.
func (l *link) awaitFrame(spin time.Duration, want byte, parts ...[]byte) error {
	l.beginRead(want, parts)
	if l.poller != nil && spin > 0 {
		done, _, err := pollLinks(spin, l.timeout, l)
		if err != nil || done == 1 {
			return err
		}
	}
	return l.finishRead()
}

// unexpected turns a frame with the wrong tag into an error: Abort frames
// carry a reason (read if short enough), Shutdown means the coordinator
// closed, anything else is a protocol error.
func (l *link) unexpected(tag, want byte, n int) error {
	switch {
	case tag == TagAbort && n <= MaxAbortReason:
		buf := make([]byte, n)
		if err := l.readFull(buf, 0); err != nil {
			return unexpectedEOF(err)
		}
		return parseAbort(l.peer, buf)
	case tag == TagShutdown && n == 0 && want != TagHandshake:
		return ErrShutdown
	}
	return &tagError{got: tag, want: want, n: n}
}

// startDrain starts reading and discarding whatever the peer still sends,
// until it closes its end, the conn closes, or until passes, so that a
// peer blocked in a write (on an unbuffered transport) can move on and
// read a final frame, and so that closing our end does not find unread
// data (which would reset the connection and lose what we sent last).
// l.drained is closed when it stops.
func (l *link) startDrain(until time.Time) {
	_ = l.conn.SetReadDeadline(until)
	l.drained = make(chan struct{})
	go func() {
		defer close(l.drained)
		var buf [4096]byte
		for {
			n, err := l.conn.Read(buf[:])
			l.drainedBytes += n
			if k := min(n, drainHeadMax-len(l.drainHead)); k > 0 {
				l.drainHead = append(l.drainHead, buf[:k]...)
			}
			if err != nil {
				return
			}
		}
	}()
}

// drainHeadMax is how much of what a link drains at its end is kept: an
// Abort frame with the longest reason.
const drainHeadMax = HeaderSize + 1 + MaxAbortReason

// drainedAbort returns the Abort the peer sent, if the link's drain (begun
// at a frame boundary, and over: see finish) read one first, else nil.
func (l *link) drainedAbort() *AbortError {
	n, tag, err := ParseHeader(l.drainHead)
	if err != nil || tag != TagAbort || n > MaxAbortReason || len(l.drainHead) < HeaderSize+n {
		return nil
	}
	return parseAbort(l.peer, l.drainHead[HeaderSize:HeaderSize+n])
}

// sendFinal writes the link's last frame (Abort or Shutdown), unless a
// write was cut mid-frame, within until. Drain first (startDrain).
func (l *link) sendFinal(tag byte, payload []byte, until time.Time) error {
	if l.wdirty {
		return errDirty
	}
	if tag == TagAbort {
		payload = capBytes(payload, MaxAbortReason)
	}
	_ = l.conn.SetWriteDeadline(until)
	PutHeader(l.whdr[:], tag, len(payload))
	var err error
	if l.bw != nil && len(payload) > 0 {
		_, err = l.bw.WriteBuffers([][]byte{l.whdr[:HeaderSize], payload})
	} else if _, err = l.conn.Write(l.whdr[:HeaderSize]); err == nil && len(payload) > 0 {
		_, err = l.conn.Write(payload)
	}
	if err != nil {
		return edgeErr(err, true)
	}
	return nil
}

// awaitUnsent waits until the system has sent every byte written to the
// link, or until by, or the system cannot tell (see
// transport.UnsentCounter), checking every 20 µs at first and at least
// once a millisecond. After a failing collective's Abort: a worker's Abort
// can sit behind the tail of its own large frame in its send queue while
// rank 0 is still reading that frame, and a process that exits at once
// with bytes unread (the rest of rank 0's reply) resets the connection and
// the system drops what it had not sent.
func (l *link) awaitUnsent(by time.Time) {
	if l.uc != nil {
		awaitUnsent(l.uc, by, nil)
	}
}

// mayHoldUnread reports whether the peer's bytes may wait unread on the
// link: they do, or the conn cannot tell. Any goroutine may call it.
func (l *link) mayHoldUnread() bool {
	if l.ur == nil {
		return true
	}
	n, err := l.ur.Unread()
	return err != nil || n > 0
}

// awaitUnsent waits until uc has nothing unsent, or until by, or until it
// cannot tell, or until quit (nil: never) closes.
func awaitUnsent(uc transport.UnsentCounter, by time.Time, quit <-chan struct{}) {
	pause := 20 * time.Microsecond
	for {
		n, err := uc.Unsent()
		left := time.Until(by)
		if err != nil || n == 0 || left <= 0 {
			return
		}
		if quit == nil {
			time.Sleep(min(pause, left))
		} else {
			t := time.NewTimer(min(pause, left))
			select {
			case <-t.C:
			case <-quit:
				t.Stop()
				return
			}
		}
		pause = min(2*pause, time.Millisecond)
	}
}

// errDirty is why no final frame goes out on a link whose last write was
// cut in the middle of a frame.
var errDirty = errors.New("star: the link's last frame was cut short")

// finishGrace bounds the drain of a link whose half-close failed (see
// finish): reading what a reset connection still holds takes no waiting.
const finishGrace = 100 * time.Millisecond

// finish ends a link after its final frame: it half-closes our end where
// the conn can (the peer then reads the frame and EOF), waits for the
// drain to stop (the peer closed its end, or the drain's deadline passed),
// and closes the conn.
// Without a half-close (an unbuffered pipe), a completed write means the
// peer has the bytes, and the conn closes at once. A half-close that fails
// (the peer reset the connection: it had closed, and our final frame
// reached a closed socket) leaves what the peer sent before in our receive
// buffer, readable still: the drain gets finishGrace to read it (an Abort
// there is the peer's last word, see drainedAbort).
func (l *link) finish() {
	if l.cw != nil && l.drained != nil {
		if l.cw.CloseWrite() != nil {
			_ = l.conn.SetReadDeadline(time.Now().Add(finishGrace))
		}
		<-l.drained
	}
	_ = l.conn.Close()
	if l.drained != nil {
		<-l.drained
	}
}
