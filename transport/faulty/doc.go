// Package faulty is a fault-injecting transport driver: it wraps the conns of
// any other driver and injects scripted, deterministic faults, so that every
// failure path of the star protocol can be driven in a unit test.
//
// Faults are keyed by position in the byte stream, never by wall-clock time:
// a Fault names the end it acts on (Rank, and Link: the peer's rank), the
// direction (Write: bytes this end sends; Read: bytes it receives), the
// frame index in that direction (0 is the first frame: a worker's
// Handshake, or the coordinator's Ack) and the byte offset inside that frame
// (0 is before its first byte; 5 is the first payload byte). Frames are
// tracked by parsing the spec's 4-byte big-endian LEN as bytes pass.
//
// The faults:
//
//   - Crash: the end closes at the trigger point (its peer reads EOF, or
//     io.ErrUnexpectedEOF when the trigger is inside a frame: a frame cut
//     short). The crashed end's own I/O fails with net.ErrClosed.
//   - Hang: from the trigger on, the end stops reading and writing: every
//     Read and Write blocks until its deadline (then os.ErrDeadlineExceeded)
//     or Close. Deadlines set while blocked take effect. A hung end never
//     closes its underlying conn, so its peer sees silence, not EOF.
//   - SysTimeout: as Reset, with syscall.ETIMEDOUT: the system gave up on
//     the connection (TCP_USER_TIMEOUT, keep-alive), a cut-off peer.
//   - Reset: the end's I/O fails with an error wrapping syscall.ECONNRESET,
//     and the underlying conn closes.
//   - Deadline: the I/O at the trigger fails at once with
//     os.ErrDeadlineExceeded, as if the timeout had expired.
//   - Delay: the I/O at the trigger waits Delay first (or until its
//     deadline), then goes on: a slow link, not a failure.
//   - CorruptTag: the frame's tag byte is replaced by 0xEE.
//   - LenTooLarge, LenTooSmall: the frame's LEN is replaced by LEN+Extra
//     (default: 0xFFFFFFFF) or LEN-1 (a LEN of 1 becomes 0). The rest of
//     the stream is unchanged.
//   - RefuseDial: Dial fails with an error wrapping syscall.ECONNREFUSED.
//
// Corruptions apply to the frame's header, whatever the Offset. Faults fire
// once. A Script holds the faults of a whole run; WrapDialer and
// WrapListener attach it to one rank's ends; Fire triggers a fault "now"
// (between collectives) instead of at a stream position.
//
// # Optional abilities
//
// A wrapped conn has the optional abilities of the conn it wraps, no more:
// WrapDialer and WrapListener return a *Conn, or a *PollConn (the wrapped
// conn is a transport.Poller), a *CloseWriteConn (a transport.CloseWriter)
// or a *PollCloseWriteConn (both), each embedding the *Conn; ConnOf finds
// the *Conn of any of them (for Link).
//
// ReadNow and WriteNow go through the same fault machinery as Read and
// Write, so that a script gives the same observable result however the
// bytes move: the stream positions advance alike, triggers fire at the same
// frame and offset, and Crash, Reset, SysTimeout, Deadline and the whole-rank faults give
// the same errors. Where Read or Write would wait, the polled call returns
// what it has done and no error instead: on a hung end, 0 and nil until the
// deadline has passed (then os.ErrDeadlineExceeded) or the end is closed
// (then net.ErrClosed); after a Delay fired, 0 and nil until the Delay has
// elapsed (a blocking call made meanwhile waits for the rest of it only).
// Header corruptions apply to polled bytes too: a corrupted header goes out
// as the lie however WriteNow and Write split it (the caller hands over the
// whole header with the call that reaches the frame's first byte, as for
// Write); when a corruption may apply, the bytes of a header coming in are
// held back until it is whole, so ReadNow returns 0 and nil meanwhile
// (having taken them), and a Read that follows completes the same header.
// As with TCP's ReadNow, a read deadline that has passed fails ReadNow even
// when faulty holds bytes back. Yield is the wrapped conn's.
//
// CloseWrite is forwarded to the wrapped conn, except that on an end a
// Crash, Reset or SysTimeout broke it fails with that fault's error, after Close it
// fails with net.ErrClosed, and on a hung end it does nothing and returns
// nil: a hung process sends nothing, not even the end of its stream, so its
// peer keeps seeing silence.
//
// One Read (or ReadNow) and one Write (or WriteNow) at a time per conn, as
// star does; the other methods may be called concurrently with them.
package faulty
