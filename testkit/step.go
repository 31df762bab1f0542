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
