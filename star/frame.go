package star

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/starcomm/starcomm/transport"
)

// Frame tags (spec section 4.2, plus the Abort extension of DESIGN.md).
const (
	TagAllgathervSend byte = 0x01
	TagAllgathervRecv byte = 0x02
	TagAllreduceSend  byte = 0x03
	TagAllreduceRecv  byte = 0x04
	TagBroadcast      byte = 0x05
	TagBarrierReady   byte = 0x06
	TagBarrierGo      byte = 0x07
	TagHandshake      byte = 0x08
	TagAck            byte = 0x09
	TagShutdown       byte = 0x0A
	TagAbort          byte = 0x0B
)

// HeaderSize is the size of LEN (4 bytes) plus TAG (1 byte).
const HeaderSize = 5

// MaxFrameLen is the largest LEN value (TAG + PAYLOAD bytes) a frame can
// carry: LEN is a u32, so the payload is at most 2^32 - 2 bytes.
const MaxFrameLen = 1<<32 - 1

// MaxAbortReason bounds the reason carried by an Abort frame; a longer one
// is a protocol error and is not read.
const MaxAbortReason = 64 << 10

// chunk bounds a single Read or Write call, so the per-operation deadline
// (Config.Timeout) applies to at most this many bytes, not a whole frame.
const chunk = 4 << 20

// TagName returns the spec's name of a tag, for messages.
func TagName(tag byte) string {
	switch tag {
	case TagAllgathervSend:
		return "AllgathervSend"
	case TagAllgathervRecv:
		return "AllgathervRecv"
	case TagAllreduceSend:
		return "AllreduceSend"
	case TagAllreduceRecv:
		return "AllreduceRecv"
	case TagBroadcast:
		return "Broadcast"
	case TagBarrierReady:
		return "BarrierReady"
	case TagBarrierGo:
		return "BarrierGo"
	case TagHandshake:
		return "Handshake"
	case TagAck:
		return "Ack"
	case TagShutdown:
		return "Shutdown"
	case TagAbort:
		return "Abort"
	}
	return fmt.Sprintf("0x%02X", tag)
}

// PutHeader writes the 5-byte frame header for a frame with the given tag and
// payload length into h.
func PutHeader(h []byte, tag byte, payloadLen int) {
	binary.BigEndian.PutUint32(h[0:4], uint32(payloadLen+1))
	h[4] = tag
}

// ParseHeader decodes a frame header: the payload length (LEN - 1) and the
// tag. LEN = 0 (no room for a tag) is ErrZeroLength, with payload length -1.
func ParseHeader(h []byte) (payloadLen int, tag byte, err error) {
	if len(h) < HeaderSize {
		return 0, 0, fmt.Errorf("star: frame header of %d bytes, need %d", len(h), HeaderSize)
	}
	n := binary.BigEndian.Uint32(h[0:4])
	if n == 0 {
		return -1, h[4], ErrZeroLength
	}
	return int(n - 1), h[4], nil
}

// ErrZeroLength is the cause when a frame header has LEN = 0, which leaves
// no room for the tag.
var ErrZeroLength = errors.New("star: frame with LEN 0 (no tag)")

// ErrUnexpectedTag is the cause when a peer sends a frame whose tag is not
// the one the protocol expects next.
var ErrUnexpectedTag = errors.New("star: unexpected frame tag")

// ErrShutdown is the cause when the coordinator shut the communicator down
// (tag Shutdown) while this worker expected a collective.
var ErrShutdown = errors.New("star: coordinator shut down")

// ErrReduceOpMismatch is the cause when ranks call Allreduce with different
// operators.
var ErrReduceOpMismatch = errors.New("star: ranks disagree on the reduction operator")

// AbortError is the cause carried by an Abort frame (tag 0x0B): the peer
// refused a handshake or gave up on the communicator. Reason is the peer's
// UTF-8 text; Rank is the rank it blames, parsed from a reason of the form
// "rank N ...", or -1; Cause is the class of the original failure, parsed
// from a "[cause=NAME]" token (see causeNames), so that errors.Is finds
// os.ErrDeadlineExceeded, io.EOF, io.ErrUnexpectedEOF, syscall.ECONNRESET,
// ErrUnexpectedTag, ErrReduceOpMismatch or context.Canceled on every rank,
// not only on the rank that saw the failure.
type AbortError struct {
	From   int
	Rank   int
	Reason string
	Cause  error
}

func (e *AbortError) Error() string {
	return fmt.Sprintf("aborted by rank %d: %s", e.From, e.Reason)
}

// Unwrap returns the cause class named in the reason, if any.
func (e *AbortError) Unwrap() error { return e.Cause }

// remoteTimeout stands for a timeout seen by another rank. It matches
// os.ErrDeadlineExceeded (and any error whose Timeout method reports true)
// in errors.Is, without star importing os.
type remoteTimeout struct{}

func (remoteTimeout) Error() string { return "timeout (seen by another rank)" }
func (remoteTimeout) Timeout() bool { return true }
func (remoteTimeout) Is(target error) bool {
	var t interface{ Timeout() bool }
	return target != context.DeadlineExceeded && errors.As(target, &t) && t.Timeout()
}

// causeNames maps the cause tokens of Abort reasons to the errors they
// stand for.
var causeNames = map[string]error{
	"timeout":        remoteTimeout{},
	"eof":            io.EOF,
	"unexpected-eof": io.ErrUnexpectedEOF,
	"reset":          syscall.ECONNRESET,
	"pipe":           syscall.EPIPE,
	"tag":            ErrUnexpectedTag,
	"op":             ErrReduceOpMismatch,
	"shutdown":       ErrShutdown,
	"canceled":       context.Canceled,
	"deadline":       context.DeadlineExceeded,
}

// causeName classifies err for an Abort reason ("" when unknown).
func causeName(err error) string {
	var to interface{ Timeout() bool }
	switch {
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline"
	case errors.Is(err, syscall.ECONNRESET):
		return "reset"
	case errors.Is(err, syscall.EPIPE):
		return "pipe"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "unexpected-eof"
	case errors.Is(err, io.EOF):
		return "eof"
	case errors.Is(err, ErrUnexpectedTag):
		return "tag"
	case errors.Is(err, ErrReduceOpMismatch):
		return "op"
	case errors.Is(err, ErrShutdown):
		return "shutdown"
	case errors.As(err, &to) && to.Timeout():
		return "timeout"
	}
	return ""
}

// parseCause finds the "[cause=NAME]" token in an Abort reason.
func parseCause(reason string) error {
	_, rest, ok := strings.Cut(reason, "[cause=")
	if !ok {
		return nil
	}
	name, _, ok := strings.Cut(rest, "]")
	if !ok {
		return nil
	}
	return causeNames[name]
}

// blamedRank parses the rank named at the start of an abort reason.
func blamedRank(reason string) int {
	rest, ok := strings.CutPrefix(reason, "rank ")
	if !ok {
		return -1
	}
	end := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' })
	if end < 0 {
		end = len(rest) // the digits run to the end
	}
	if end == 0 {
		return -1
	}
	n, err := strconv.Atoi(rest[:end])
	if err != nil {
		return -1
	}
	return n
}

// frameError reports a frame that does not match what the receiver expects.
type frameError struct {
	kind     string // "tag", "length"
	tag      byte   // received tag
	want     byte   // expected tag
	got      int    // received payload length
	expected int    // expected payload length
}

func (e *frameError) Error() string {
	if e.kind == "tag" {
		return fmt.Sprintf("received %s frame, expected %s", TagName(e.tag), TagName(e.want))
	}
	return fmt.Sprintf("%s frame carries %d payload bytes, expected %d", TagName(e.tag), e.got, e.expected)
}

func (e *frameError) Unwrap() error {
	if e.kind == "tag" {
		return ErrUnexpectedTag
	}
	return nil
}

// link is one end of a coordinator-worker connection: the conn, the peer's
// rank, and per-link scratch space so framing does not allocate.
type link struct {
	peer int
	conn transport.Conn
	bw   transport.BuffersWriter
	// timeout and rtimeout are the per-call write and read deadlines. On a
	// worker both are longer than the coordinator's (see replyMargin), so
	// that when a third rank hangs the coordinator detects it first and its
	// Abort arrives in time.
	timeout  time.Duration
	rtimeout time.Duration
	// deadline, when set, is an absolute bound for every read and write
	// (start-up: the whole handshake within one timeout).
	deadline time.Time
	// rdl and wdl are the read and write deadlines set on conn now (zero:
	// unknown). Setting a deadline can wake the runtime's network poller,
	// a context switch per I/O, so a deadline is re-armed only when less
	// than a whole timeout of it remains (see arm).
	rdl, wdl time.Time

	whdr [HeaderSize + 1]byte
	rhdr [HeaderSize]byte
	// The frame being read (see beginRead): the tag expected, where its
	// payload goes, how many header bytes have arrived, and how far into
	// rparts the payload has got.
	rwant  byte
	rparts [][]byte
	rhave  int
	rpart  int
	roff   int
	// poller is conn's non-blocking I/O, when it has it.
	poller transport.Poller
	// wrest is what a non-blocking write of a small frame did not take
	// (see postFrame).
	wrest []byte
	wbufs [][]byte
	parts [][]byte
	// wdirty is set when a write stopped mid-frame: the stream can no longer
	// carry a well-formed frame, so no Abort is sent on it.
	wdirty bool
}

func newLink(peer int, conn transport.Conn, timeout time.Duration) *link {
	l := &link{peer: peer, conn: conn, timeout: timeout, rtimeout: timeout}
	l.bw, _ = conn.(transport.BuffersWriter)
	l.poller, _ = conn.(transport.Poller)
	return l
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
	hdr := l.whdr[:HeaderSize+len(extra)]
	l.wdirty = true
	if err := l.writeAll(hdr, parts); err != nil {
		return err
	}
	l.wdirty = false
	return nil
}

// writeAll writes hdr and parts, at most chunk bytes per call, each call
// under a fresh deadline. With a BuffersWriter each call is one writev.
func (l *link) writeAll(hdr []byte, parts [][]byte) error {
	bufs := append(l.wbufs[:0], hdr)
	for _, p := range parts {
		if len(p) > 0 {
			bufs = append(bufs, p)
		}
	}
	l.wbufs = bufs[:0]
	for len(bufs) > 0 {
		// Take up to chunk bytes from the front of bufs.
		batch := l.parts[:0]
		size := 0
		for len(bufs) > 0 && size < chunk {
			b := bufs[0]
			if size+len(b) > chunk {
				b = b[:chunk-size]
				bufs[0] = bufs[0][len(b):]
			} else {
				bufs = bufs[1:]
			}
			batch = append(batch, b)
			size += len(b)
		}
		l.parts = batch[:0]
		// A deadline that cannot be set (a pipe refuses once the peer has
		// closed) is not the error to report: the I/O below reports the
		// real one.
		l.arm(&l.wdl, l.timeout, l.conn.SetWriteDeadline)
		if l.bw != nil && len(batch) > 1 {
			if _, err := l.bw.WriteBuffers(batch); err != nil {
				return writeErr(err)
			}
			continue
		}
		for _, b := range batch {
			if _, err := l.conn.Write(b); err != nil {
				return writeErr(err)
			}
		}
	}
	return nil
}

// arm makes sure the next I/O call fails if it makes no progress for d:
// it sets the deadline to now + d + deadlineSlack(d), unless the one set
// (*cur) is still at least d away. So a silent peer is detected after
// between d and d + deadlineSlack(d), and a deadline is set at most once
// per slack, not once per I/O. With an absolute l.deadline (start-up),
// that is the deadline.
func (l *link) arm(cur *time.Time, d time.Duration, set func(time.Time) error) {
	if !l.deadline.IsZero() {
		*cur = time.Time{}
		_ = set(l.deadline)
		return
	}
	now := time.Now()
	if !cur.IsZero() && !cur.Before(now.Add(d)) {
		return
	}
	*cur = now.Add(d + deadlineSlack(d))
	_ = set(*cur)
}

// deadlineSlack is how much later than d a silent peer may be detected:
// min(d/20, 250 ms).
func deadlineSlack(d time.Duration) time.Duration {
	return min(d/20, 250*time.Millisecond)
}

// forgetDeadlines makes the next I/O set its deadlines again (after
// someone else changed them: an interrupt).
func (l *link) forgetDeadlines() { l.rdl, l.wdl = time.Time{}, time.Time{} }

// capReason cuts an Abort reason to MaxAbortReason bytes, on a UTF-8
// boundary, so that every receiver accepts it.
func capReason(reason []byte) []byte {
	if len(reason) <= MaxAbortReason {
		return reason
	}
	cut := MaxAbortReason
	for cut > 0 && !utf8.RuneStart(reason[cut]) {
		cut--
	}
	return reason[:cut]
}

// replyMargin is how much longer a worker waits for the coordinator than the
// coordinator waits for a worker: min(timeout/2, 500 ms).
func replyMargin(timeout time.Duration) time.Duration {
	return min(timeout/2, 500*time.Millisecond)
}

// brokenPipe is a write to a peer that closed, reported by an in-memory
// pipe as io.ErrClosedPipe: it is what TCP reports as EPIPE, so it matches
// syscall.EPIPE in errors.Is. (Close of this end during a collective is
// told apart by the communicator, not here.)
type brokenPipe struct{ err error }

func (e brokenPipe) Error() string        { return "broken pipe (peer closed): " + e.err.Error() }
func (e brokenPipe) Unwrap() error        { return e.err }
func (e brokenPipe) Is(target error) bool { return target == syscall.EPIPE }

// writeErr translates a driver's write error at the edge.
func writeErr(err error) error {
	if errors.Is(err, io.ErrClosedPipe) {
		return brokenPipe{err}
	}
	return err
}

// readFull fills p, at most chunk bytes per deadline.
func (l *link) readFull(p []byte) error {
	for len(p) > 0 {
		n := min(len(p), chunk)
		l.arm(&l.rdl, l.rtimeout, l.conn.SetReadDeadline) // see writeAll
		if _, err := io.ReadFull(l.conn, p[:n]); err != nil {
			return err
		}
		p = p[n:]
	}
	return nil
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
// length that differs, is refused without reading the payload.
func (l *link) checkHeader() error {
	n, tag, err := ParseHeader(l.rhdr[:])
	if err == ErrZeroLength {
		// LEN 0 leaves no room for the tag: a length mismatch like any
		// other (spec table 5.3), reported as payload length -1.
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
		return &frameError{kind: "length", tag: tag, got: n, expected: expected}
	}
	return nil
}

// finishRead reads the rest of the frame begun by beginRead, waiting for it
// under the read timeout. An EOF before the frame's first byte is io.EOF;
// after it, io.ErrUnexpectedEOF.
func (l *link) finishRead() error {
	if l.rhave < HeaderSize {
		if err := l.readFull(l.rhdr[l.rhave:]); err != nil {
			if l.rhave > 0 {
				err = unexpectedEOF(err)
			}
			return err
		}
		l.rhave = HeaderSize
		if err := l.checkHeader(); err != nil {
			return err
		}
	}
	for ; l.rpart < len(l.rparts); l.rpart, l.roff = l.rpart+1, 0 {
		if err := l.readFull(l.rparts[l.rpart][l.roff:]); err != nil {
			return unexpectedEOF(err)
		}
	}
	l.endRead()
	return nil
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
func (l *link) pollRead() (done bool, got int, err error) {
	for l.rhave < HeaderSize {
		n, err := l.poller.ReadNow(l.rhdr[l.rhave:])
		l.rhave += n
		got += n
		switch {
		case err != nil:
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
				return false, got, unexpectedEOF(err)
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
		done, _, err := pollLinks(spin, l.rtimeout, l)
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
		if err := l.readFull(buf); err != nil {
			return unexpectedEOF(err)
		}
		return &AbortError{From: l.peer, Rank: blamedRank(string(buf)), Reason: string(buf), Cause: parseCause(string(buf))}
	case tag == TagShutdown && n == 0 && want != TagHandshake:
		return ErrShutdown
	}
	return &frameError{kind: "tag", tag: tag, want: want, got: n}
}

// unexpectedEOF maps an EOF in the middle of a frame to io.ErrUnexpectedEOF.
func unexpectedEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// linger notifies the peer of the end of the link and closes it: it drains
// whatever the peer is still writing (so a peer blocked in a write on an
// unbuffered transport can move on and read), writes frame tag with payload
// (unless a write was cut mid-frame), then waits up to grace for the peer
// to close its end before closing ours (where the conn can half-close).
func (l *link) linger(tag byte, payload []byte, grace time.Duration) {
	if tag == TagAbort {
		payload = capReason(payload)
	}
	deadline := time.Now().Add(grace)
	drained := make(chan struct{})
	_ = l.conn.SetReadDeadline(deadline)
	go func() {
		defer close(drained)
		var buf [4096]byte
		for {
			if _, err := l.conn.Read(buf[:]); err != nil {
				return
			}
		}
	}()
	if !l.wdirty {
		_ = l.conn.SetWriteDeadline(deadline)
		var h [HeaderSize]byte
		PutHeader(h[:], tag, len(payload))
		if _, err := l.conn.Write(h[:]); err == nil && len(payload) > 0 {
			_, _ = l.conn.Write(payload)
		}
		if cw, ok := l.conn.(transport.CloseWriter); ok && cw.CloseWrite() == nil {
			// Half-closed (TCP): the frame may still sit in our send
			// buffer; closing before the peer is done reading could reset
			// the connection and lose it. Wait for the peer to close.
			<-drained // the peer closed, or the read deadline passed
		}
		// Without a half-close (an unbuffered pipe), a completed Write
		// means the peer has the bytes.
	}
	_ = l.conn.Close()
	<-drained
}
