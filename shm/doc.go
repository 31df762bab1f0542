// Package shm is the spec's SharedMemoryProvider (the TCP backend spec's section 7): regions
// of typed elements that the ranks on one host can share, a leader that
// populates them, and a communicator of the ranks on the same host.
//
// Two layers, because Go methods cannot be generic:
//
//   - Provider and Region are untyped. A Provider creates a Region of count
//     elements of a comm.DType; Region.Bytes is the region's memory, aligned
//     for its element type.
//   - Create[T] is the typed entry point. It returns a *TypedRegion[T] whose
//     Slice is a []T over the region's memory (no copy). Slice covers both the
//     spec's as_slice and as_mut_slice: Go has no read-only slices, so who may
//     write when is a matter of the ownership rules below.
//
// Backends (comm.Local, star) do not import shm; a program gets a Provider
// for any communicator with HeapFallback(c).
//
// # Heap fallback
//
// HeapFallback is the strategy of the local and TCP backends, whose ranks
// run in separate address spaces (possibly on different machines), so no
// memory is really shared: every rank allocates and populates its own copy.
// Method by method (the spec's HeapFallback table):
//
//   - CreateRegion (create_shared_region) allocates a zeroed per-process
//     buffer of count elements on the Go heap. Nothing is sent to any other
//     rank and nothing is shared with one.
//   - IsLeader (is_leader) always returns true: every rank is its own leader.
//   - SplitLocal (split_local) returns a single-rank communicator (rank 0 of
//     size 1, a new comm.Local).
//   - TypedRegion.Slice (as_slice and as_mut_slice) returns the local heap
//     memory itself.
//   - Fence (fence) is a no-op that returns nil.
//   - Release (Drop) drops the buffer; the garbage collector frees it once no
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
// # Not implemented yet
//
// True POSIX shared memory (the `shm` backend, selected when COBRE_SHM_NAME
// is set: ranks of one host map a named segment, exactly one of them is the
// leader, SplitLocal groups the ranks of the host, Fence is a memory barrier
// plus a barrier of the host's ranks, and CreateRegion is collective over
// that group) is not implemented. Only the heap fallback exists.
package shm
