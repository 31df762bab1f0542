// Package star implements the star-topology collective protocol of the
// spec (TCP backend, sections 2 to 5) over any transport.Conn: rank 0 is the
// coordinator and holds one link to each worker; ranks 1..R-1 each hold one
// link to rank 0. Every collective goes through the coordinator. The package
// knows nothing about sockets: the same code runs over TCP
// (transport/tcp), in-memory pipes (transport/pipe) and the fault injector
// (transport/faulty).
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
// rank u32 BE, size u32 BE). The coordinator checks that 1 <= rank < size,
// that the rank is not registered yet and that size matches its own, and
// answers Ack (0x09, size u32 BE); otherwise it answers Abort (0x0B) with the
// reason and closes, and keeps waiting for the real ranks. The worker checks
// the echoed size. The coordinator handshakes connections concurrently, drops
// one that stays silent for HandshakeTimeout, and closes its listener once
// every worker has registered.
//
// Allgatherv: worker r sends AllgathervSend (0x01) with its counts[r]
// elements. The coordinator reads every worker concurrently, straight into
// recv at displs[r], copies its own data to displs[0], then sends each worker
// AllgathervRecv (0x02) whose payload is every rank's region in rank order,
// sum(counts) elements (exactly recv[0:sum(counts)] when displs are the
// packed prefix sums; with gaps, gap elements are not sent and stay
// untouched). The worker reads the regions straight into recv at displs.
//
// Allreduce: worker r sends AllreduceSend (0x03): one ReduceOp byte (Sum 0,
// Min 1, Max 2, BitwiseOr 3) then its elements. The coordinator checks every
// op byte against its own, reduces acc = send₀, then acc = op(acc, send_r)
// for r = 1, 2, ..., R-1 in that order, and sends AllreduceRecv (0x04) with
// acc to every worker.
//
// Broadcast: with root 0 the coordinator sends Broadcast (0x05) with buf to
// every worker. With root r > 0, worker r sends Broadcast to the
// coordinator, which reads it into its buf and forwards it to every worker
// but r.
//
// Barrier: every worker sends BarrierReady (0x06, empty); once the
// coordinator has all of them it sends BarrierGo (0x07, empty) to each.
//
// Shutdown: Close on a healthy coordinator sends Shutdown (0x0A, empty) to
// every worker, half-closes, and waits up to ShutdownTimeout for each worker
// to close its end. A worker's Close closes its link. A worker that reads
// Shutdown while expecting a collective fails with ErrShutdown.
//
// Abort (0x0B, our extension; UTF-8 reason): when a rank fails a collective
// it sends Abort on every link it still has whose stream is at a frame
// boundary, reading and discarding what the peer is still sending so that a
// peer blocked in a write can move on, then closes. The coordinator's reason
// starts "rank N failed during OP", naming the rank at fault, so that every
// surviving worker fails at once with a *comm.CollectiveFailedError whose
// Rank is N, not after the timeout. A peer that only knows the spec sees an
// unexpected tag and fails too.
//
// # Polling
//
// Over a transport that is a transport.Poller (TCP), a rank polls for a
// small frame (a payload of at most 256 KiB) for up to Config.Spin before
// it parks a goroutine in the runtime's network poller: the coordinator
// reads every worker link in turn from the goroutine of the collective, a
// worker its link to the coordinator, and the coordinator writes small
// frames to every worker from that goroutine as far as the socket takes
// them without waiting. Between rounds that found nothing it yields the
// processor (sched_yield), so that on a host with more ranks than cores the
// peer it waits for gets to run. Whatever has not arrived or gone out when
// polling ends (Spin without progress, or Timeout in all) is finished by
// the link's own goroutine under the timeout, exactly as without polling:
// a frame may be split between the two at any byte. Failures found while
// polling (EOF, reset, a bad header, a passed deadline, a cancelled
// context) are reported as they would be otherwise. Large frames are not
// polled for: they take long enough on the wire that parking loses
// nothing, and polling would take a core from the copies.
//
// # Timeouts and failure
//
// Config.Timeout bounds every read and write (each call moves at most 4
// MiB). A closed link surfaces as io.EOF (between frames) or
// io.ErrUnexpectedEOF (mid-frame), a hang as a deadline error
// (os.ErrDeadlineExceeded), a reset as syscall.ECONNRESET; each is kept as
// the Err of the *comm.CollectiveFailedError. A frame length that differs
// from this rank's arguments is a *comm.InvalidBufferSizeError (Unit
// "bytes"); a start-up failure is a *comm.InitializationFailedError.
// Cancelling the context of a collective fails it like any other failure.
// After any failure the communicator is fail-stop: every later collective
// returns an error at once. Close always returns within about
// ShutdownTimeout.
//
// Collectives are matched by order alone: all ranks must call the same
// collectives in the same order; a mismatch (wrong tag, op or length) fails
// instead of hanging or giving a wrong answer. A mismatch the coordinator
// can see (a worker's frame has another tag, length or op) fails every rank
// in that collective. A worker whose counts for other ranks differ from the
// coordinator's sees it in the AllgathervRecv length and fails; the other
// ranks, whose arguments agree with the coordinator's, complete that
// collective correctly and fail at their next one.
package star
