package star

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/starcomm/starcomm/comm"
)

// contextDeadline is the caller's context running out, which is not a
// peer's timeout.
var contextDeadline = context.DeadlineExceeded

// The Abort frame (tag 0x0B) is this package's extension of the spec's
// wire: a rank that gives up tells its peers why. Its payload is UTF-8
// text in two parts:
//
//	rank 3 failed during allgatherv (seen by rank 0): link to rank 3: ...
//	starcomm-abort/1 rank=3 op=allgatherv cause=timeout
//
// The first part, everything up to the last line, is the reason for
// people; it starts "rank N failed during OP" when a rank is to blame, the
// form any peer can parse. The last line, when it starts with
// abortStructMark, carries the same facts as key=value fields for
// programs: rank (the rank at fault, -1 when none), op (the operation,
// such as allgatherv or start-up) and cause (the class of the failure, see
// causes). A peer that sends only a reason is understood too: its rank is
// read from a leading "rank N", its cause is unknown.
const abortStructMark = "starcomm-abort/1 "

// causes maps the cause names of Abort frames to the errors they stand
// for, so that errors.Is finds the original class of a failure on every
// rank, not only on the rank that saw it.
var causes = map[string]error{
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
	"closed":         errClosedRemote,
	"refused":        errRefusedRemote,
	"running":        errRunningRemote,
	"unresponsive":   remoteUnresponsive{},
	"exited":         remoteExited{},
	"desync":         ErrDesync,
	"auth":           ErrAuthentication,
}

// errClosedRemote stands for a rank that closed its communicator during a
// collective, as seen by the other ranks: comm.ErrPeerClosed.
var errClosedRemote = comm.ErrPeerClosed

// errRefusedRemote marks an Abort that refuses a handshake.
var errRefusedRemote = errors.New("star: handshake refused")

// errRunningRemote marks an Abort that refuses a handshake because the
// coordinator's start-up is over: its job is running, and the worker
// belongs to another (the next job on the same port, started while this
// one ends). The worker tries again, within its ConnectTimeout.
var errRunningRemote = errors.New("star: the coordinator's job is already running")

// remoteTimeout stands for a timeout seen by another rank. It matches
// os.ErrDeadlineExceeded (and any error whose Timeout method reports true)
// in errors.Is.
type remoteTimeout struct{}

func (remoteTimeout) Error() string        { return "timeout (seen by another rank)" }
func (remoteTimeout) Timeout() bool        { return true }
func (remoteTimeout) Is(target error) bool { return isTimeoutTarget(target) }

// causeName classifies err for an Abort frame ("" when unknown).
func causeName(err error) string {
	var ur *UnresponsiveError
	var ru remoteUnresponsive
	switch {
	case errors.As(err, &ur) || errors.As(err, &ru):
		return "unresponsive"
	case isExited(err):
		return "exited"
	case errors.Is(err, ErrDesync):
		return "desync"
	case errors.Is(err, ErrAuthentication):
		return "auth"
	case errors.Is(err, errRefusedRemote):
		return "refused"
	case errors.Is(err, errRunningRemote):
		return "running"
	case errors.Is(err, errClosed) || errors.Is(err, errClosedRemote):
		return "closed"
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
	case isTimeout(err):
		return "timeout"
	}
	var ab *AbortError
	if errors.As(err, &ab) && ab.Cause != nil {
		return causeName(ab.Cause)
	}
	return ""
}

// AbortError is the cause carried by an Abort frame (tag 0x0B): the peer
// refused a handshake or gave up on the communicator.
type AbortError struct {
	// From is the rank that sent the Abort.
	From int
	// Rank is the rank at fault, as the sender saw it, or -1.
	Rank int
	// Op is the operation that failed ("allgatherv", "start-up", ...), or
	// "" when the sender did not say.
	Op string
	// Reason is the sender's explanation, for people.
	Reason string
	// Cause is the class of the original failure (os.ErrDeadlineExceeded,
	// io.EOF, syscall.ECONNRESET, ErrUnexpectedTag, ...), or nil when the
	// sender did not say; errors.Is finds it through the AbortError.
	Cause error

	// away, on rank 0, is how long its own process had been away (see
	// Comm.away) when the Abort came on the control session, or 0.
	away time.Duration
}

// Error names the rank that sent the Abort and its reason.
func (e *AbortError) Error() string {
	return fmt.Sprintf("aborted by rank %d: %s", e.From, e.Reason)
}

// Unwrap returns the cause class, if any.
func (e *AbortError) Unwrap() error { return e.Cause }

// abortPayload is the payload of an Abort frame blaming rank (-1: none)
// for a failure of op, with reason for people and cause classified.
func abortPayload(rank int, op string, cause error, reason string) []byte {
	fields := fmt.Sprintf("%srank=%d op=%s", abortStructMark, rank, token(op))
	if name := causeName(cause); name != "" {
		fields += " cause=" + name
	}
	// The structured line must survive the cut to MaxAbortReason whole.
	room := MaxAbortReason - len(fields) - 1
	reason = string(capBytes([]byte(reason), room))
	return []byte(reason + "\n" + fields)
}

// token makes s usable as a field value: no spaces or line breaks.
func token(s string) string {
	if s == "" {
		return "-"
	}
	return strings.Map(func(r rune) rune {
		if r == ' ' || r == '\n' || r == '\r' || r == '\t' || r == '=' {
			return '_'
		}
		return r
	}, s)
}

// parseAbort reads an Abort payload received from rank from.
func parseAbort(from int, payload []byte) *AbortError {
	text := string(payload)
	ab := &AbortError{From: from, Rank: -1, Reason: text}
	if i := strings.LastIndexByte(text, '\n'); i >= 0 && strings.HasPrefix(text[i+1:], abortStructMark) {
		reason, last := text[:i], text[i+1:]
		ab.Reason = reason
		for _, kv := range strings.Fields(last[len(abortStructMark):]) {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "rank":
				if n, err := strconv.Atoi(v); err == nil && n >= -1 {
					ab.Rank = n
				}
			case "op":
				if v != "-" {
					ab.Op = v
				}
			case "cause":
				ab.Cause = causes[v]
			}
		}
		return ab
	}
	ab.Rank = leadingRank(text)
	return ab
}

// leadingRank parses the rank named at the start of a plain reason, "rank
// N ...", or returns -1.
func leadingRank(reason string) int {
	rest, ok := strings.CutPrefix(reason, "rank ")
	if !ok {
		return -1
	}
	end := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' })
	if end < 0 {
		end = len(rest)
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

// capBytes cuts b to at most n bytes, on a UTF-8 boundary.
func capBytes(b []byte, n int) []byte {
	if len(b) <= n {
		return b
	}
	cut := max(n, 0)
	for cut > 0 && !utf8.RuneStart(b[cut]) {
		cut--
	}
	return b[:cut]
}

// EncodeAbort returns the full Abort frame whose whole payload is reason,
// cut to MaxAbortReason bytes on a UTF-8 boundary: the plain form, as a
// peer that knows only the reason sends it.
func EncodeAbort(reason string) []byte {
	p := capBytes([]byte(reason), MaxAbortReason)
	b := make([]byte, HeaderSize+len(p))
	PutHeader(b, TagAbort, len(p))
	copy(b[HeaderSize:], p)
	return b
}
