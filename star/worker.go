package star

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/starcomm/starcomm/comm"
)

// worker is the part of a rank 1..R-1 in every collective: it writes its
// frame to the coordinator and polls, then waits, for the reply, all from
// the collective's goroutine.
type worker struct {
	c    *Comm
	up   *link
	ends []*link // {up}
	op   [1]byte
	fp   []byte // the desync check's fingerprint, reused

	// opening is the control session being opened in the background;
	// stopOpening cancels it.
	opening     sync.WaitGroup
	stopOpening context.CancelFunc
	// ctlDue is set while the control session is still to be opened: at
	// the first frame from rank 0, or when ctlTimer fires (see
	// startControl). ctlMu orders the opening with stop.
	ctlDue   atomic.Bool
	ctlMu    sync.Mutex
	ctlTimer *time.Timer
	// noSession holds why the control session could not be opened, until
	// the next collective logs it (see warnNoSession).
	noSession atomic.Pointer[error]

	// The fingerprints of collectives called while the opening was not
	// over yet (see checkCall), oldest first, sent when it is; fpLive is
	// set then, and later fingerprints go straight to the session (if
	// any). Both under fpMu.
	fpMu    sync.Mutex
	fpQueue [][]byte
	fpLive  bool

	// The sender of a duplex exchange (see exchangeDuplex): started at
	// the first, ended by stop.
	sends   chan sendReq
	sent    chan error
	senders sync.WaitGroup
}

// sendReq is a frame for the duplex exchange's sender to write.
type sendReq struct {
	tag         byte
	extra, send []byte
}

// duplexMin is the least payload a worker writes while it reads the reply
// (see exchangeDuplex): a frame that may not fit in the sockets' buffers
// (4 MiB asked for on each side). A streamed allreduce's frame is written
// so whatever its size (see worker.allreduce). A variable for tests.
var duplexMin = 4 << 20

func newWorker(c *Comm, up *link) *worker {
	up.owner = c
	w := &worker{c: c, up: up, ends: []*link{up}, stopOpening: func() {}}
	w.fpLive = !c.cfg.control() // no session to wait for
	return w
}

func (w *worker) links() []*link { return w.ends }

// controlWait is how long after start-up a worker of three ranks or more
// waits, at most, for a frame from rank 0 before it opens its control
// session anyway (see startControl). A variable for tests.
var controlWait = 2 * time.Second

// startControl opens the control session once a second connection to
// rank 0's port cannot take a worker's place: a coordinator that only
// knows the spec accepts exactly R-1 connections and takes each for a
// worker's, and it acknowledges each Handshake as it comes, so a
// connection made while another worker has not joined yet could be taken
// for that worker's, failing the job. Once rank 0 has sent this worker a
// collective's frame it holds every worker's connection (a spec
// coordinator runs no collective before, and a starcomm one acknowledges
// no Handshake before), so the session is opened then, or controlWait
// (at most a third of ConnectTimeout, within which rank 0 keeps its
// listener for the sessions, counted from its Acks: ranks are expected to
// share ConnectTimeout) after start-up, whichever comes first. It is
// opened at once where no spec coordinator can be on the other end or none
// can be waiting for another worker: with a token (every rank must be
// starcomm), with the desync check on (it needs the sessions from the
// first collective), and in a job of two ranks (this is the only worker).
func (w *worker) startControl() {
	cfg := w.c.cfg
	if w.c.size == 2 || len(cfg.Token) > 0 || cfg.CheckCollectives {
		w.openControl()
		return
	}
	w.ctlMu.Lock()
	defer w.ctlMu.Unlock()
	w.ctlDue.Store(true)
	w.ctlTimer = time.AfterFunc(min(controlWait, cfg.ConnectTimeout/3), w.controlNow)
}

// controlNow opens the control session if it is still due (see
// startControl): when rank 0's first frame has come, or controlWait has
// passed. A communicator that has failed by then opens none: its
// collectives are over, and the port may already be the next job's
// coordinator's.
func (w *worker) controlNow() {
	if !w.ctlDue.Load() {
		return
	}
	w.ctlMu.Lock()
	defer w.ctlMu.Unlock()
	if w.ctlDue.Swap(false) {
		w.ctlTimer.Stop()
		if !w.c.hasFailed() {
			w.openControl()
		}
	}
}

// openControl opens the control session in the background, so that
// start-up never waits for it (a coordinator that only knows the spec may
// accept the connection and never answer); liveness starts once it is up.
// When the attempt is over, up or not, flushCalls ends the queueing of
// fingerprints.
func (w *worker) openControl() {
	ctx, cancel := context.WithCancel(context.Background())
	w.stopOpening = cancel
	w.opening.Go(func() {
		defer w.flushCalls()
		ctl, err := openControl(ctx, w.c)
		if err != nil {
			if ctx.Err() == nil {
				// Told at the next collective, if any: a coordinator
				// that ends its job before this session is up (a short
				// job) refuses it as it closes, which is no news.
				w.noSession.Store(&err)
				w.c.log(slog.LevelDebug, "no control session", "cause", err)
			}
			return
		}
		w.up.ctl.Store(ctl)
		ctl.start()
		if w.c.hasFailed() {
			// A collective failed before the session was up (so Comm.fail
			// did not say farewell on it): say it now, since this
			// process may exit any time.
			ctl.goUnlessStopped(func() { ctl.bidFarewell(time.Now().Add(farewellWait), ctl.stopped) })
		}
		w.c.log(slog.LevelDebug, "control session up", "rank", 0)
	})
}

// warnNoSession logs, once, at the first collective after the control
// session could not be opened, that the collectives run without it.
func (w *worker) warnNoSession() {
	if p := w.noSession.Swap(nil); p != nil {
		w.c.log(slog.LevelWarn, "no control session (the coordinator does not offer one): liveness and out-of-band Aborts are off", "cause", *p)
	}
}

func (w *worker) stop() {
	if w.sends != nil {
		close(w.sends)
		w.senders.Wait()
	}
	w.ctlMu.Lock()
	if w.ctlDue.Swap(false) {
		w.ctlTimer.Stop() // never opened: nothing to stop
	}
	w.ctlMu.Unlock()
	w.stopOpening()
	w.opening.Wait()
	if ctl := w.up.ctl.Load(); ctl != nil {
		ctl.stop()
	}
}

// exchange sends a frame of tag with extra and send as payload (unless
// tag is 0), then waits for the reply frame want, whose payload fills
// parts.
func (w *worker) exchange(tag byte, extra, send []byte, want byte, parts ...[]byte) error {
	if tag != 0 && want != 0 && len(send) >= duplexMin && w.up.ctl.Load() != nil {
		return w.exchangeDuplex(tag, extra, send, want, parts...)
	}
	if tag != 0 {
		if err := w.up.sendFrame(tag, extra, send); err != nil {
			// Rank 0 may have failed the collective, told this rank on the
			// control session, and gone while this frame was still going
			// out (a streamed allreduce reads a worker's frame only as it
			// reduces it): its reason, not the broken pipe, is the truth.
			return &linkError{peer: 0, err: w.controlLastWords(err)}
		}
		w.c.hook(hookSent)
	}
	if want == 0 {
		return nil
	}
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	w.c.hook(hookPoll)
	spin := w.c.spin(n)
	start := time.Now()
	if err := w.up.awaitFrame(spin, want, parts...); err != nil {
		return &linkError{peer: 0, err: w.controlLastWords(err)}
	}
	if spin > 0 {
		w.c.waited(time.Since(start))
	}
	w.controlNow()
	return nil
}

// exchangeDuplex is exchange for a large frame with a control session,
// and for every streamed allreduce: a goroutine of the worker's writes the
// frame while the collective's goroutine reads the reply, which rank 0 may
// begin before it has read the whole frame (a relayed allgatherv, a
// streamed allreduce's overlapped reply: see the coordinator). Read one
// after the other, the reply would wait in the sockets' buffers until the
// frame is out, and rank 0's outgoing link with it (and, when they are
// full, its writer, in one write under one deadline). The wire is the
// same; the timeouts are too: while
// the frame is still going out, the reply's read does not time out (the
// write's own deadline covers a rank 0 that takes nothing; a write that
// fails other than by rank 0's end cuts the read short), so the reply gets
// a whole timeout from the frame's end, as it does when read after it.
func (w *worker) exchangeDuplex(tag byte, extra, send []byte, want byte, parts ...[]byte) error {
	l := w.up
	if w.sends == nil {
		w.sends, w.sent = make(chan sendReq), make(chan error, 1)
		w.senders.Go(w.sender)
	}
	w.c.hook(hookDuplex)
	// A failed write leaves the read side to the reader (see link.ioErr).
	l.relayReading.Store(true)
	l.wroteEnd.Store(0)
	l.writing.Store(true)
	w.c.hook(hookHandoff)
	w.sends <- sendReq{tag: tag, extra: extra, send: send}
	w.c.hook(hookPoll)
	rerr := l.awaitFrame(0, want, parts...)
	werr := <-w.sent
	l.wroteEnd.Store(0)
	l.rfix, l.rfixMoved = time.Time{}, false
	l.relayReading.Store(false)
	l.wordsLater = false
	var ab *AbortError
	switch {
	case werr == nil && rerr == nil:
		w.controlNow()
		return nil
	case errors.As(rerr, &ab):
		return &linkError{peer: 0, err: rerr} // rank 0's own reason, read on the link
	case werr != nil:
		return &linkError{peer: 0, err: w.controlLastWords(werr)}
	}
	return &linkError{peer: 0, err: w.controlLastWords(rerr)}
}

// sender writes the duplex exchanges' frames until stop.
func (w *worker) sender() {
	l := w.up
	for r := range w.sends {
		err := l.sendFrame(r.tag, r.extra, r.send)
		l.wroteEnd.Store(monoNow())
		l.writing.Store(false)
		if err != nil && !peerGone(err) {
			// The reader would wait a whole timeout more: stop it. (A
			// rank 0 that is gone ends the read itself, after what it
			// sent before it went: its Abort, maybe.)
			l.cancel(err)
		} else if err == nil {
			w.c.hook(hookSent)
		}
		w.sent <- err
	}
}

// controlLastWords returns the coordinator's Abort in place of err when
// the data link ended (closed or reset) and the control session carries an
// Abort: a coordinator that cuts a frame short (see relay), or that fails
// while this rank's frame is still going out, sends its Abort out of band
// before it ends the data link, but the two connections race to this
// rank (see Comm.sessionWords).
func (w *worker) controlLastWords(err error) error {
	return w.c.sessionWords(w.up.ctl.Load(), err)
}

// sessionWords returns the peer's account of a failure, an Abort that
// its control session ctl carried (c.pending then holds it), in place of
// err when err shows that the peer ended the data link (closed or reset):
// a rank that fails tells its peer on both connections and may exit at
// once, and the two race to the peer; a rank that was stopped reads both
// at once when it resumes. It waits for that Abort at most lastWordsWait,
// and not at all once the control session has ended (its messages are
// then all read: a rank that crashed) or when there is none.
func (c *Comm) sessionWords(ctl *control, err error) error {
	if ctl == nil || !(errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || peerGone(err)) {
		return err
	}
	t := time.NewTimer(lastWordsWait)
	defer t.Stop()
	select {
	case <-ctl.aborted:
	case <-ctl.msgsDone:
	case <-t.C:
	}
	c.stateMu.Lock()
	pending := c.pending
	c.stateMu.Unlock()
	var ab *AbortError
	if errors.As(pending, &ab) {
		return ab
	}
	return err
}

func (w *worker) allgatherv(send []byte, parts [][]byte) error {
	total := 0
	for _, p := range parts {
		total += len(p)
	}
	if total >= relayMin {
		// Rank 0 may relay it: it then takes this rank's region only
		// once every rank's header is in, and says when it is here
		// (see link.hereExtend).
		w.up.streamed.Store(true)
		defer w.up.streamed.Store(false)
	}
	return w.exchange(TagAllgathervSend, nil, send, TagAllgathervRecv, parts...)
}

func (w *worker) allreduce(send, recv comm.View, op comm.ReduceOp) error {
	w.op[0] = byte(op)
	if streams(w.c.size-1, len(send.Bytes)) {
		// Rank 0 streams it: it takes this rank's frame only as fast as
		// the lower ranks' data comes, from its own arrival on (see
		// reduce.go). Its word that it is here (msgHere) gives this
		// rank's I/O a timeout from then on (see link.hereExtend).
		w.up.streamed.Store(true)
		defer w.up.streamed.Store(false)
		// Its reply may begin before rank 0 has taken this frame, and
		// rank 0 takes it only as fast as the lower ranks' data comes: a
		// frame written whole before the reply is read (one under
		// duplexMin, or before this rank's control session is up, which
		// rank 0 may already have) would hold rank 0's relay writer in
		// one write until then, and fail it, naming this rank, after a
		// timeout. So it is always written while the reply is read.
		// And in calls of at most a chunk, each with its deadline armed
		// as it begins (see link.wcallMax): a call then waits through one
		// of rank 0's waits for a lower rank's data, not several. A call
		// of up to 4 MiB (a whole frame of less) waited through them all,
		// and timed out, naming rank 0, behind a lower rank whose link
		// stalled several times, each time within the timeout.
		// The reply comes at the same pace: its reads too.
		w.up.wcallMax = streamChunkSize(w.c.size - 1)
		w.up.rcallMax = w.up.wcallMax
		defer func() { w.up.wcallMax, w.up.rcallMax = 0, 0 }()
		return w.exchangeDuplex(TagAllreduceSend, w.op[:], send.Bytes, TagAllreduceRecv, recv.Bytes)
	}
	return w.exchange(TagAllreduceSend, w.op[:], send.Bytes, TagAllreduceRecv, recv.Bytes)
}

func (w *worker) broadcast(buf []byte, root int) error {
	if w.c.rank == root {
		return w.exchange(TagBroadcast, nil, buf, 0)
	}
	return w.exchange(0, nil, nil, TagBroadcast, buf)
}

func (w *worker) barrier() error {
	return w.exchange(TagBarrierReady, nil, nil, TagBarrierGo)
}

// shutdown is a worker's graceful end (docs/protocol.md, "Collectives":
// Shutdown): it half-closes its end (a coordinator still waiting for it in
// a collective this rank did not call then fails at once, naming it),
// waits for the coordinator's Shutdown, at most the link's timeout, and
// closes. Anything else from rank 0 is an error naming it, or, for an
// Abort, naming the rank the Abort blames. The control session ends the
// wait sooner: a rank 0 silent for the liveness timeout, or whose process
// ended, or whose Abort comes on the session (Comm.interruptAfter cancels
// the link with that failure).
func (w *worker) shutdown() error {
	l := w.up
	if w.c.cfg.CheckCollectives && w.c.size > 1 {
		// The desync check: a coordinator waiting for the next
		// collective's fingerprints learns at once that this rank
		// closed instead (see opCodes).
		w.c.stateMu.Lock()
		next := w.c.seq + 1
		w.c.stateMu.Unlock()
		_ = w.sendCall(next, &call{op: OpClose}, farewellWait)
	}
	if l.cw != nil {
		_ = l.cw.CloseWrite()
	}
	err := l.readFrame(TagShutdown)
	_ = l.conn.Close()
	if err == nil {
		return nil
	}
	var why string
	blame := 0
	var ab *AbortError
	var te *tagError
	var ur *UnresponsiveError
	var ex *ExitedError
	switch {
	case errors.As(err, &ur):
		// The control session's verdict, whatever the collective
		// timeout: rank 0 (or this rank's link to it) froze.
		why, blame = "waiting for rank 0's Shutdown: "+ur.Error(), ur.Rank
	case errors.As(err, &ex):
		why, blame = "waiting for rank 0's Shutdown: "+ex.Error(), ex.Rank
	case errors.As(err, &ab):
		why = "rank 0 aborted instead of shutting down: " + err.Error() // the reason once
		if ab.Rank >= 0 && ab.Rank < w.c.size {
			blame = ab.Rank // possibly this rank, gone while the others were in a collective
		}
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		why = "rank 0 closed the connection without sending Shutdown (it crashed, exited or failed after the last collective)"
	case isTimeout(err):
		why = fmt.Sprintf("no Shutdown from rank 0 within the %v timeout (it has not closed its communicator)", w.c.cfg.Timeout)
	case errors.As(err, &te):
		why = fmt.Sprintf("rank 0 sent %s while this rank was closing: it called a collective that this rank did not (the ranks called different collectives)", TagName(te.got))
	default:
		why = "waiting for rank 0's Shutdown: " + err.Error()
	}
	return &comm.CollectiveFailedError{Operation: OpClose, Rank: blame, Message: why, Err: err}
}

// checkCall sends the fingerprint of collective seq over the control
// session, before the collective's data. Without a control session there
// is nothing to check against; a failed send leaves the coordinator
// waiting for it, which fails naming this rank.
//
// The coordinator expects fingerprints once it has attached the session,
// which may be before this end has it: while the opening is not over, the
// fingerprint waits in fpQueue, and goes out, in order, when the session
// is up (see flushCalls). The collective does not wait for that: its data
// link may already hold the coordinator's Abort, and a session whose
// coordinator has gone may take its whole HandshakeTimeout to fail.
func (w *worker) checkCall(seq uint64, cl *call) error {
	return w.sendCall(seq, cl, w.c.cfg.Timeout)
}

// sendCall is checkCall with a send bounded by within.
func (w *worker) sendCall(seq uint64, cl *call, within time.Duration) error {
	w.fp = cl.fingerprint(w.fp, seq)
	w.fpMu.Lock()
	if !w.fpLive {
		w.fpQueue = pushCall(w.fpQueue, slices.Clone(w.fp))
		w.fpMu.Unlock()
		return nil
	}
	w.fpMu.Unlock()
	if ctl := w.up.ctl.Load(); ctl != nil {
		_ = ctl.send(msgCall, w.fp, time.Now().Add(within))
	}
	return nil
}

// flushCalls ends the opening of the control session for the desync
// check: the fingerprints queued meanwhile go out on the session, if it is
// up, and later ones go straight to it.
func (w *worker) flushCalls() {
	w.fpMu.Lock()
	defer w.fpMu.Unlock()
	if ctl := w.up.ctl.Load(); ctl != nil {
		until := time.Now().Add(w.c.cfg.HandshakeTimeout)
		for _, fp := range w.fpQueue {
			_ = ctl.send(msgCall, fp, until)
		}
	}
	w.fpQueue, w.fpLive = nil, true
}
