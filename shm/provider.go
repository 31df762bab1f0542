package shm

import (
	"errors"

	"github.com/starcomm/starcomm/comm"
)

// OpCreateRegion is the Operation of the errors CreateRegion and Create
// return: the spec's name for the call.
const OpCreateRegion = "create_shared_region"

// KindHeap is the Kind of the heap-fallback provider.
const KindHeap = "heap"

// ErrReleased is returned by Region.Fence and TypedRegion.Fence after the
// region was released, and by a second Release of the same region.
var ErrReleased = errors.New("shm: region released")

// Provider creates shared-memory regions for the ranks of one communicator
// and tells which rank of a host populates them. It is the spec's
// SharedMemoryProvider.
type Provider interface {
	// Kind names the strategy: KindHeap for the heap fallback.
	Kind() string
	// IsLeader reports whether this rank writes the regions of its host.
	// The heap fallback returns true on every rank.
	IsLeader() bool
	// SplitLocal returns a communicator of the ranks that share memory with
	// this one (the ranks on this host). The caller owns it and closes it.
	// The heap fallback returns a new single-rank communicator (rank 0 of
	// size 1).
	SplitLocal() (comm.Communicator, error)
	// CreateRegion creates a region of count zeroed elements of type dt.
	// count == 0 gives an empty region. A negative count or an invalid dt
	// gives a *comm.InvalidArgumentError; a size that cannot be allocated
	// gives a *comm.AllocationFailedError. With true shared memory the call
	// is collective over the SplitLocal group; the heap fallback is purely
	// local. The caller owns the region and releases it.
	CreateRegion(dt comm.DType, count int) (Region, error)
}

// Region is an untyped shared-memory region created by a Provider. Use
// Create for a typed view. See the package doc for who may write when.
type Region interface {
	// DType returns the element type the region was created with.
	DType() comm.DType
	// Len returns the number of elements, or 0 after Release.
	Len() int
	// Bytes returns the region's memory (Len() × DType().Size() bytes,
	// aligned for the element type), not a copy. It returns an empty non-nil
	// slice for an empty region and nil after Release.
	Bytes() []byte
	// Fence makes the leader's writes visible to every rank of the host and
	// returns when they are. It returns ErrReleased after Release. The heap
	// fallback's Fence does nothing else.
	Fence() error
	// Release frees the region. Later calls to Bytes return nil and Fence
	// returns ErrReleased. Release may be called from any goroutine; a
	// second call returns ErrReleased.
	Release() error
}
