package comm

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// ErrInvalidCommunicator is returned by every method of a Communicator that
// has been closed.
var ErrInvalidCommunicator = errors.New("comm: invalid communicator (closed)")

// ErrPeerClosed is the cause the other ranks' collective fails with when a
// rank closed its communicator during that collective (Close from another
// goroutine), or, on the shm backend, while they waited for it in one: the
// closing rank's own collective fails with ErrInvalidCommunicator.
var ErrPeerClosed = errors.New("comm: a rank closed its communicator during the collective")

// ErrConcurrentCall is returned, wrapped in an error naming both
// operations, by a collective called while another collective runs on the
// same communicator, from another goroutine. Calls on one communicator must not overlap: every rank has to
// make them in the same order, and overlapping calls have none. The call
// that overlapped did nothing; the one running goes on, and the
// communicator stays usable. (The local backend, whose collectives are
// copies within the caller's memory, does not check.)
var ErrConcurrentCall = errors.New("comm: collectives overlap on one communicator (calls must come one at a time)")

// ConcurrentCall is the error of op called while running runs:
// ErrConcurrentCall, with both named. running may be "" when unknown.
func ConcurrentCall(op, running string) error {
	if running == "" {
		running = "another collective"
	}
	return fmt.Errorf("%s called while %s runs on this communicator, from another goroutine: %w", op, running, ErrConcurrentCall)
}

// CollectiveFailedError reports a collective that could not complete: a peer
// crashed, hung, reset or cut off the connection, sent an unexpected frame,
// or the caller's context was cancelled (the CollectiveFailed error of the
// README's "Errors" table). Err keeps the cause for errors.Is
// (os.ErrDeadlineExceeded, io.EOF, io.ErrUnexpectedEOF, syscall.ECONNRESET,
// context.Canceled, ...).
type CollectiveFailedError struct {
	// Operation is the collective that failed: "allgatherv", "allreduce",
	// "broadcast", "barrier".
	Operation string
	// Code is the MPI error code; always 0 for starcomm's backends.
	Code int
	// Message describes the failure for logs.
	Message string
	// Rank is the rank at fault (the peer that failed, or this rank when its
	// own context was cancelled), or -1 when unknown.
	Rank int
	// Err is the underlying cause, if any.
	Err error
}

// Error names the collective, the rank at fault and what happened.
func (e *CollectiveFailedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "comm: %s failed", e.Operation)
	if e.Rank >= 0 {
		fmt.Fprintf(&b, " (rank %d)", e.Rank)
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	if e.Err != nil && !strings.Contains(e.Message, e.Err.Error()) {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the cause.
func (e *CollectiveFailedError) Unwrap() error { return e.Err }

// InvalidBufferSizeError reports a buffer whose length does not match what
// the operation requires: a precondition violated by the caller (lengths in
// elements), or a frame from a peer whose length disagrees with this rank's
// arguments (Unit "bytes": the payload length in bytes).
type InvalidBufferSizeError struct {
	// Operation is the collective.
	Operation string
	// Expected is the length the operation required.
	Expected int
	// Actual is the length it got.
	Actual int
	// Unit is "elements" (the default when empty) or "bytes".
	Unit string
	// Detail names the buffer or frame, e.g. "recv" or "frame from rank 2".
	Detail string
}

// Error names the buffer, the size expected and the size given.
func (e *InvalidBufferSizeError) Error() string {
	unit := e.Unit
	if unit == "" {
		unit = "elements"
	}
	what := ""
	if e.Detail != "" {
		what = " (" + e.Detail + ")"
	}
	if e.Expected == 1 {
		unit = strings.TrimSuffix(unit, "s") // "expected 1 element"
	}
	return fmt.Sprintf("comm: %s: invalid buffer size%s: expected %d %s, got %d", e.Operation, what, e.Expected, unit, e.Actual)
}

// InvalidRootError reports a broadcast root outside 0..Size-1.
type InvalidRootError struct {
	Root int
	Size int
}

// Error names the root and the ranks allowed.
func (e *InvalidRootError) Error() string {
	return fmt.Sprintf("comm: broadcast: invalid root %d for communicator of size %d (want 0..%d)", e.Root, e.Size, e.Size-1)
}

// InvalidArgumentError reports an argument that is wrong in a way other than
// a length: an operator the element type does not support, an unknown element
// type, overlapping allgatherv regions, mismatched send and recv types.
type InvalidArgumentError struct {
	Operation string
	Message   string
}

// Error names the collective and the argument at fault.
func (e *InvalidArgumentError) Error() string {
	return fmt.Sprintf("comm: %s: invalid argument: %s", e.Operation, e.Message)
}

// AllocationFailedError reports a shared-memory region that could not be
// allocated.
type AllocationFailedError struct {
	RequestedBytes int
	Message        string
}

// Error names the size requested and why it could not be had.
func (e *AllocationFailedError) Error() string {
	return fmt.Sprintf("comm: allocation of %d bytes failed: %s", e.RequestedBytes, e.Message)
}

// InitializationFailedError reports a backend that could not be started: the
// handshake was refused, the coordinator was never reached, a listen failed.
// It is the InitializationFailed error of the README's "Errors" table.
type InitializationFailedError struct {
	// Backend is the backend's name ("tcp", "star", ...).
	Backend string
	// Err is the cause.
	Err error
}

// Error names the backend and the cause.
func (e *InitializationFailedError) Error() string {
	return fmt.Sprintf("comm: %s backend initialization failed: %v", e.Backend, e.Err)
}

// Unwrap returns the cause.
func (e *InitializationFailedError) Unwrap() error { return e.Err }

// MissingConfigurationError lists every required configuration variable that
// was not set, all at once.
type MissingConfigurationError struct {
	Backend     string
	MissingVars []string
}

// Error names the backend and the variables it lacks.
func (e *MissingConfigurationError) Error() string {
	return fmt.Sprintf("comm: %s backend: missing required configuration: %s", e.Backend, strings.Join(e.MissingVars, ", "))
}

// InvalidBackendError reports an unknown backend name.
type InvalidBackendError struct {
	Name      string
	Available []string
	// Var, when set, is where the name came from: the environment
	// variable (COBRE_COMM_BACKEND) or the configuration field.
	Var string
}

// Error names the backend asked for and the ones available.
func (e *InvalidBackendError) Error() string {
	if e.Var != "" {
		return fmt.Sprintf("comm: unknown backend %q in %s (available: %s)", e.Name, e.Var, strings.Join(e.Available, ", "))
	}
	return fmt.Sprintf("comm: unknown backend %q (available: %s)", e.Name, strings.Join(e.Available, ", "))
}

// BackendNotAvailableError reports a known backend that cannot be used in
// this build or on this host.
type BackendNotAvailableError struct {
	Backend string
	Reason  string
}

// Error names the backend and why it is not available here.
func (e *BackendNotAvailableError) Error() string {
	return fmt.Sprintf("comm: backend %q is not available: %s", e.Backend, e.Reason)
}

// CheckContext returns an *InvalidArgumentError naming op when ctx is nil
// (every collective takes a context; a nil one would otherwise panic on
// its first use), else nil.
func CheckContext(op string, ctx context.Context) error {
	if ctx == nil {
		return &InvalidArgumentError{Operation: op, Message: "nil context: pass context.Background() or a context of your own"}
	}
	return nil
}
