// Package shm is the SharedMemoryProvider of the COBRE backends: regions
// of typed elements that the ranks on one host can share, a leader that
// populates them, and a communicator of the ranks on the same host. It is
// also the shm backend (New, Comm): every rank a process of one host, the
// collectives moving through a POSIX shared-memory segment.
//
// Two layers, because Go methods cannot be generic:
//
//   - Provider and Region are untyped. A Provider creates a Region of count
//     elements of a comm.DType; Region.Bytes is the region's memory, aligned
//     for its element type.
//   - Create[T] is the typed entry point. It returns a *TypedRegion[T] whose
//     Slice is a []T over the region's memory (no copy), for reading and
//     writing alike: Go has no read-only slices, so who may write when is a
//     matter of the ownership rules below.
//
// The comm.Local and star backends do not import shm; a program gets the
// Provider of any communicator with For(c): the shm backend's own for a
// shm communicator, the heap fallback (HeapFallback(c)) for the others.
//
// # Heap fallback
//
// HeapFallback is the strategy of the local and TCP backends, whose ranks
// run in separate address spaces (possibly on different machines), so no
// memory is really shared: every rank allocates and populates its own copy.
// Method by method:
//
//   - CreateRegion allocates a zeroed per-process buffer of count elements
//     on the Go heap. Nothing is sent to any other rank and nothing is
//     shared with one.
//   - IsLeader always returns true: every rank is its own leader.
//   - SplitLocal returns a single-rank communicator (rank 0 of size 1, a
//     new comm.Local).
//   - TypedRegion.Slice returns the local heap memory itself.
//   - Fence is a no-op that returns nil.
//   - Release drops the buffer; the garbage collector frees it once no
//     slice obtained from the region refers to it any more.
//
// With the heap fallback every rank replicates shared data: R ranks holding
// 20.8 MB of shareable data use R × 20.8 MB in total instead of 20.8 MB.
//
// # Ownership
//
// Programs are written for true shared memory and run unchanged on the
// heap fallback: the rank for which IsLeader returns true writes the region,
// calls Fence, and from then on every rank on the host (the leader too)
// only reads it, after its own Fence. With the heap fallback every rank is a
// leader, so every rank populates its own copy, and its Fence is only a
// marker. Code that lets a non-leader write, or reads before the Fence, is
// wrong even if the heap fallback happens to tolerate it.
//
// Within one process the region's methods are safe for concurrent use, and
// Release may be called from any goroutine and more than once (the second
// call returns ErrReleased). The memory itself follows the Go memory model:
// goroutines that share a region's slice synchronize their own reads and
// writes (the heap fallback's Fence is not a synchronizing operation). After Release, Bytes and Slice return nil, Len
// returns 0 and Fence returns ErrReleased; a slice obtained before Release
// must not be used any more (the heap fallback leaves it pointing at a
// detached buffer, true shared memory will unmap it).
//
// # Errors
//
// A negative count or an invalid element type gives a
// *comm.InvalidArgumentError (Operation "create_shared_region"). A size
// that overflows int, exceeds Config.MaxRegionBytes, the Go memory limit
// (GOMEMLIMIT), the host's RAM plus swap (Linux) or the largest allocation
// Go can make gives a *comm.AllocationFailedError whose RequestedBytes is the
// size asked for (math.MaxInt when that does not fit in an int). These
// limits are checked before allocating, because a Go allocation the system
// refuses is a fatal error, not a recoverable one.
//
// # The shm backend
//
// New starts one rank of a communicator whose ranks are processes of one
// host sharing a POSIX shared-memory segment (Linux only; elsewhere New
// returns a *comm.BackendNotAvailableError). Its Provider (For, or
// Comm.Provider) is real shared memory: rank 0 is the one leader,
// SplitLocal is the communicator itself (a view whose Close leaves it
// open), Fence is a barrier of every rank, and CreateRegion is collective.
//
// Segment. The file Dir/starcomm-NAME (Dir is /dev/shm), mapped MAP_SHARED
// by every rank, holds: a 4 KiB header (magic, version, size, chunk size,
// a random nonce, the state of the job, the count of ranks that joined,
// and the abort word); one 512-byte control block per rank, each field
// written by one rank on a cache line of its own (its process id and
// state; its progress counter with the headers of its last two
// collectives; its bell, a futex word the others ring; its failure
// message); and two halves of ChunkBytes (256 KiB by default) per rank.
// Its size is 4 KiB + R × 512 B rounded up to a page, plus R × 2 ×
// ChunkBytes, whatever the size of the messages: 2.01 MiB (2,105,344
// bytes) at R = 4, 4.01 MiB at R = 8.
//
// Synchronisation. Collectives are sequences of steps numbered globally,
// the same on every rank. In step G a rank writes its chunk into its half
// G mod 2 (and, at a collective's first step, a header naming the step,
// collective, element type, operator, root, its byte count and, for
// allgatherv, a fingerprint of its counts into header slot G mod 2, beside
// its progress counter), publishes progress G+1 with
// an atomic store, and copies (or reduces) the peers' chunks of step G
// from their halves straight into the caller's buffer. A rank publishes a
// step only once it is done with the one before, so before writing half
// (or header slot) G mod 2 again it waits until every peer's progress is
// at least G (they published step G-1, so they consumed step G-2), unless
// it saw that already at step G-1. A message larger than a chunk is a
// pipeline of steps, so the segment never grows with the message. A
// waiting rank re-reads the counter a few
// hundred times, then yields its CPU (sched_yield) for 200 µs, then
// sleeps on its bell (FUTEX_WAIT, at most 10 ms at a time); a rank that
// publishes progress rings the bells of the ranks that sleep. Allreduce
// reduces ranks 0, 1, ..., R-1 in that order on every rank (acc = rank
// 0's chunk, then comm.Reduce(acc, rank r's chunk)), so results are
// bit-identical to the tcp backend's.
//
// Mismatches. At a collective's first step every rank compares every peer's
// header with its own call (in a broadcast too: the root does not return
// before every rank has entered it), so every rank sees a disagreement, at
// once. A rank that sees one waits for every header and judges them all by
// one rule, so that every rank blames the same rank whichever noticed
// first: the reference call is the one most ranks made (of calls made by as
// many ranks, the one of the lowest rank: with two ranks, rank 0's), and
// the lowest rank whose call differs from it is blamed, as the tcp
// backend's collective check (star.Config.CheckCollectives) judges. The
// verdict goes in the abort word. Different collectives, element types,
// operators or roots fail every rank with a *comm.CollectiveFailedError
// naming the blamed rank, wrapping an *AbortError and ErrMismatch; the
// message names the blamed rank's call and the reference's. When the calls
// differ only in a length (allreduce's or broadcast's byte count,
// allgatherv's counts), a rank that sees a contribution disagree with its
// own arguments fails with a *comm.InvalidBufferSizeError in bytes naming
// that contribution's rank (the blamed rank's, or, on the blamed rank, the
// reference rank's), the others as for a mismatch; OnFailure blames the
// blamed rank on every rank.
//
// Failures. Every rank holds a pidfd of every other rank's process and a
// goroutine polls them: a process that ends without having closed its
// communicator is published in the abort word (the rank at fault, the
// rank that saw it, the failure's class and the operation; the first
// publication wins, so every rank names the same rank), which wakes every
// rank: each fails its collective with a *comm.CollectiveFailedError{Code:
// 0, Rank: the dead rank} wrapping an *AbortError and ErrPeerExited. A
// rank that waits for a peer whose progress does not move for
// CommConfig.Timeout publishes the least advanced peer as hung (the error
// wraps os.ErrDeadlineExceeded). A rank that closes while another waits
// for it, or whose Close interrupts its collective, is named with
// ErrPeerClosed (on that rank itself, comm.ErrInvalidCommunicator); a rank
// whose context ends names itself (context.Canceled). After a failure the communicator is
// fail-stop; OnFailure sees the first failure before the call returns.
//
// Start-up, stale segments and name collisions. Two open file description
// locks on the segment file, which the kernel releases when a process dies
// however it dies, tell live jobs from dead ones: byte 0 is the door (held
// exclusively while a rank joins or removes the file), byte 1 is shared by
// every member. A joining rank opens (or creates) the file, takes the
// door, and tries the alive lock exclusively: if it gets it, no live
// process uses the file, which is new or left by a job that died whole,
// and it initialises it afresh (ReplacedStale reports this); if not, it
// checks that the segment is this job's (same size and chunk, still
// forming, its rank free) and otherwise fails with an *InUseError without
// touching anything: a second live job with the same name is refused on
// every one of its ranks at once. Ranks may arrive in any order within
// CommConfig.ConnectTimeout; when it passes, the ranks that joined fail
// with a *MissingRanksError naming the others. They do not wait that long
// for a rank that joined and then failed: a rank whose process ended
// (looked at every 50 ms, through a pidfd, so an unreaped process counts)
// or whose context ended fails the others' start-up at once, naming it (an
// *AbortError in the *MissingRanksError). They remove the name as they
// fail, so a rank that comes after such a failure starts a new segment
// and fails at its own ConnectTimeout, with a *MissingRanksError naming
// every rank that did not come; only one that comes while the failed
// ranks are still leaving is told of the failure, not that another job
// uses the name. A file another user owns
// is a permission error (fs.ErrPermission); the segment is created with
// mode 0600, so every rank of a job runs as one user.
//
// Cleanup. A rank leaves the segment when it closes or fails: it drops its
// share of the alive lock, and the last rank to leave removes the file
// (under the door, and only if the path still names that file). A job
// whose ranks all fail or close removes its segment, however the failure
// came (SIGKILL of any rank while others are attached included); a job
// whose every rank is killed at once, or whose last rank still attached
// ends without Close after the others closed (it exits, or is killed in or
// before its Close: no process is left to remove the file), leaves a stale
// segment that the next job of the name replaces (starrun removes it when
// the job ends). Region files
// are removed as soon as every rank has mapped them: their memory lives as
// long as a mapping does. One left by a job killed inside CreateRegion is
// removed with the segment: by the last rank to leave, by the next job
// replacing a stale segment, and by RemoveFiles (starrun's cleanup).
//
// Limits: one host, one user, one pid namespace (pidfds; a rank in
// another one, another container sharing /dev/shm, fails the job's
// start-up at once with ErrPidNamespace, naming it); Linux 5.3 or
// later for pidfds (older kernels find dead ranks by the timeout only);
// names of letters, digits, '-' and '_'; collectives of one communicator
// one at a time, as for every backend (one called while another runs fails
// with comm.ErrConcurrentCall).
package shm
