// Package star implements the star-topology collective protocol of the
// COBRE TCP backend (the base protocol, "the spec" below, that
// docs/protocol.md describes) over any transport.Conn: rank 0 is the
// coordinator and holds one link to each worker; ranks 1..R-1 each hold one
// link to rank 0. Every collective goes through the coordinator. The package
// knows nothing about sockets: the same code runs over TCP
// (transport/tcp), in-memory pipes (transport/pipe) and the fault injector
// (transport/faulty).
//
// docs/protocol.md, at the root of the repository, describes the wire for
// implementers, with example bytes that TestDocsGolden checks against this
// package.
//
// # Wire format
//
// Every message is a frame: LEN (u32 big-endian, the byte count of TAG +
// PAYLOAD), TAG (u8), PAYLOAD. Payload data is the raw element bytes in the
// sender's native byte order. A receiver always knows how many payload bytes
// it expects; a frame with another tag or length is refused before its
// payload is read (nothing is allocated from LEN).
//
// # Who sends what to whom
//
// Start-up: each worker dials the coordinator and sends Handshake (0x08,
// rank u32 BE, size u32 BE). With Config.Token set, the coordinator first
// authenticates the connection (see Authentication below): nothing that
// follows happens for a connection that has not answered its challenge.
// The coordinator checks that 1 <= rank < size,
// that the rank is not registered yet and that size matches its own; it
// refuses anything else with Abort (0x0B) and the reason, and keeps waiting
// for the real ranks. It handshakes connections concurrently, drops one
// that stays silent for HandshakeTimeout, and frees the rank of a
// registered worker whose connection closes before start-up is complete.
// Once every worker has registered, it stops registering (it closes its
// listener, or keeps it for the control sessions, see below) and answers
// every worker's Handshake with Ack (0x09, size u32 BE) at once, so that
// every rank leaves start-up together (as MPI_Init does) and start-up is
// bounded by ConnectTimeout alone; the worker checks the echoed size. A
// spec-only worker sees an ordinary Ack, only later. If a rank never comes,
// the coordinator fails after ConnectTimeout naming it, and sends the
// workers that registered an Abort naming it instead of the Ack; they wait
// for that answer up to ConnectTimeout (plus a margin) after registering.
// A Handshake that reaches a coordinator whose start-up is over is refused
// with cause "running": the worker belongs to another job on the same port
// (the next one, started while this one ends), and tries again, with
// backoff, within its ConnectTimeout. A connection still in its handshake
// when start-up completes or the coordinator closes gets the same refusal.
//
// Allgatherv: worker r sends AllgathervSend (0x01) with its counts[r]
// elements. The coordinator reads every worker concurrently, straight into
// recv at displs[r], copies its own data to displs[0], then sends each worker
// AllgathervRecv (0x02) whose payload is every rank's region in rank order,
// sum(counts) elements (exactly recv[0:sum(counts)] when displs are the
// packed prefix sums; with gaps, gap elements are not sent and stay
// untouched). The worker reads the regions straight into recv at displs.
//
// An AllgathervRecv of 1 MiB or more is relayed when every worker has a
// control session and some worker is not on rank 0's host (a
// transport.HostLocal link says whether it is; workers on one host store
// and forward every size, since there the copies, not a link, bound it,
// and the relay's hand-offs only take CPU): once every AllgathervSend
// header has arrived and been checked, the coordinator starts each
// worker's AllgathervRecv (rank 0's region first) while the workers'
// regions still arrive, forwarding each region as it comes in, so that
// its outgoing link never waits for the incoming ones (where the network is the limit, stored and forwarded it
// would reach R/(R+1) of the link's speed). The bytes on the wire are the
// same. A worker that fails in the middle of its region leaves the others'
// AllgathervRecv cut short, so the Abort naming it goes on the control
// sessions (see "The control session"). When every region is small
// enough to poll (256 KiB), the coordinator first polls the workers'
// frames, as for a smaller allgatherv, for at most 1 ms: if every region
// is in by then (ranks on one host), it stores and forwards the result,
// and otherwise it relays the rest, each frame from where polling left it.
//
// Allreduce: worker r sends AllreduceSend (0x03): one ReduceOp byte (Sum 0,
// Min 1, Max 2, BitwiseOr 3) then its elements. The coordinator checks every
// op byte against its own, reduces acc = send₀, then acc = op(acc, send_r)
// for r = 1, 2, ..., R-1 in that order, and sends AllreduceRecv (0x04) with
// acc to every worker. An allreduce whose ·n exceeds 64 MiB (n bytes
// per rank) is reduced in that order chunk by chunk as the payloads stream
// in, from two chunk buffers per worker link, instead of from every
// worker's whole payload: the same result, bit for bit, and the same
// frames (see reduce.go).
//
// Broadcast: with root 0 the coordinator sends Broadcast (0x05) with buf to
// every worker. With root r > 0, worker r sends Broadcast to the
// coordinator, which reads it into its buf and forwards it to every worker
// but r.
//
// Barrier: every worker sends BarrierReady (0x06, empty); once the
// coordinator has all of them it sends BarrierGo (0x07, empty) to each.
//
// Shutdown: Close on a healthy, idle coordinator sends
// Shutdown (0x0A, empty) to every worker, half-closes, and waits up to
// ShutdownTimeout for each worker to close its end. Close on a healthy,
// idle worker half-closes and waits for the Shutdown, at most Timeout plus
// min(Timeout/2, 500 ms) (the margin every read of a worker gets over the
// coordinator's) plus up to a twentieth of that sum, at most 250 ms (a
// read deadline is set at most that often), then closes: it returns nil on Shutdown and an error naming rank 0 when
// rank 0 closed without it (it crashed or exited after the last
// collective), sent something else, or sent nothing in time. A worker that
// reads Shutdown while in a collective fails (ErrShutdown); a coordinator
// whose Close finds a worker still sending (it was in a collective that
// rank 0 never called) or that cannot be sent its Shutdown returns an error
// naming it.
//
// Abort (0x0B, this package's extension): when a rank fails a collective
// it sends Abort on every link it still has whose stream is at a frame
// boundary, reading and discarding what the peer is still sending so that
// a peer blocked in a write can move on, and the failing collective
// returns only once every Abort (on rank 0, the control sessions' too)
// has been taken by the system (or, on an unbuffered transport, by the
// peer) and, over TCP on Linux, sent, with everything written before it
// (transport.UnsentCounter), or after min(ShutdownTimeout/2, 200 ms): a
// process that exits the instant it sees the error still tells every peer
// the truth. (A process that exits with bytes it received unread resets
// its connections, and the system drops what it had not sent yet: a
// worker's Abort behind the tail of its own large frame, which rank 0 was
// still reading, was lost that way.) A rank whose write fails because the
// peer is gone reads the peer's last words first: an Abort waiting in its
// receive buffer is the error it reports (in a relayed allgatherv, once
// the link's reader has read the rest of the worker's region). The payload
// is a reason for people, starting "rank N failed during OP", then one
// line of fields for programs:
//
//	rank 3 failed during allgatherv (seen by rank 0): ...
//	starcomm-abort/1 rank=3 op=allgatherv cause=timeout
//
// rank is the rank at fault (-1: none), op the operation, cause the class
// of the failure (timeout, eof, unexpected-eof, reset, pipe, tag, op,
// shutdown, canceled, deadline, closed, refused, running, unresponsive,
// exited, desync, auth). When a frame's length
// disagrees with a rank's arguments, the rank that sent the frame is
// named (one mismatch cannot tell whose arguments are wrong). Every
// surviving worker
// then fails at once with a *comm.CollectiveFailedError whose Rank is the
// rank at fault and whose cause errors.Is finds (os.ErrDeadlineExceeded,
// io.EOF, syscall.ECONNRESET, ...), not after the timeout. A reason without
// the fields line, as a peer that only knows the reason sends it, is
// understood too (its rank from a leading "rank N"). A peer that only
// knows the spec sees an unexpected tag and fails too. A rank whose write
// fails because its peer is gone first reads what the peer sent last: an
// Abort waiting there is the error it reports.
//
// # Authentication
//
// With Config.Token set on every rank (this package's extension; the
// protocol, with golden bytes, is in docs/authentication.md), the
// coordinator answers the first frame of every connection, a worker's
// Handshake or Control frame, with AuthChallenge (0x0D, payload a fresh
// nonce of 32 bytes from crypto/rand), and the worker answers with
// AuthResponse (0x0E, payload HMAC-SHA256 keyed with the token over a
// label, the nonce, then rank and size as u32 BE: the label is
// "starcomm-auth/1 handshake" on a data connection and
// "starcomm-auth/1 control" on a control connection, each followed by a
// zero byte; see AuthMAC). The coordinator compares the answer with its
// own in constant time, and only then registers the rank (or approves the
// control session), so the token never crosses the wire and an answer
// recorded on one connection answers no other. A wrong answer, another
// frame or an answer of another length is refused with an Abort (cause
// auth); no answer within HandshakeTimeout of the accept, however slowly
// bytes trickle in, with cause refused. A refused connection takes no
// rank; start-up still completes the moment the last real rank registers.
// A Handshake that comes after start-up is refused as running without a
// challenge, so a worker of the next job on the same port tries again
// whatever its token.
//
// A worker whose token differs is refused; one without a token reads a
// challenge where it expects its Ack, and one with a token is
// acknowledged without a challenge by a coordinator that has none: each
// fails start-up at once with ErrAuthentication, telling the coordinator
// why with an Abort (cause auth), which the coordinator's refusal, or its
// first collective, reports. So when a token is set every rank must run
// this package: a spec-only peer cannot answer and fails. Without a token
// the wire is exactly the spec's, as above. Authentication does not
// encrypt or protect the frames that follow, nor authenticate the
// coordinator to the workers; a transport that does (TLS) goes below this
// package, as every transport does.
//
// # One I/O path
//
// Every read and write of a link, polled or not, runs under a deadline
// that is right at that moment: each I/O call first arms the link (see
// link.arm), which sets the socket's deadline when less than a whole
// Timeout of it remains, whatever ran on the socket before (a handshake,
// a large frame, an idle hour). At any moment one goroutine owns a link's
// I/O: the collective's goroutine, or, on the coordinator, the link's own
// goroutine while it serves a request that carries the collective's
// buffers; ownership passes with the request and its result. Close, a
// cancelled context and a failure on another link of the same collective
// all stop a collective the same way, by cancelling its links: the
// current and later I/O of each fails at once with that cause, and the
// collective ends through its ordinary failure path.
//
// # Polling
//
// Over a transport that is a transport.Poller (TCP, and pipes), a rank
// polls for a small frame (a payload of at most 256 KiB) for up to
// Config.Spin before it parks a goroutine in the runtime's network poller:
// the coordinator reads every worker link in turn from the goroutine of
// the collective, a worker its link to the coordinator, and the
// coordinator writes small frames to every worker from that goroutine as
// far as the socket takes them without waiting. Between rounds that found
// nothing it yields the processor (sched_yield), so that on a host with
// more ranks than cores the peer it waits for gets to run. Whatever has not
// arrived or gone out when polling ends (the spin without progress, or
// Timeout in all) is finished by the link's own goroutine under the
// timeout, exactly as without polling: a frame may be split between the
// two at any byte. The spin adapts to the waits (Config.SpinMax): a rank
// whose last polled wait, from the start of its wait for its small frames
// to their end, took w of at most SpinMax spins for max(Spin, min(2w,
// SpinMax)) in the next one, and for Spin after a longer wait or a
// collective that moved a frame of more than 256 KiB. Where a
// collective's round outlasts Spin (more ranks than cores; a virtual
// machine whose wake-ups are slow) every rank then polls through the
// round instead of parking and paying a wake-up; a peer that computes
// for longer than SpinMax costs a waiting rank Spin of polling per
// collective, and one that is late by less costs it at most SpinMax.
// Large frames are not polled for: they take long enough on the wire
// that parking loses nothing, and polling would take a core from the
// copies. A frame of at most 16 KiB, header included, is polled for with
// one read of the whole frame expected (never more), copied from there to
// its parts, and a worker sends one with one write of the staged frame: a
// copy that small costs less than the system calls it saves. When its
// header turns out not to be the one expected, the read has taken at most
// the size of the frame expected; an Abort's reason is read on from there.
//
// A large frame's waiting reads, over a transport that is a
// transport.LowWaterReader (TCP), ask to be woken only once the rest of the
// frame, or 256 KiB of it, is in the socket (SO_RCVLOWAT), and lower that mark
// as the frame comes in, so that the reader never waits for bytes that
// will not come; after the frame the mark is back at 1. A reader woken for
// every segment contends with its sender for the socket and, on a host with
// fewer cores than ranks, for the CPU.
//
// A frame of more than 16 KiB (header included) that a rank writes with a
// blocking write (a worker's frame; the coordinator's reply from its
// links' goroutines, that is one over 256 KiB or sent without polling)
// over a transport that is both a transport.DirectWriter and a
// transport.SpliceWriter (plain TCP on Linux) goes out as its header,
// spliced through a pipe so that it takes no room in the kernel's page
// fragments (see below), and then its payload
// straight from the caller's memory with one gathered write per 4 MiB: no
// copy in user space, and the payload lies in the kernel's pages at the
// distance it has in memory from where the kernel began, which for
// page-aligned buffers and payloads of whole 32-byte multiples is a
// multiple of 32 on both sides of the socket. A link whose connection
// cannot splice (no pipe could be made), or a DirectWriter without
// splice(2), writes such frames as follows, and so does the coordinator
// with what a reply it sent without waiting (up to 256 KiB, staged whole)
// left over.
//
// A frame of more than 16 KiB and at most 1 MiB (header included) that goes
// over a transport.DirectWriter (plain TCP) is first copied into a page-aligned
// buffer of the link's, header first, and written from there with one
// system call. The kernel copies a socket write's bytes with "rep movsb",
// which on AMD EPYC (Zen 4) runs about 15 times slower when the destination
// lies 1 to 15 bytes past the source modulo 4096; the 5-byte header puts a
// payload written from the caller's page-aligned buffer at distance 5 from
// where the kernel starts a frame at a page boundary, and every byte of it
// then takes the slow copy. From the staged copy the distance is the
// stream's own. The buffer (1 MiB and a page) is allocated on the first
// such frame and kept with the link (32 KiB and a page on a link that only
// ever writes leads, below). A larger frame starts with a lead of
// 32 KiB less 1 to 31 bytes, its header and first bytes copied into that
// buffer and written alone, and the rest follows from the caller's
// memory: Linux keeps a thread's socket writes in 32 KiB page fragments
// and starts a fresh one when fewer than 32 bytes are left, so when the
// frame began a fragment the rest begins the next one, at a distance set
// by its own address (a multiple of 32, the fastest, when the lead can
// make it one, and never 1 to 15). The coordinator's reply of 16 KiB to 1
// MiB, the same bytes for every worker, is copied once into a page-aligned
// buffer of its own and every link's goroutine writes it from there.
//
// # Timeouts and failure
//
// Config.Timeout bounds every read and write (each call moves at most 4
// MiB): a peer that lets nothing move for Timeout is declared failed,
// within Timeout + min(Timeout/20, 250 ms). A rank that computes between
// collectives for less than the timeout is not failed, whatever it does.
// "Move" is counted on the link, where the transport can tell
// (transport.AckReporter: TCP_INFO over TCP on Linux 6.2 and later), not
// per call: a write whose deadline passes while the peer's host keeps
// acknowledging with its window open goes on (over a slow link a write
// blocked on a full socket wakes only once a third of its send buffer is
// free, megabytes that take seconds), and so does one while the peer's
// own data still arrives (it sends its frame before it reads: a worker
// whose region of a relayed allgatherv still comes while rank 0 relays
// the others' to it); a read whose deadline passes while the peer's data
// still arrives, or while this rank's earlier data still goes out to the
// peer (which reads it before it answers), reads on until a timeout after
// the link last moved (see link.slowWrite and link.moving). A peer that
// stops reading (its window closes once its receive buffer is full) or
// stops sending is failed a timeout after its link last moved; one whose
// host is lost (it stops acknowledging) a timeout after its last
// acknowledgment. Rank 0, while it lets such calls go on, tells every
// worker that it is still in the collective (kind 6, see busyMonitor).
// A closed link surfaces as io.EOF (between frames) or io.ErrUnexpectedEOF
// (mid-frame), a hang as a deadline error (os.ErrDeadlineExceeded), a
// reset as syscall.ECONNRESET, a connection the system gave up on
// (ETIMEDOUT) as a deadline error that keeps the system error too; each is
// kept as the Err of the *comm.CollectiveFailedError. A frame length that
// differs from this rank's arguments is a *comm.InvalidBufferSizeError
// (Unit "bytes"); a start-up failure is a *comm.InitializationFailedError.
// Cancelling the context of a collective fails it like any other failure.
// A context is registered for that (context.AfterFunc) once, and kept while
// the collectives pass the same context, so a program that passes one
// cancellable context to every collective allocates nothing per
// collective for it; Close removes the registration.
// After any failure the communicator is fail-stop: every later collective
// returns an error at once. Config.OnFailure hears of the first failure
// before the failing call returns.
//
// # What the wire cannot see
//
// Collectives are matched by order alone, and the wire carries no counts,
// element type or root: all ranks must call the same collectives in the
// same order with agreeing arguments. A mismatch the frames show fails
// instead of hanging: a frame with another tag (another collective, or a
// broadcast root that a worker and the coordinator disagree on), a
// worker's frame whose length differs from what the coordinator's
// arguments say (counts[r] in allgatherv, the element count in allreduce),
// an AllgathervRecv or AllreduceRecv whose length differs from what the
// worker expects (the sum of its counts, its element count), or an
// Allreduce op that differs from the coordinator's. But a mismatch that
// keeps every frame's tag and length passes silently, with wrong results:
// counts permuted across ranks with the same total (each rank places the
// same bytes at other offsets), element types of the same size
// (float64 on one rank, int64 on another), or a worker that believes
// itself the broadcast root when the coordinator does not (it sends its
// data and returns its own buffer, and the stray frame fails a later
// collective). Only a check that compares the ranks' arguments can catch
// those: Config.CheckCollectives (below).
//
// # The control session
//
// Unless Config.Liveness is negative, a starcomm worker opens a second
// connection to the coordinator's port after start-up, beside its data
// link, which stays exactly the spec's. It opens it once the coordinator
// holds every worker's data link, so that a coordinator that only knows
// the spec, which accepts exactly R-1 connections and acknowledges each
// Handshake at once while other workers may not have joined yet, cannot
// take it for a worker's (a Control frame in a Handshake's place fails
// such a coordinator's start-up): at the coordinator's first frame to
// it (the reply of its first collective; a spec coordinator runs none
// before every worker has joined, and a starcomm one acknowledges no
// Handshake before), or 2 s after start-up (at most a third of
// ConnectTimeout), whichever comes first. A job of two ranks, a job with a
// token (every rank must be starcomm) and a job with the desync check on
// (Config.CheckCollectives: it needs the sessions from the first
// collective) open it at once. So in a job of three ranks or more a
// first collective that starts within 2 s of start-up runs without the
// sessions, as with spec-only workers (and so may the next, when it
// starts before the session is up): a worker that fails in it or closes
// during it is found from its data link or by the collective timeout
// rather than at once, and a large one does without what the sessions
// add (relayed allgathervs, overlapped allreduce replies, a slow link's
// reports). Against a
// spec coordinator whose workers join more than 2 s apart (workers that
// start long before it, or one by one), turn the session off on the
// workers (Liveness negative; COBRE_TCP_LIVENESS_SECS=0). Its first frame is
// Control (0x0C, rank u32 BE, size u32 BE); with a token, the coordinator
// authenticates the connection as a Handshake's (see Authentication),
// then checks it as it checks a Handshake (a registered rank, the right
// size, one session per rank), answers with the same frame and both ends run an smux
// session (github.com/xtaci/smux) over the rest of the connection. The
// coordinator keeps its listener for these connections until every
// worker has its session, ConnectTimeout has passed since start-up, or it
// closes or fails, whichever comes first. A spec-only worker never opens
// one and is served exactly as the spec says; a worker whose coordinator
// does not answer the Control frame (a spec-only one) goes on without.
// Liveness for a rank starts once its session is up, milliseconds after
// its first collective's reply or 2 s after start-up (on a loaded host it
// can take longer); a rank frozen before then is caught by the collective
// timeout instead. Until then, and for
// a worker that never opens one, the coordinator has the worker's data
// link held to Liveness by its system where the transport can
// (transport.PeerTimeoutSetter: over TCP, TCP_USER_TIMEOUT and keep-alive
// probes), so a worker whose host is lost or cut off (which answers
// nothing, unlike a frozen or busy process's) fails the link with
// ETIMEDOUT within Liveness.
//
// The session carries two streams, both opened by the worker:
//
//   - heartbeats: each end writes one byte every Liveness/10 and declares
//     its peer unresponsive once nothing has come for Liveness, whether
//     the session stays open and silent (a frozen process, a dead host, a
//     cut link) or ends. The process sends them, not the collective, so a
//     rank that computes for hours keeps beating, and the collective
//     timeout (Config.Timeout) can be set that long. Every collective of
//     the rank that notices, current or next, fails with a
//     *comm.CollectiveFailedError naming the silent rank, wrapping an
//     *UnresponsiveError (errors.Is os.ErrDeadlineExceeded); the
//     coordinator tells every other worker at once. A coordinator that
//     hears from none of its workers (two or more) names itself, as they
//     do, once one more heartbeat interval has brought nothing (a
//     coordinator kept off the CPU finds its timers due before it has
//     read the heartbeats waiting in its sockets), and a worker's Abort
//     that says rank 0 is unresponsive makes the coordinator, which is
//     plainly alive, name that worker: the silence is on its side; unless
//     the coordinator did not run for eight tenths of Liveness meanwhile
//     (a goroutine of its own that only ticks, every tenth of Liveness,
//     missed that much: its process was stopped, paused or starved), when
//     it names itself. An end that sees its
//     liveness deadline pass late (10 ms, or a tenth of a shorter
//     Liveness), or while it did not run, was away itself: it gives
//     its peer a whole Liveness from then (heartbeats that came meanwhile
//     wait unread) before it judges it; a read of a data link that saw its
//     deadline pass that late, with the peer's bytes waiting unread in
//     its socket, reads them under a fresh deadline; one whose deadline
//     passed in the middle of an absence longer than half Timeout and
//     than three ticks of that goroutine, with nothing waiting, gives its
//     peer a fresh Timeout from its return, once per collective (every
//     rank's VM paused together: the peer has not run either). smux's own
//     keep-alive is off: it checks once per
//     interval, so it notices silence only after one to two intervals, and
//     its error is not os.ErrDeadlineExceeded. An end that ends its
//     session on purpose (Close, or a worker's failed collective, whose
//     process may exit the moment it returns) first writes a farewell
//     (the byte 1; heartbeats are 0) and waits until the system has sent
//     it: at most 100 ms on Close, at most min(200 ms, ShutdownTimeout/2)
//     in a failing collective (not at all when its failure is a peer's
//     timeout; a worker failing on its own first sends kind 4, below); an Abort from the coordinator counts as its farewell. A
//     session that ends without one (EOF, or a reset)
//     means that the peer's process ended (a reset can also come from the
//     network): after exitGrace (100 ms, so that what the process said
//     before it went arrives first: an Abort on a data link being read,
//     the coordinator's Abort on the message stream) every collective of
//     the rank that notices, current or next, fails naming it, wrapping
//     an *ExitedError (errors.Is io.EOF), and the coordinator tells every
//     other worker (Abort cause "exited"). That is how a rank that dies
//     after it has contributed to the running collective, or between
//     collectives, is found at once rather than after Liveness. A worker
//     that already has its result of the coordinator's latest collective
//     (running or over) is declared for the collectives after that one
//     only, so that a worker that exits without Close right after its
//     last collective does not fail the others'. Nor is a peer declared
//     while its data link may hold bytes, unread by this end, that
//     complete collectives this end has not reached (the root of a
//     broadcast returns at once; the coordinator's results, or an Abort
//     that names the rank really at fault, may wait in a worker's link):
//     they are read first, and the data link tells what follows them
//     (see Comm.awaitsUnread and transport.UnreadCounter; a conn that
//     cannot tell counts as holding some). After the coordinator's
//     farewell, a worker whose data link holds bytes (its Shutdown) reads
//     them rather than declaring silence. A worker's Abort blaming the coordinator with cause
//     "exited" makes the coordinator name that worker, as for
//     "unresponsive". After a farewell the session's end counts as
//     silence.
//   - messages: LEN u32 BE (bytes of KIND and BODY), KIND u8, BODY. The
//     coordinator sends every Abort here too (kind 3: the number of the
//     last collective it spares, u64 BE, then an Abort frame's payload),
//     before the data links' Aborts: a worker in the middle of a long
//     frame, or blocked writing one that rank 0 no longer reads, learns
//     at once that another rank failed and which, while a worker still
//     reading the result of a collective the coordinator completed gets
//     that result whole. (Kind 1, the payload alone, from coordinators
//     before kind 3, fails the running or next collective.) A worker
//     that fails a collective for a cause of its own (its context ended,
//     or Close from another goroutine), or because the coordinator let
//     its timeout pass (the Abort then names rank 0), says so here (kind 4: the
//     collective's number, u64 BE, then its Abort's payload) before its
//     farewell, since the coordinator reads its data link, and so its
//     Abort, only for its next frame: a worker that had sent its part
//     would otherwise leave the others' collective to wait for the
//     slowest rank and succeed, or, if its process exits at once, be
//     found only at Liveness. The coordinator fails that collective on
//     every rank at once, naming the worker (see Comm.peerFailed). A
//     worker whose process exits the moment its collective returns may
//     end its data link before that link's Abort is out, and a
//     coordinator reading that link (a stopped one that resumes reads
//     both connections at once) can see the link's end first: it then
//     waits up to 100 ms (lastWordsWait) for the session's kind 4, or its
//     end, and reports the worker's reason rather than a closed
//     connection (see Comm.sessionWords; a worker does the same for the
//     coordinator's Abort). The coordinator tells the workers that have
//     its whole result of the running collective, and every worker while
//     one of its links moves or it lets calls go on past their deadline
//     because a link still moves, every busyEvery once that collective has
//     lasted as long (and, in such a run, as a collective ends and the
//     next begins: busyEdge), that it is still in it (kind 6: the collective's number, u64 BE): a worker
//     in that collective, or already waiting in a later one, then waits a
//     timeout from that word, not from its own arrival, while rank 0
//     serves a slower rank's link or waits for a rank that still takes
//     the collective before (see busyMonitor, link.busyExtend). With
//     Config.CheckCollectives each worker sends the fingerprint of each
//     collective here before its data (kind 2: sequence number,
//     operation, element type, counts or length, root, reduce op); the
//     coordinator compares every rank's with its own and, on a mismatch,
//     fails every rank with a *DesyncError (errors.Is ErrDesync) naming
//     the rank that differs and how (a worker that closes sends a Close
//     as the next collective's fingerprint, so that a coordinator
//     waiting for it fails at once). A worker's first collectives can
//     come before its session is attached: the coordinator then waits for
//     it while it is being set up, or, for 2 s after start-up, not yet
//     asked for (at most the collective timeout), so those are checked
//     too; a worker that opens none (a spec-only one) is not checked, and
//     its first collective waits those 2 s. It catches what the frames cannot
//     show: counts permuted with the same total, element types of the same
//     size, disagreement on a broadcast root.
//
// With Config.Logger set, the coordinator reports every collective that
// has waited longer than Config.StallReport, and again at that interval
// (it looks every StallReport/4, so the first report comes between
// StallReport and 1.25 StallReport into the wait):
// which ranks have arrived, which have not, whether those are alive and
// when they last finished a collective. A timeout's error says the same.
package star
