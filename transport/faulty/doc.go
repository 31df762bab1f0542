// Package faulty is a fault-injecting transport driver: it wraps the conns of
// any other driver and injects scripted, deterministic faults, so that every
// failure path of the star protocol can be driven in a unit test.
//
// Faults are keyed by position in the byte stream, never by wall-clock time:
// a Fault names the end it acts on (Rank, and Link: the peer's rank; with
// Control, that end's control conn instead of its data conn), the
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
//     deadline), then goes on: a slow link, not a failure. With Acked (the
//     Write direction only) the peer's host acknowledges throughout, as
//     Conn.Acks reports (transport.AckReporter), and a deadline that
//     passes in the Delay leaves the rest of it to the next write.
//   - CorruptTag: the frame's tag byte is replaced by 0xEE.
//   - LenTooLarge, LenTooSmall: the frame's LEN is replaced by LEN+Extra
//     (default: 0xFFFFFFFF) or LEN-1 (a LEN of 1 becomes 0). The rest of
//     the stream is unchanged.
//   - RefuseDial: Dial fails with an error wrapping syscall.ECONNREFUSED.
//
// Corruptions apply to the frame's header, whatever the Offset. Faults fire
// once (a fault for any link, Link -1, on the first link whose stream
// reaches its trigger). Script.Check reports the faults that can never
// fire (a Link that Rank has no end to, a RefuseDial for the coordinator,
// and so on), so that a test does not pass for want of its fault.
//
// A Script holds the faults of a whole run; WrapDialer and WrapListener
// attach it to one rank's ends; Fire triggers a fault "now" (between
// collectives) instead of at a stream position: the faults above, and
// Delay, which makes the I/O of its Dir wait until Delay from then.
//
// # Control connections
//
// Besides its data conn, a worker opens a control conn to the coordinator
// through the same Dialer (and Listener). Its first frame, which the worker
// writes, has tag 0x0C (Control) and the payload rank, size (u32 BE each);
// the coordinator answers with one frame of tag 0x0C and the same payload
// (the control Ack). After those two frames the conn carries a control
// session (smux) in its own framing, not the spec's.
//
// A conn is a control conn when its first frame has tag 0x0C: the frame it
// writes on a dialer's end, the frame it reads on a listener's end (which
// then takes its link from that frame's rank, as from a Handshake's);
// Conn.Control reports it. Until that tag is seen a conn counts as a data
// conn, for stream positions and Fire alike. Before bytes of its frame
// 0 pass, an accepted end reads ahead up to the tag (and up to the rank
// when a fault for one link is placed there) whenever a fault not fired yet
// is placed in that frame, so that it fires on the right conn at the right
// byte; the peer then sees those bytes taken. A dialer's end takes the tag
// from the bytes handed to Write; a Write that ends before the tag of the
// first frame (its header split across Writes) fails when a control conn's
// fault is placed in that frame, as a corrupted header split so does (star
// writes each header whole).
//
// A Fault acts on data conns, or, with Control, on control conns only (of
// its Rank and Link, as for data conns); existing scripts thus keep their
// meaning when control conns come and go beside the data conns. WholeRank
// faults act on every conn of their rank, data and control alike (a frozen
// or crashed process loses both, and conns it opens or accepts later are
// born dead too); Control picks the conn whose stream triggers them.
//
// Past its first frame each way (the Control frame and its Ack), a control
// conn's bytes are not frames: faulty stops tracking the stream there, so
// stream positions (Frame, Offset) name bytes of frame 0 only (a fault at
// the very end of frame 0 fires at the next I/O; one placed in a later
// frame never fires), and no corruption ever touches the session's bytes.
// Otherwise a control conn passes its bytes through unchanged and has
// every ability of the conn it wraps. On a control conn:
//
//   - Crash cuts the control conn only: it closes, and the peer's session
//     reads EOF; the data conn is untouched.
//   - Reset and SysTimeout: as on a data conn (ECONNRESET, ETIMEDOUT), the
//     conn closes.
//   - Hang drops the heartbeats: from then on nothing passes either way on
//     the control conn (the session's reads and writes block until their
//     deadline or Close, which unblocks them), while the data conn goes on.
//   - Deadline fails the next I/O; Delay holds the bytes for Delay, then
//     passes them: as on a data conn.
//   - CorruptTag, LenTooLarge and LenTooSmall only mean something on frame
//     0 (the Control frame, or its Ack): placed there, they corrupt its
//     header; fired by Fire, they corrupt it if it has not passed yet (the
//     coordinator's control Ack, once it has read the Control frame);
//     placed in a later frame, or fired once frame 0 has passed, they never
//     act.
//
// RefuseDial refuses the rank's next Dial, whichever conn it was for: a
// Dialer cannot tell which conn a Dial opens.
//
// # Optional abilities
//
// A wrapped conn has the optional abilities of the conn it wraps, no more:
// WrapDialer and WrapListener return a *Conn, or a *PollConn (the wrapped
// conn is a transport.Poller), a *CloseWriteConn (a transport.CloseWriter)
// or a *PollCloseWriteConn (both), each embedding the *Conn; ConnOf finds
// the *Conn of any of them (for Link and Control).
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
// With no fault in the way, the wrapped conn sees the writes the caller
// made, cut only at frame ends: a frame handed over whole goes out in one
// write, header and payload together, so that an unbuffered peer's pending
// Read takes the frame rather than its header alone. A corrupted header
// goes out on its own, and a fault inside a frame cuts the write there.
//
// One Read (or ReadNow) and one Write (or WriteNow) at a time per conn, as
// star does; the other methods may be called concurrently with them.
package faulty
