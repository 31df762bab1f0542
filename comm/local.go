package comm

import (
	"context"
	"sync/atomic"
)

// Local is the single-rank backend: rank 0 of a communicator of size 1. Every
// collective is a local copy; nothing is sent anywhere. It is safe to use
// from one goroutine at a time, and Close may be called concurrently.
type Local struct {
	closed atomic.Bool
}

// NewLocal returns a single-rank communicator.
func NewLocal() *Local { return &Local{} }

var _ Communicator = (*Local)(nil)

// Rank returns 0.
func (l *Local) Rank() int { return 0 }

// Size returns 1.
func (l *Local) Size() int { return 1 }

func (l *Local) begin(ctx context.Context, op string) error {
	if l.closed.Load() {
		return ErrInvalidCommunicator // whatever the arguments
	}
	if err := CheckContext(op, ctx); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return &CollectiveFailedError{Operation: op, Message: "context done before the collective started", Rank: 0, Err: err}
	}
	return nil
}

// Allgatherv copies send into recv at displs[0].
func (l *Local) Allgatherv(ctx context.Context, send, recv View, counts, displs []int) error {
	if err := l.begin(ctx, OpAllgatherv); err != nil {
		return err
	}
	if _, err := CheckAllgatherv(0, 1, send, recv, counts, displs); err != nil {
		return err
	}
	es := send.Type.Size()
	copy(recv.Bytes[displs[0]*es:], send.Bytes)
	return nil
}

// Allreduce copies send into recv (the reduction of one rank is itself).
func (l *Local) Allreduce(ctx context.Context, send, recv View, op ReduceOp) error {
	if err := l.begin(ctx, OpAllreduce); err != nil {
		return err
	}
	if err := CheckAllreduce(send, recv, op); err != nil {
		return err
	}
	copy(recv.Bytes, send.Bytes)
	return nil
}

// Broadcast checks root == 0 and leaves buf as it is.
func (l *Local) Broadcast(ctx context.Context, buf View, root int) error {
	if err := l.begin(ctx, OpBroadcast); err != nil {
		return err
	}
	return CheckBroadcast(buf, root, 1)
}

// Barrier returns at once.
func (l *Local) Barrier(ctx context.Context) error {
	return l.begin(ctx, OpBarrier)
}

// Close marks the communicator closed.
func (l *Local) Close() error {
	l.closed.Store(true)
	return nil
}
