// Package comm defines the starcomm collective-communication API: the
// Communicator interface every backend implements, the typed generic helpers
// programs call (Allgatherv, Allreduce, Broadcast), the reduction operators,
// the element types, the error types (the README's "Errors" table says
// which failure gives which), and the
// single-rank local backend.
//
// # Buffers
//
// A Communicator works on Views: a raw byte slice plus its element type. The
// generic helpers build Views over the caller's typed slices without copying
// (ViewOf), so a backend receives straight into the caller's memory. Counts
// and displacements are always in elements, never bytes. Backends never keep
// a reference to a View after the call returns, and never write to a send
// buffer.
//
// # Semantics shared by every backend
//
//   - Allgatherv: rank r contributes send (len == counts[r]); on return recv
//     holds rank r's data at [displs[r], displs[r]+counts[r]) for every r.
//     Elements of recv outside those regions are left untouched. Regions must
//     lie inside recv and must not overlap. send either shares no memory
//     with recv or is exactly rank r's region of it (in place).
//   - Allreduce: element-wise reduction of every rank's send, applied in rank
//     order 0, 1, ..., R-1 (acc = send₀; acc = op(acc, send_r)), so the result
//     is bit-for-bit deterministic and identical on every rank. Min and Max
//     follow Go's built-in min and max (a NaN operand gives NaN; -0 < +0);
//     integer Sum wraps; BitwiseOr accepts integer types only. send and
//     recv have the same length, at least one element (an empty allreduce
//     is an *InvalidBufferSizeError, as an Allgatherv with every count 0
//     is not), and are the same slice (in place) or share no memory.
//   - Broadcast: root's buf is copied into every other rank's buf.
//   - Barrier: no rank returns before every rank has entered.
//
// All ranks must call the same collectives in the same order with matching
// arguments; collectives are matched by order alone.
//
// # Errors
//
// Precondition violations (wrong lengths, bad root, bad op for the type) are
// reported on the calling rank before anything is sent, and leave the
// communicator usable. Any failure after communication has started is
// fail-stop: the collective returns a *CollectiveFailedError (or
// *InvalidBufferSizeError when a peer's frame length disagrees), and every
// later call returns an error at once. A context cancelled once the
// collective has begun fails it like any other failure. One already done
// when the collective is called fails it before anything is sent: the tcp
// and local backends then stay usable (like after a precondition
// violation), while the shm backend aborts the job (its peers are told
// through the segment, as for any failure). Close returns
// promptly after a failure or when it interrupts a collective; a healthy
// backend's Close may wait for its peers to end too (the tcp backend's
// workers wait for rank 0's Shutdown at most the timeout T plus
// min(T/2, 500 ms), plus up to a twentieth of that sum, at most 250 ms,
// since a read deadline is set at most that often). After Close
// every call returns ErrInvalidCommunicator, whatever its arguments. When a
// rank's Close interrupts its collective, that collective fails there with
// ErrInvalidCommunicator and on the other ranks with ErrPeerClosed, naming
// the rank.
package comm
