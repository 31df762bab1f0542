// Package pipe is an in-memory transport driver: a Network of named
// listeners whose connections are pairs of in-memory full-duplex byte
// streams (*Conn), made for tests of code that runs over package transport.
//
// # Listening and dialing
//
// Listen on a name already in use fails with an error wrapping
// syscall.EADDRINUSE. Dialing a name nobody listens on fails at once with an
// error wrapping syscall.ECONNREFUSED. A Dial waits until the listener
// accepts the connection (or ctx is done, or the listener closes, which
// refuses it with ECONNREFUSED), like a TCP connect to a full backlog
// would.
//
// # Buffering
//
// By default each direction is unbuffered, as net.Pipe: a Write blocks until
// the peer has read all of it, so protocol code that only works thanks to
// kernel socket buffers deadlocks here, which is the point. Network.Buffer
// gives each direction a buffer of that many bytes instead, like a socket
// buffer: a Write returns once its bytes fit in it.
//
// # Deadlines and Close
//
// Deadlines apply to pending and future I/O, as on a net.Conn: a call that
// hits one fails with os.ErrDeadlineExceeded; a deadline moved into the
// past unblocks a pending call; the zero time clears it, and the Conn is
// usable again. As on a socket (and unlike net.Pipe), a deadline that has
// passed fails Read and Write even when data is there or room is free. The
// deadlines use the time package's clock, so inside a testing/synctest
// bubble they follow the bubble's fake clock; every wait is on a channel or
// a timer, never a spin or a long-held mutex, so a goroutine blocked in a
// *Conn is durably blocked, as synctest.Wait needs.
//
// Close unblocks pending Read and Write calls on both ends. Afterwards the
// closed end's own I/O fails with io.ErrClosedPipe, as net.Pipe's does
// (package star reports that on a write as EPIPE); the peer reads the data
// already written (buffered) and then io.EOF, and its Writes fail with
// io.ErrClosedPipe. Close never fails, and closing both ends leaves no
// goroutine behind (a *Conn never starts one).
//
// # Abilities
//
// A *Conn is a net.Conn and implements transport.CloseWriter (CloseWrite is
// the half-close: the peer reads the data written so far and then io.EOF,
// this end still reads, and its further Writes fail with io.ErrClosedPipe)
// and transport.Poller:
//
//   - ReadNow copies what has already arrived (from the buffer or,
//     unbuffered, from a Write pending on the peer) without waiting. It
//     returns n > 0, or 0 and nil when nothing is there, or 0 and io.EOF at
//     the end of the stream, or the error Read would give. As with TCP's
//     ReadNow (a RawConn read, which checks the deadline first), a read
//     deadline that has already passed makes it fail with
//     os.ErrDeadlineExceeded even when data is there, and after Close it
//     fails with io.ErrClosedPipe.
//   - WriteNow writes as much of p as the peer takes now (into free buffer
//     space or, unbuffered, into a Read pending on the peer), possibly 0
//     bytes, never waiting; a passed write deadline and Close fail it as
//     they fail Write.
//   - Yield lets other goroutines run and, inside a testing/synctest
//     bubble, lets the fake clock move (see Conn.Yield).
//
// With Network.NoPoll the connections do not implement transport.Poller,
// and with Network.NoCloseWrite not transport.CloseWriter (as net.Pipe's),
// so that a caller can test its paths for transports without them; they
// are then not of type *Conn.
//
// One Read and one Write at a time per end is what a *Conn is made for (a
// ReadNow or WriteNow counts as one); any method may be called from any
// goroutine, concurrently with the others, without a data race. Concurrent
// Writes on one end are serialised, each whole; concurrent Reads share the
// bytes in no particular order.
package pipe
