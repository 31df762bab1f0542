package star

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"syscall"
)

// Frame tags (docs/protocol.md, "Frames"; plus the Abort extension; the Control and
// authentication tags are in control.go and auth.go).
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

// MaxAbortReason bounds the payload of an Abort frame; a longer one is a
// protocol error and is not read.
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
	case TagControl:
		return "Control"
	case TagAuthChallenge:
		return "AuthChallenge"
	case TagAuthResponse:
		return "AuthResponse"
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

// tagError is a frame whose tag is not the one expected next.
type tagError struct {
	got, want byte
	n         int // the frame's payload length
}

func (e *tagError) Error() string {
	msg := fmt.Sprintf("received %s frame, expected %s", TagName(e.got), TagName(e.want))
	if isCollectiveTag(e.got) && isCollectiveTag(e.want) {
		// Without the desync check the frame's sender is blamed, though
		// the rank that differs may be this one.
		msg += " (the ranks called different collectives, or a rank went on after its call was refused for its arguments; COBRE_DEBUG=detail names the rank that differs)"
	}
	return msg
}

// isCollectiveTag reports whether tag is one of a collective's frames
// (0x01 to 0x07).
func isCollectiveTag(tag byte) bool { return tag >= TagAllgathervSend && tag <= TagBarrierGo }

func (e *tagError) Unwrap() error { return ErrUnexpectedTag }

// lengthError is a frame of the expected tag whose payload length differs
// from what this rank's arguments say: an InvalidBufferSize error.
type lengthError struct {
	tag           byte
	got, expected int // payload bytes; got is -1 for LEN 0
}

func (e *lengthError) Error() string {
	if e.got < 0 {
		return fmt.Sprintf("frame with LEN 0 (no room for its tag) where a %s frame of %d payload bytes was expected", TagName(e.tag), e.expected)
	}
	return fmt.Sprintf("%s frame carries %d payload bytes, expected %d", TagName(e.tag), e.got, e.expected)
}

// Unwrap makes a frame with LEN 0 match ErrZeroLength.
func (e *lengthError) Unwrap() error {
	if e.got < 0 {
		return ErrZeroLength
	}
	return nil
}

// brokenPipe is a write to a peer that closed, reported by an in-memory
// pipe as io.ErrClosedPipe: it is what TCP reports as EPIPE, so it matches
// syscall.EPIPE in errors.Is. (Close of this end during a collective is
// told apart by the communicator, not here.)
type brokenPipe struct{ err error }

func (e brokenPipe) Error() string        { return "broken pipe (peer closed): " + e.err.Error() }
func (e brokenPipe) Unwrap() error        { return e.err }
func (e brokenPipe) Is(target error) bool { return target == syscall.EPIPE }

// noProgress is a failure because nothing moved for too long, reported by
// the system rather than by a deadline of ours: TCP_USER_TIMEOUT and
// keep-alive end a cut-off connection with ETIMEDOUT. It keeps that error
// and also matches os.ErrDeadlineExceeded in errors.Is, as every
// no-progress failure does.
type noProgress struct{ err error }

func (e noProgress) Error() string        { return e.err.Error() }
func (e noProgress) Unwrap() error        { return e.err }
func (e noProgress) Timeout() bool        { return true }
func (e noProgress) Is(target error) bool { return isTimeoutTarget(target) }

// isTimeoutTarget reports whether target is a deadline error such as
// os.ErrDeadlineExceeded (an error whose Timeout method reports true),
// without star importing os. A context's deadline is not one: it is the
// caller's, not the peer's. Nor is a system error number (ETIMEDOUT's
// Timeout is true too): an error matches syscall.ETIMEDOUT only when the
// system said so, which it then wraps.
func isTimeoutTarget(target error) bool {
	var t interface{ Timeout() bool }
	var errno syscall.Errno
	return target != nil && !errors.Is(target, contextDeadline) && !errors.As(target, &errno) && errors.As(target, &t) && t.Timeout()
}

// edgeErr translates a driver's I/O error at the edge, so that the rest of
// the package sees one vocabulary: a pipe's io.ErrClosedPipe on a write is
// a broken pipe (EPIPE), and a system timeout (ETIMEDOUT) is a no-progress
// failure.
func edgeErr(err error, write bool) error {
	switch {
	case write && errors.Is(err, io.ErrClosedPipe):
		return brokenPipe{err}
	case errors.Is(err, syscall.ETIMEDOUT):
		// Its Timeout method may already say true (a syscall.Errno does),
		// but errors.Is(err, os.ErrDeadlineExceeded) does not hold.
		return noProgress{err}
	}
	return err
}

// isTimeout reports whether err says that nothing moved in time (a passed
// deadline, or the system's own timeout).
func isTimeout(err error) bool {
	var to interface{ Timeout() bool }
	return errors.As(err, &to) && to.Timeout() && !errors.Is(err, contextDeadline)
}

// unexpectedEOF maps an EOF in the middle of a frame to io.ErrUnexpectedEOF.
func unexpectedEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
