// Package transport defines the minimal byte-stream connection that the star
// protocol runs over, and the listener and dialer that produce it. A driver
// (transport/tcp, transport/pipe, transport/faulty) implements these three
// interfaces and nothing else; framing, handshakes and collectives live in
// package star.
//
// Contract every driver keeps (the same as net.Conn's):
//   - Read and Write follow io.Reader and io.Writer; Write returns a non-nil
//     error when it writes fewer than len(p) bytes.
//   - Deadlines apply to pending and future I/O; an I/O call that hits one
//     returns an error satisfying errors.Is(err, os.ErrDeadlineExceeded). A
//     deadline that has already passed fails Read and Write (and ReadNow
//     and WriteNow) even when data is available or the peer would take the
//     bytes, as on a TCP socket.
//   - Close unblocks pending Read and Write calls on both ends; the peer's
//     Read then returns io.EOF once buffered data is consumed.
//   - A dial to an address where nobody listens fails with an error that
//     wraps syscall.ECONNREFUSED.
package transport

import (
	"context"
	"io"
	"time"
)

// Conn is a bidirectional byte stream with deadlines.
type Conn interface {
	io.Reader
	io.Writer
	io.Closer
	// SetDeadline sets both the read and write deadlines; the zero time
	// means no deadline.
	SetDeadline(t time.Time) error
	// SetReadDeadline sets the deadline for Read calls.
	SetReadDeadline(t time.Time) error
	// SetWriteDeadline sets the deadline for Write calls.
	SetWriteDeadline(t time.Time) error
}

// BuffersWriter is an optional ability of a Conn: write several buffers as
// one gathered write (writev), returning the bytes written. Star uses it, when
// present, to send a frame header and its payload in one system call.
type BuffersWriter interface {
	WriteBuffers(bufs [][]byte) (int64, error)
}

// LowWaterReader is an optional ability of a Conn: ask that a read which
// has to wait for data wait until at least n bytes are there (TCP's
// SO_RCVLOWAT), rather than wake for every segment. A read that finds fewer
// bytes already there still returns them without waiting. n = 1 restores
// the default. The caller must never ask for more bytes than are still to
// come (the read would wait for them until its deadline); star asks for at
// most the rest of the frame being read. It is a hint: a driver may wake
// earlier.
type LowWaterReader interface {
	SetReadLowWater(n int) error
}

// DirectWriter is an optional property of a Conn: its Write hands the
// caller's bytes to the kernel's socket copy as they are (a plain TCP
// socket; not TLS, which encrypts them into buffers of its own). Where those
// bytes sit in memory then matters to the speed of that copy on some
// processors, and star writes a medium-sized frame from a page-aligned
// buffer of its own when the Conn reports true.
type DirectWriter interface {
	WritesDirect() bool
}

// SpliceWriter is an optional ability of a Conn: write a few bytes (a
// frame's header) so that they take no room where the kernel copies the
// bytes written after them. Linux copies what a thread writes to a socket
// into page fragments of that thread's, one write after another, so a
// 5-byte header written before a payload puts every byte of the payload 5
// bytes further into those pages than it lies in the caller's memory, and
// on some processors (AMD EPYC, Zen 4) both the kernel's copy in and the
// reader's copy out run several times slower at such distances.
// WriteSpliced writes p (at most 4096 bytes) through a pipe with splice(2),
// as a fragment of its own, held back until the next write on the Conn
// (or its Close) sends it with the bytes that follow, so a frame still
// leaves as one segment: always follow it with a write. The write
// deadline applies and the errors are those of Write. An error wrapping
// errors.ErrUnsupported means that nothing was written (no pipe could be
// made, or the system will not splice into the socket): write p as usual
// instead. Star writes this way the header of every frame of more than
// 16 KiB that a link's goroutine writes, when the Conn has the ability
// (plain TCP on Linux); frames of up to 256 KiB that the coordinator
// sends without waiting are staged whole as before.
type SpliceWriter interface {
	WriteSpliced(p []byte) error
}

// HostLocal is an optional ability of a Conn: PeerOnHost reports whether
// the peer is a process of this host (a loopback address, or the
// connection's own local address). Star's coordinator stores and forwards
// the large allgathervs whose workers are all on its host instead of
// relaying them: on one host the relay's concurrency cannot make a link
// faster, and its hand-offs take the CPU the copies need.
type HostLocal interface {
	PeerOnHost() bool
}

// UnsentCounter is an optional ability of a Conn: Unsent returns how many
// bytes written to it the system has not sent yet (held in TCP's send
// queue by the peer's window or congestion control; SIOCOUTQNSD on Linux),
// so that a rank about to exit can wait until its last frame has left: a
// process that exits while bytes it received are unread resets its
// connections, and the system then drops whatever it had not sent yet. An
// error wrapping errors.ErrUnsupported means the system cannot tell. Star
// waits for it (bounded) after a failing collective's Aborts (see
// star.Comm's failure handling).
type UnsentCounter interface {
	Unsent() (int, error)
}

// UnreadCounter is an optional ability of a Conn: Unread returns how many
// bytes have arrived on it and not been read yet (TCP's receive queue,
// FIONREAD on Linux, with whatever the driver itself holds), so that an
// end that learns of its peer's end by other means can tell whether the
// peer said more on this conn first. An error wrapping
// errors.ErrUnsupported means the system cannot tell. Star asks it when a
// peer's control session ends without a farewell (see star.ExitedError):
// a peer whose data link still holds bytes unread may have finished
// collectives that this end has not reached yet, and its data link, read
// in turn, tells the rest. A Conn that is not an UnreadCounter, or whose
// Unread fails, counts as holding bytes.
type UnreadCounter interface {
	Unread() (int, error)
}

// AckReporter is an optional ability of a Conn: Acks reports how bytes
// move on the connection (see Acks). Over TCP on Linux it reads TCP_INFO.
// An error wrapping errors.ErrUnsupported means the system cannot tell.
//
// Star asks it when a deadline of a link's own passes, to tell a slow link
// from a stalled peer (see star's link.slowWrite and link.moving): a write
// that a slow link holds up while the peer's host keeps acknowledging and
// offering room goes on under a fresh deadline; so does a read while the
// peer's data still arrives, or while this end's earlier bytes still go
// out to the peer (which reads them before it answers), the peer getting a
// timeout from the latest. A peer that stops sending, or stops reading
// (its window closes once its receive buffer is full), or whose host is
// lost or cut off (it stops acknowledging) fails as before.
type AckReporter interface {
	Acks() (Acks, error)
}

// Acks is what an AckReporter reports.
type Acks struct {
	// SinceSent is how long ago this end last sent bytes of data
	// (retransmissions included; not the probes of a closed window or of
	// keep-alive).
	SinceSent time.Duration
	// SinceAcked is how long ago the peer's host last acknowledged
	// anything.
	SinceAcked time.Duration
	// SinceReceived is how long ago the peer's data last arrived (read or
	// not).
	SinceReceived time.Duration
	// Open reports whether the receive window the peer's host offered
	// at its last acknowledgment was open (more than zero bytes: its
	// receive buffer had room); false where the system does not say (Linux
	// before 6.2).
	Open bool
}

// PeerTimeoutSetter is an optional ability of a Conn: SetPeerTimeout(d)
// makes the system give up on the connection (its reads and writes then
// fail with a timeout, ETIMEDOUT over TCP) once the peer's host has
// acknowledged nothing for about d: bytes sent and not acknowledged for d,
// or, on an idle connection, keep-alive probes unanswered for d. A peer
// whose process is busy or stopped still has its host answer, so an idle
// connection trips it only when the host is lost or the network cut; but
// bytes waiting to go while the peer keeps its receive window closed (its
// process does not read) trip it too (over TCP on Linux, measured on 6.18:
// the window probes count). SetPeerTimeout(0) restores the connection's
// own setting. Star's coordinator sets it to the liveness timeout on the
// data link of a worker that has no control session, whose heartbeats
// would otherwise do that; a worker holds it off while rank 0 says that
// it is here or busy (see star's link.busyExtend).
type PeerTimeoutSetter interface {
	SetPeerTimeout(d time.Duration) error
}

// CloseWriter is an optional ability of a Conn: shut down the writing side
// (TCP's half-close) so the peer reads EOF after the data already sent,
// while this end can still read. After CloseWrite, Write fails; Read still
// works. Star uses it when ending a link so that a final Abort or Shutdown
// frame is not lost to a connection reset.
type CloseWriter interface {
	CloseWrite() error
}

// Listener accepts incoming connections.
type Listener interface {
	// Accept waits for the next connection. After Close it returns an error
	// wrapping net.ErrClosed (or the driver's equivalent) at once.
	Accept() (Conn, error)
	// Close stops listening and unblocks Accept.
	Close() error
	// Addr returns the address workers dial to reach this listener
	// (host:port for TCP, the name for pipe).
	Addr() string
}

// Dialer opens connections.
type Dialer interface {
	// Dial connects to addr, giving up when ctx is done.
	Dial(ctx context.Context, addr string) (Conn, error)
}

// DialerFunc adapts a function to the Dialer interface.
type DialerFunc func(ctx context.Context, addr string) (Conn, error)

// Dial calls f.
func (f DialerFunc) Dial(ctx context.Context, addr string) (Conn, error) { return f(ctx, addr) }

// Poller is an optional ability of a Conn (TCP; pipe unless
// pipe.Network.NoPoll): I/O that never waits. Star uses
// it, when present, to poll a few links from one goroutine for a short
// while before it parks a goroutine on each: a message that arrives within
// microseconds then costs no scheduler wake-up, which is most of a small
// collective's latency. Deadlines that have already passed, and Close,
// make ReadNow and WriteNow fail as Read and Write would.
type Poller interface {
	// ReadNow reads into p what has already arrived, without waiting. It
	// returns n > 0 bytes, or 0 and a nil error when nothing has arrived
	// yet, or 0 and io.EOF at the end of the stream, or another error.
	ReadNow(p []byte) (n int, err error)
	// WriteNow writes as much of p as the connection takes without
	// waiting (possibly 0 bytes) and returns how much that was.
	WriteNow(p []byte) (n int, err error)
	// Yield gives the processor to other threads and processes once; a
	// poller calls it between rounds of ReadNow that found nothing, so that
	// the peer it waits for can run on a busy machine. A driver whose peers
	// can run in the same process (pipe) also lets time pass, so that
	// inside a testing/synctest bubble a poller's spin time ends on the
	// fake clock.
	Yield()
}
