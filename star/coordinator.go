package star

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/transport"
)

// coordinator is rank 0's part of every collective. It reads and writes
// small frames itself, polling every worker link from the collective's
// goroutine; what polling does not finish, and every large frame, is done
// by the links' own goroutines, one per worker, concurrently, each serving
// one request at a time.
//
// A request carries what the link needs (the tag and payload to write, or
// the order to finish the frame begun with beginRead) and hands the link
// to its goroutine until the result comes back on results. The goroutines
// run until stop closes their request channels, which Close does only
// once no collective runs, so no request is ever left without a result.
type coordinator struct {
	c    *Comm
	gate *admission // serving control connections, when the control session is on
	// graceEnd is sessionGrace after start-up (see awaitSession).
	graceEnd time.Time
	quit     chan struct{} // closed by stop: the stall monitor ends
	workers  []*link       // the links to ranks 1..size-1, in rank order
	byRank   []*link       // byRank[r] is the link to rank r; byRank[0] is nil
	results  chan result
	serving  sync.WaitGroup
	// polled is set when every worker link can be polled and Spin > 0.
	polled bool

	// Scratch reused across collectives.
	todo    []*link   // the links a fan-in or fan-out still waits for
	stage   []byte    // a small frame, staged once for every link
	astage  []byte    // a medium frame, staged once for every link (see scatter)
	staged  [1][]byte // the request's parts for astage (no allocation per scatter)
	one     [1][]byte
	opBytes []byte   // allreduce: the op byte each worker sent, by rank
	scratch []uint64 // allreduce: the workers' contributions
	mine    []byte   // the desync check: rank 0's fingerprint
	fps     [][]byte // every rank's, by rank
	rs      relayState
	st      streamState // a streamed allreduce (see reduce.go)
	// The wait for every worker's header of a streamed allreduce or a
	// relayed allgatherv (see expectHeaders): its collective, its start
	// (monoNow) and the timer that tells the workers.
	hereSeq   atomic.Uint64
	hereStart atomic.Int64
	hereTimer *time.Timer
	// movedAt is when a call on a worker's link last went on past its
	// deadline because the link still moved (monoNow; 0: never), and
	// movedPast wakes busyMonitor when one does (see linkMoved).
	movedAt   atomic.Int64
	movedPast chan struct{}
	// lastWord is when this rank last sent msgBusy (monoNow; 0: never;
	// see busyEdge), and edgeWord when it last sent it as a collective
	// ended (busyEdge): the next collective's beginning counts both.
	lastWord atomic.Int64
	edgeWord atomic.Int64
	firsts   [][]byte // a streamed allreduce: chunk 0 of every worker
}

// request is one link's part of a collective.
type request struct {
	kind  reqKind
	tag   byte     // reqWrite: the frame's tag
	parts [][]byte // reqWrite: its payload, in order; reqWriteStaged: the whole frame
	n     int      // reqStreamRead: the payload's data bytes (after the op byte)
}

type reqKind uint8

const (
	reqRead        reqKind = iota // finish the frame begun with beginRead
	reqWrite                      // write a frame of tag with payload parts
	reqWriteStaged                // write the frame staged in parts[0] (see scatter)
	reqRest                       // write what postFrame left
	reqHeader                     // read and check the header of the frame begun with beginRead
	reqRelayRead                  // read the rest of the relayed region (see relay)
	reqRelayWrite                 // write the relayed AllgathervRecv frame (see relay)
	reqStreamRead                 // read a streamed allreduce's payload (see reduce.go)
	reqStreamWrite                // write a streamed allreduce's overlapped reply (see reduce.go)
)

// result is a link's answer to a request.
type result struct {
	peer  int
	err   error
	write bool // a relay writer's result
}

// newCoordinator starts the goroutine of every link (links[r] is rank r's;
// links[0] is nil; none for a communicator of size 1).
func newCoordinator(c *Comm, links []*link) *coordinator {
	co := &coordinator{c: c, byRank: links, results: make(chan result, 2*c.size), opBytes: make([]byte, c.size), quit: make(chan struct{}),
		movedPast: make(chan struct{}, 1)}
	if len(links) > 1 {
		co.workers = links[1:]
	}
	co.todo = make([]*link, 0, len(co.workers))
	co.polled = c.cfg.Spin > 0
	for _, l := range co.workers {
		co.polled = co.polled && l.poller != nil
		l.owner = c
		l.onMoved = co.linkMoved
		l.ctlReads = true
		l.reqs = make(chan request, 1)
		l.wreqs = make(chan request, 1)
		co.serving.Add(2)
		go co.serve(l)
		go co.writeServe(l)
	}
	if len(co.workers) > 0 && c.cfg.Logger != nil {
		co.serving.Go(co.stallMonitor)
	}
	if len(co.workers) > 0 && c.cfg.control() {
		co.serving.Go(co.busyMonitor)
	}
	return co
}

// serve runs link l's requests until its channel closes.
func (co *coordinator) serve(l *link) {
	defer co.serving.Done()
	for req := range l.reqs {
		var err error
		switch req.kind {
		case reqRead:
			err = l.finishRead()
		case reqWrite:
			err = l.writeFrame(req.tag, nil, req.parts...)
		case reqWriteStaged:
			err = l.writeStagedFrame(req.parts[0])
		case reqRest:
			err = l.finishWrite()
		case reqHeader:
			err = l.readHeader()
		case reqRelayRead:
			err = co.relayRead(l)
		case reqStreamRead:
			err = co.streamRead(l, req.n)
		}
		co.c.hook(hookServed)
		co.results <- result{peer: l.peer, err: err}
	}
}

func (co *coordinator) links() []*link { return co.workers }

// broadcastAbort sends an Abort payload to every worker but except over
// its control session, for the collectives numbered after `after` (see
// msgAbortAfter), without waiting (each send is bounded by
// ShutdownTimeout; Close waits for them). When sent is not nil, each send
// puts a token in it once it is over (sent must have room for one per
// worker); it returns how many sends it started (none on a session that
// is stopping).
func (co *coordinator) broadcastAbort(after uint64, payload []byte, except int, sent chan<- int) int {
	body := append(binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(payload)), after), payload...)
	until := time.Now().Add(co.c.cfg.ShutdownTimeout)
	n := 0
	for _, l := range co.workers {
		if ctl := l.ctl.Load(); ctl != nil && l.peer != except {
			if ctl.goUnlessStopped(func() {
				co.c.hook(hookOOB)
				err := ctl.send(msgAbortAfter, body, until)
				if sent != nil {
					told := l.peer
					if err != nil {
						told = -1
					}
					sent <- told
				}
			}) {
				n++
			}
		}
	}
	return n
}

// allSilent reports whether every worker with a control session, at least
// two of them, has been silent for half the liveness timeout or more, and
// how many there are.
func (co *coordinator) allSilent(now time.Time) (int, bool) {
	n := 0
	for _, l := range co.workers {
		ctl := l.ctl.Load()
		if ctl == nil {
			continue
		}
		if now.Sub(time.Unix(0, ctl.heard.Load())) < co.c.cfg.Liveness/2 {
			return 0, false
		}
		n++
	}
	return n, n >= 2
}

// attach starts the control session of worker rank, set up by the gate.
func (co *coordinator) attach(rank int, cc *controlConn) {
	l := co.byRank[rank]
	co.setPeerTimeout(l, 0) // the heartbeats take over
	ctl := newControl(co.c, rank, cc.conn, cc.sess, cc.hb, cc.msgs)
	l.ctl.Store(ctl)
	ctl.start()
	co.c.log(slog.LevelDebug, "control session up", "rank", rank)
}

// setPeerTimeouts holds every worker's host to d on its data link (see
// setPeerTimeout).
func (co *coordinator) setPeerTimeouts(d time.Duration) {
	for _, l := range co.workers {
		co.setPeerTimeout(l, d)
	}
}

// setPeerTimeout asks worker l's data link to fail (ETIMEDOUT) once l's
// host has acknowledged nothing for d (transport.PeerTimeoutSetter; 0
// restores the link's own setting). A worker without a control session
// (a spec-only one, or one lost before its session came up: its host
// gone, its network cut during start-up) is then found within d rather
// than at the collective timeout; a live worker's host acknowledges,
// however long its process computes. A conn without the ability is left
// as it is.
func (co *coordinator) setPeerTimeout(l *link, d time.Duration) {
	ps, ok := l.conn.(transport.PeerTimeoutSetter)
	if !ok {
		return
	}
	if err := ps.SetPeerTimeout(d); err != nil && !errors.Is(err, errors.ErrUnsupported) {
		co.c.log(slog.LevelDebug, "cannot set the data link's peer timeout", "rank", l.peer, "timeout", d, "err", err)
	}
}

// closeGate stops accepting control connections: the listener closes
// before a worker learns that this communicator ends (a Shutdown or an
// Abort), so that a worker of the next job on the same port never reaches
// it.
func (co *coordinator) closeGate() {
	if co.gate != nil {
		co.gate.closeListener()
	}
}

// stop ends the links' goroutines, the gate and the control sessions. No
// collective may be running.
func (co *coordinator) stop() {
	for _, l := range co.workers {
		close(l.reqs)
		close(l.wreqs)
	}
	close(co.quit)
	co.serving.Wait()
	if co.gate != nil {
		co.gate.stop()
	}
	// At once: each waits for its farewell to be sent.
	var wg sync.WaitGroup
	for _, l := range co.workers {
		if ctl := l.ctl.Load(); ctl != nil {
			wg.Go(ctl.stop)
		}
	}
	wg.Wait()
}

// fan hands req to each of links, to run concurrently on their goroutines,
// waits for every result and returns the first failure as a *linkError.
// With cut, the first failure cancels the other links (reads are safe to
// cut; a write cut mid-frame would leave a worker without its result).
func (co *coordinator) fan(links []*link, req request, cut bool) error {
	for _, l := range links {
		co.c.hook(hookHandoff)
		l.reqs <- req
	}
	var first error
	seq := co.c.seq
	for range links {
		res := <-co.results
		co.c.hook(hookResult)
		if res.err == nil {
			switch req.kind {
			case reqRead:
				co.byRank[res.peer].arrive(seq)
			case reqHeader:
				co.byRank[res.peer].head(seq)
			case reqWrite, reqWriteStaged, reqRest:
				co.byRank[res.peer].deliver(seq, time.Now())
			}
		}
		if res.err != nil && first == nil {
			first = &linkError{peer: res.peer, err: res.err}
			if cut {
				for _, l := range links {
					if l.peer != res.peer {
						l.cancel(errCut)
					}
				}
			}
		}
	}
	return first
}

// gather reads one frame from every worker link, each begun with
// beginRead. With spin > 0 it first polls them all from this goroutine for
// up to spin without progress; the links whose frames are not complete by
// then finish on their own goroutines, concurrently, under the timeout. At
// the first failure it cancels the other links, waits for all, and
// returns that failure as a *linkError.
func (co *coordinator) gather(spin time.Duration) error {
	todo := append(co.todo[:0], co.workers...)
	if !co.polled || spin <= 0 {
		return co.fan(todo, request{kind: reqRead}, true)
	}
	start := time.Now()
	co.c.hook(hookPoll)
	done, bad, err := pollLinks(spin, co.c.cfg.Timeout, todo...)
	for _, l := range todo[:done] {
		l.arrive(co.c.seq)
	}
	if err != nil {
		return &linkError{peer: bad.peer, err: err}
	}
	if err := co.fan(todo[done:], request{kind: reqRead}, true); err != nil {
		return err
	}
	co.c.waited(time.Since(start))
	return nil
}

// scatter sends every worker link but skip a frame of tag with payload
// parts. A small frame goes out from this goroutine as far as each link
// takes it without waiting (with polling); the rest is written by the
// links' goroutines, concurrently (a large one with its header spliced
// apart, see link.writeApart). A frame of the size that alignedStageMax
// describes, to links that are all direct writers and not all able to
// splice, is copied once into co.astage and every link writes it from
// there (one copy instead of one per link: the same bytes go to every
// worker). It
// returns the first failure once every link's write is over (the links'
// goroutines may read co.astage until then); a worker that gets the
// whole result has a correct result.
func (co *coordinator) scatter(tag byte, parts [][]byte, skip int) error {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	todo := co.todo[:0]
	if !co.polled || co.c.spin(n) == 0 {
		direct, spliced := true, true
		for _, l := range co.workers {
			if l.peer != skip {
				todo = append(todo, l)
				direct = direct && l.direct
				spliced = spliced && l.sw != nil
			}
		}
		if size := HeaderSize + n; direct && !spliced && len(todo) > 1 && size > stageMax && size <= alignedStageMax {
			co.astage = stageAligned(co.astage, size)
			co.staged[0] = stageFrame(co.astage, tag, nil, parts) // in place: it fits
			return co.fan(todo, request{kind: reqWriteStaged, parts: co.staged[:]}, false)
		}
		return co.fan(todo, request{kind: reqWrite, tag: tag, parts: parts}, false)
	}
	var first error
	co.stage = stageFrame(co.stage, tag, nil, parts)
	now := time.Now()
	for _, l := range co.workers {
		if l.peer == skip {
			continue
		}
		done, err := l.postFrameAt(co.stage, now)
		co.c.hook(hookPosted)
		switch {
		case err == nil && done:
			l.deliver(co.c.seq, now)
		case err != nil:
			if first == nil {
				first = &linkError{peer: l.peer, err: err}
			}
		case !done:
			todo = append(todo, l)
		}
	}
	if err := co.fan(todo, request{kind: reqRest}, false); first == nil {
		first = err
	}
	return first
}

func (co *coordinator) allgatherv(send []byte, parts [][]byte) error {
	copy(parts[0], send)
	if co.relays(parts) {
		return co.relay(parts)
	}
	most := 0
	for _, l := range co.workers {
		l.beginRead(TagAllgathervSend, parts[l.peer:l.peer+1])
		most = max(most, len(parts[l.peer]))
	}
	if err := co.gather(co.c.spin(most)); err != nil {
		return err
	}
	return co.scatter(TagAllgathervRecv, parts, -1)
}

func (co *coordinator) allreduce(send, recv comm.View, op comm.ReduceOp) error {
	n := len(send.Bytes)
	if co.streams(n) {
		return co.allreduceStreamed(send, recv, op)
	}
	in := co.scratchBytes(len(co.workers) * n)
	for _, l := range co.workers {
		r := l.peer
		l.beginRead(TagAllreduceSend, [][]byte{co.opBytes[r : r+1], in[(r-1)*n : r*n]})
	}
	if err := co.gather(co.c.spin(n + 1)); err != nil {
		return err
	}
	for _, l := range co.workers {
		if comm.ReduceOp(co.opBytes[l.peer]) != op {
			return co.opMismatch(op)
		}
	}
	copy(recv.Bytes, send.Bytes)
	for r := 1; r <= len(co.workers); r++ {
		comm.Reduce(send.Type, op, recv.Bytes, in[(r-1)*n:r*n])
	}
	co.one[0] = recv.Bytes
	return co.scatter(TagAllreduceRecv, co.one[:], -1)
}

// opMismatch is the failure of an allreduce whose ranks disagree on the
// reduction operator (rank 0's is op, the workers' are in co.opBytes). As
// the desync check does, it takes the operator most ranks called as the
// reference (rank 0's on a tie) and blames the lowest rank that called
// another: so when every worker agrees and rank 0 alone differs, rank 0.
func (co *coordinator) opMismatch(op comm.ReduceOp) error {
	co.opBytes[0] = byte(op)
	var votes [256]int
	for r := range co.c.size {
		votes[co.opBytes[r]]++
	}
	ref := co.opBytes[0]
	for v := range votes {
		if votes[v] > votes[ref] {
			ref = byte(v)
		}
	}
	blame, peer := -1, -1
	var others []int
	for r := range co.c.size {
		if co.opBytes[r] == ref {
			others = append(others, r)
			continue
		}
		if blame < 0 {
			blame = r
		}
		if peer < 0 && r > 0 {
			peer = r
		}
	}
	msg := fmt.Sprintf("rank %d called allreduce with %v; %s with %v", blame, comm.ReduceOp(co.opBytes[blame]), rankWord(others), comm.ReduceOp(ref))
	return &linkError{peer: peer, err: &opMismatchError{rank: blame, msg: msg}}
}

// opMismatchError is an allreduce's disagreement on the reduction
// operator, blaming rank.
type opMismatchError struct {
	rank int
	msg  string
}

func (e *opMismatchError) Error() string { return ErrReduceOpMismatch.Error() + ": " + e.msg }
func (e *opMismatchError) Unwrap() error { return ErrReduceOpMismatch }

// scratchKeep bounds the allreduce scratch the coordinator keeps for
// allreduces that need much less of it. An allreduce of n bytes takes
// ·n (every worker's contribution, to reduce them in rank order): the
// scratch of a large one is kept while later allreduces need at least a
// quarter of it (so that a series of them does not allocate), and is let
// go, for a scratch of the size needed, by the first that needs less.
// With the default streamMin (equal to it) no stored allreduce needs more
// than scratchKeep: a larger one is streamed (see reduce.go), and the rule
// applies only where a test raises streamMin.
var scratchKeep = 64 << 20

// scratchBytes returns n bytes of 8-byte-aligned scratch space.
func (co *coordinator) scratchBytes(n int) []byte {
	words := (n + 7) / 8
	if kept := cap(co.scratch); kept < words || kept*8 > scratchKeep && words < kept/4 {
		co.scratch = make([]uint64, words)
	}
	return comm.ViewOf(co.scratch[:words]).Bytes[:n]
}

func (co *coordinator) broadcast(buf []byte, root int) error {
	for _, l := range co.workers {
		if l.peer != root {
			l.arrive(co.c.seq) // they only receive
		}
	}
	if root != 0 {
		spin := co.c.spin(len(buf))
		start := time.Now()
		if err := co.byRank[root].awaitFrame(spin, TagBroadcast, buf); err != nil {
			return &linkError{peer: root, err: err}
		}
		if co.polled && spin > 0 {
			co.c.waited(time.Since(start))
		}
		co.byRank[root].arrive(co.c.seq)
		co.byRank[root].deliver(co.c.seq, time.Now())
	}
	co.one[0] = buf
	return co.scatter(TagBroadcast, co.one[:], root)
}

func (co *coordinator) barrier() error {
	for _, l := range co.workers {
		l.beginRead(TagBarrierReady, nil)
	}
	if err := co.gather(co.c.spin(0)); err != nil {
		return err
	}
	return co.scatter(TagBarrierGo, nil, -1)
}

// shutdown is the coordinator's graceful end (docs/protocol.md,
// "Collectives": Shutdown): Shutdown to every worker at once, then each
// link waits, at most ShutdownTimeout from now, for its worker to close its
// end, and closes. A worker that had sent an Abort (it failed after rank
// 0's last collective) is an error naming the rank its Abort blames; one
// the Shutdown could not be written to, or that was still sending (it
// called a collective that rank 0 did not), is an error naming it.
func (co *coordinator) shutdown() error {
	co.closeGate()
	until := time.Now().Add(co.c.cfg.ShutdownTimeout)
	errs := make([]error, len(co.byRank))
	var wg sync.WaitGroup
	for _, l := range co.workers {
		l.startDrain(until)
		wg.Go(func() {
			if err := l.sendFinal(TagShutdown, nil, until); err != nil {
				errs[l.peer] = fmt.Errorf("rank %d: Shutdown not delivered: %w", l.peer, err)
			}
			l.finish()
			// The worker's last word first: a worker that failed after
			// rank 0's last collective (rank 0 finished it, the worker
			// did not) sent an Abort and closed, which also makes the
			// Shutdown fail; its Abort says what went wrong and whom
			// that worker blames.
			if ab := l.drainedAbort(); ab != nil {
				errs[l.peer] = ab
			} else if l.drainedBytes > 0 && errs[l.peer] == nil {
				errs[l.peer] = fmt.Errorf("rank %d was still sending (%d bytes) when rank 0 closed: it called a collective that rank 0 did not (the ranks called different collectives)", l.peer, l.drainedBytes)
			}
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			blame := r
			if ab, ok := err.(*AbortError); ok && ab.Rank >= 0 {
				blame = ab.Rank
			}
			return &comm.CollectiveFailedError{Operation: OpClose, Rank: blame, Message: "graceful shutdown incomplete", Err: joinLine(errs...)}
		}
	}
	return nil
}

// lineErrors is several errors as one, on one line: errors.Join's, with
// "; " for its newlines, so that a log line or an error file's record
// holds it whole.
type lineErrors []error

func (e lineErrors) Error() string {
	parts := make([]string, len(e))
	for i, err := range e {
		parts[i] = err.Error()
	}
	return strings.Join(parts, "; ")
}

// Unwrap returns the errors, for errors.Is and errors.As.
func (e lineErrors) Unwrap() []error { return e }

// joinLine returns the non-nil errs as a lineErrors (nil if none).
func joinLine(errs ...error) error {
	var out lineErrors
	for _, err := range errs {
		if err != nil {
			out = append(out, err)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// checkCall reads every worker's fingerprint of collective seq (a worker
// without a control session is not checked) and compares them with rank
// 0's (see compareCalls).
func (co *coordinator) checkCall(seq uint64, cl *call) error {
	if co.fps == nil {
		co.fps = make([][]byte, co.c.size)
	}
	co.mine = cl.fingerprint(co.mine, seq)
	co.fps[0] = co.mine
	for _, l := range co.workers {
		co.fps[l.peer] = nil
		ctl := l.ctl.Load()
		if ctl == nil {
			var err error
			if ctl, err = co.awaitSession(l); err != nil {
				return &linkError{peer: l.peer, err: err}
			}
			if ctl == nil {
				continue // a worker without one (a spec-only one) is not checked
			}
		}
		fp, err := co.readCall(l, ctl, seq)
		if err != nil {
			return &linkError{peer: l.peer, err: err}
		}
		co.fps[l.peer] = fp
	}
	return compareCalls(seq, co.fps)
}

// sessionGrace is how long after start-up the desync check waits for a
// worker's control session that has not even been asked for (its
// connection not yet approved): a starcomm worker with the check on asks
// within milliseconds (see worker.startControl); a spec-only one never
// does.
const sessionGrace = 2 * time.Second

// awaitSession waits for worker l's control session, which its first
// collectives can precede (it is set up in the background after
// start-up), so that the desync check covers them too: as long as the
// session is being set up, or, until sessionGrace after start-up, not yet
// asked for while the listener is open. It returns nil, and the worker's
// calls go unchecked, once no session can come (a worker that opens none,
// like a spec-only one), or, with a warning, after the collective timeout.
// Cancelling l interrupts it.
func (co *coordinator) awaitSession(l *link) (*control, error) {
	if co.gate == nil {
		return nil, nil
	}
	until := time.NewTimer(co.c.cfg.Timeout)
	defer until.Stop()
	// A cancel sets a cause and passes the socket's deadline: nothing to
	// select on, so the cause is looked at every few milliseconds.
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	callHook(l.peer, hookAwaitSession)
	for {
		if ctl := l.ctl.Load(); ctl != nil {
			return ctl, nil
		}
		if err := l.cancelled(); err != nil {
			return nil, err
		}
		setting, over, change := co.gate.sessions.state(l.peer)
		if !setting && (over || !time.Now().Before(co.graceEnd)) {
			return l.ctl.Load(), nil
		}
		select {
		case <-change:
		case <-tick.C:
		case <-until.C:
			co.c.log(slog.LevelWarn, "collective check: no control session from this worker within the timeout; its calls are not checked", "rank", l.peer)
			return nil, nil
		}
	}
}

// readCall returns worker l's fingerprint of collective seq, as its
// control session's reader of messages keeps them (skipping those of
// earlier collectives, sent before the coordinator attached the session),
// waiting for it at most Timeout. Cancelling l interrupts it.
func (co *coordinator) readCall(l *link, ctl *control, seq uint64) ([]byte, error) {
	t := time.NewTimer(co.c.cfg.Timeout)
	defer t.Stop()
	for {
		if err := l.cancelled(); err != nil {
			return nil, err
		}
		if fp, ok := ctl.takeCall(seq); ok {
			return fp, nil
		}
		select {
		case <-ctl.callsIn:
		case <-ctl.msgsDone:
			if fp, ok := ctl.takeCall(seq); ok {
				return fp, nil
			}
			if err := l.cancelled(); err != nil {
				return nil, err
			}
			return nil, fmt.Errorf("control session: %w", ctl.msgsErr)
		case <-t.C:
			return nil, noProgress{fmt.Errorf("no fingerprint of collective #%d from rank %d within the %v timeout", seq, l.peer, co.c.cfg.Timeout)}
		}
	}
}
