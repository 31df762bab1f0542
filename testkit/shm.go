package testkit

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/shm"
)

// sharedMemoryCases are the "shared memory provider" cases of the
// conformance suite (Cases), run with the communicator's provider
// (shm.For): the heap fallback of the local and star communicators, where
// every rank is a leader with its own copy, or the POSIX shared memory of
// the shm backend, where rank 0 alone is the leader and every rank reads
// what it wrote.
func sharedMemoryCases() []Case {
	return []Case{
		{Name: "SharedMemory_Lifecycle", Run: func(ctx context.Context, e Env) error {
			p := shm.For(e.Comm)
			r, err := shm.Create[float64](p, 100)
			if err != nil {
				return err
			}
			defer r.Release()
			if p.IsLeader() {
				for i := range r.Slice() {
					r.Slice()[i] = float64(i)
				}
			}
			if err := r.Fence(); err != nil {
				return err
			}
			if err := e.Comm.Barrier(ctx); err != nil {
				return err
			}
			if err := r.Fence(); err != nil {
				return err
			}
			want := make([]float64, 100)
			for i := range want {
				want[i] = float64(i)
			}
			return same("region after fence", r.Slice(), want)
		}},
		{Name: "SharedMemory_IsLeader", Run: func(ctx context.Context, e Env) error {
			p := shm.For(e.Comm)
			if p.Kind() == shm.KindHeap {
				if !p.IsLeader() {
					return errors.New("heap fallback: IsLeader is false; every rank must be a leader")
				}
				return nil
			}
			mine, leaders := []int64{0}, []int64{0}
			if p.IsLeader() {
				mine[0] = 1
			}
			if err := comm.Allreduce(ctx, e.Comm, mine, leaders, comm.Sum); err != nil {
				return err
			}
			if leaders[0] != 1 || p.IsLeader() != (e.Comm.Rank() == 0) {
				return fmt.Errorf("%s provider: %d leaders (this rank %d: %t), want exactly one, rank 0", p.Kind(), leaders[0], e.Comm.Rank(), p.IsLeader())
			}
			return nil
		}},
		{Name: "SharedMemory_SplitLocal", Run: func(ctx context.Context, e Env) error {
			p := shm.For(e.Comm)
			local, err := p.SplitLocal()
			if err != nil {
				return err
			}
			defer local.Close()
			want := []float64{42, 99}
			if p.Kind() == shm.KindHeap {
				if local.Size() != 1 || local.Rank() != 0 {
					return fmt.Errorf("split_local gave rank %d of size %d, want rank 0 of size 1", local.Rank(), local.Size())
				}
			} else {
				// Every rank of a shm job shares this host's memory.
				if local.Size() != e.Comm.Size() || local.Rank() != e.Comm.Rank() {
					return fmt.Errorf("split_local gave rank %d of size %d, want rank %d of size %d", local.Rank(), local.Size(), e.Comm.Rank(), e.Comm.Size())
				}
				want = []float64{42 * float64(local.Size()), 99 * float64(local.Size())}
			}
			got := make([]float64, 2)
			if err := comm.Allreduce(ctx, local, []float64{42, 99}, got, comm.Sum); err != nil {
				return err
			}
			if err := same("split_local allreduce", got, want); err != nil {
				return err
			}
			if err := local.Close(); err != nil {
				return err
			}
			// Closing it leaves the communicator working.
			return e.Comm.Barrier(ctx)
		}},
		{Name: "SharedMemory_Release", Run: func(ctx context.Context, e Env) error {
			p := shm.For(e.Comm)
			r, err := shm.Create[int64](p, 10)
			if err != nil {
				return err
			}
			if p.IsLeader() {
				r.Slice()[3] = 7
			}
			if err := r.Release(); err != nil {
				return err
			}
			if r.Slice() != nil || r.Len() != 0 {
				return fmt.Errorf("released region still holds %d elements", r.Len())
			}
			if err := r.Fence(); !errors.Is(err, shm.ErrReleased) {
				return fmt.Errorf("Fence after Release = %v, want ErrReleased", err)
			}
			again, err := shm.Create[int64](p, 10)
			if err != nil {
				return err
			}
			defer again.Release()
			return same("re-created region", again.Slice(), make([]int64, 10))
		}},
		{Name: "SharedMemory_ExcessiveSize", Run: func(ctx context.Context, e Env) error {
			_, err := shm.Create[float64](shm.For(e.Comm), math.MaxInt/2)
			af, werr := wantErr[*comm.AllocationFailedError]("region of MaxInt/2 float64", err)
			if werr != nil {
				return werr
			}
			if af.RequestedBytes <= 0 {
				return fmt.Errorf("AllocationFailed.RequestedBytes = %d, want the bytes asked for", af.RequestedBytes)
			}
			return nil
		}},
	}
}
