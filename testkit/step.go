package testkit

import (
	"context"
	"errors"
	"fmt"

	"github.com/starcomm/starcomm/comm"
)

// ErrWrongResult is the cause when a collective of a test program's loop
// (see AllreduceStep) returns data that is not what every rank sent.
var ErrWrongResult = errors.New("wrong result")

// AllreduceStep returns iteration i of a test program's loop of allreduce
// sums of n int64s on c: every rank sends rank+i+k as element k, and the
// result is checked element by element (an error wrapping ErrWrongResult
// names the first wrong one).
func AllreduceStep(c comm.Communicator, n int) func(ctx context.Context, i int) error {
	rank, size := c.Rank(), c.Size()
	send, recv := make([]int64, n), make([]int64, n)
	return func(ctx context.Context, i int) error {
		for k := range send {
			send[k] = int64(rank + i + k)
		}
		if err := comm.Allreduce(ctx, c, send, recv, comm.Sum); err != nil {
			return err
		}
		for k := range recv {
			if want := int64(size*(i+k) + size*(size-1)/2); recv[k] != want {
				return fmt.Errorf("%w: iteration %d, element %d is %d, want %d", ErrWrongResult, i, k, recv[k], want)
			}
		}
		return nil
	}
}

// AllgathervStep returns iteration i of a test program's loop of
// allgathervs of n float64s per rank on c (n >= 1): every rank sends
// rank*1e6 + i as its region's first, middle and last element, and those
// of every region are checked, so that a region left from an earlier
// iteration is caught (an error wrapping ErrWrongResult names it).
func AllgathervStep(c comm.Communicator, n int) func(ctx context.Context, i int) error {
	rank, size := c.Rank(), c.Size()
	send, recv := make([]float64, n), make([]float64, n*size)
	counts, displs := make([]int, size), make([]int, size)
	for r := range size {
		counts[r], displs[r] = n, r*n
	}
	return func(ctx context.Context, i int) error {
		v := float64(rank*1_000_000 + i)
		send[0], send[n/2], send[n-1] = v, v, v
		if err := comm.Allgatherv(ctx, c, send, recv, counts, displs); err != nil {
			return err
		}
		for r := range size {
			want := float64(r*1_000_000 + i)
			if got := recv[r*n : r*n+n]; got[0] != want || got[n/2] != want || got[n-1] != want {
				return fmt.Errorf("%w: iteration %d, region of rank %d holds %v, %v, %v, want %v", ErrWrongResult, i, r, got[0], got[n/2], got[n-1], want)
			}
		}
		return nil
	}
}
