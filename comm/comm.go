package comm

import "context"

// Communicator is a group of Size() ranks that run collectives together.
// Collectives on one communicator must come one at a time, in the same
// order on every rank: a collective called while another runs (from
// another goroutine) fails at once with an error wrapping
// ErrConcurrentCall and does nothing (the local backend of one rank, whose
// calls are local copies, does not check). Rank and Size may be called at
// any time. Close may be called at any time from any goroutine and
// unblocks a running collective.
type Communicator interface {
	// Rank returns this process's rank, 0..Size()-1.
	Rank() int
	// Size returns the number of ranks.
	Size() int
	// Allgatherv gathers every rank's send into recv at displs[r] (in
	// elements). See the package doc for the exact contract.
	Allgatherv(ctx context.Context, send, recv View, counts, displs []int) error
	// Allreduce reduces send element-wise across ranks, in rank order, into
	// recv on every rank. send and recv have the same, non-zero length.
	Allreduce(ctx context.Context, send, recv View, op ReduceOp) error
	// Broadcast copies root's buf into every rank's buf.
	Broadcast(ctx context.Context, buf View, root int) error
	// Barrier returns once every rank has entered it.
	Barrier(ctx context.Context) error
	// Close ends the communicator on this rank and releases its
	// resources; it may be called from any goroutine, during a collective
	// (which then fails at once). It is not always immediate: a backend
	// may wait, bounded by its timeouts, for its peers to close too (the
	// tcp backend's workers wait for rank 0's Shutdown). Collectives called
	// after Close return ErrInvalidCommunicator.
	Close() error
}

// Allgatherv is the typed form of Communicator.Allgatherv.
func Allgatherv[T Elem](ctx context.Context, c Communicator, send, recv []T, counts, displs []int) error {
	return c.Allgatherv(ctx, ViewOf(send), ViewOf(recv), counts, displs)
}

// Allreduce is the typed form of Communicator.Allreduce.
func Allreduce[T Elem](ctx context.Context, c Communicator, send, recv []T, op ReduceOp) error {
	return c.Allreduce(ctx, ViewOf(send), ViewOf(recv), op)
}

// Broadcast is the typed form of Communicator.Broadcast.
func Broadcast[T Elem](ctx context.Context, c Communicator, buf []T, root int) error {
	return c.Broadcast(ctx, ViewOf(buf), root)
}
