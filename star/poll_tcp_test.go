package star_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/star"
	"github.com/starcomm/starcomm/testkit"
)

// The tests in this file run the polled paths (star.Config.Spin over a
// transport.Poller) over real TCP: failures found while polling, polling
// that gives up and parks in the middle of frames, and the timeout after
// polling.

func startTCP(t *testing.T, size int, spin, timeout time.Duration) []comm.Communicator {
	t.Helper()
	testkit.CheckGoroutines(t)
	comms, err := testkit.StartStar(context.Background(), testkit.NewTCPNetwork(), size, func(c *star.Config) {
		c.Spin, c.Timeout = spin, timeout
	})
	require.NoError(t, err)
	t.Cleanup(func() { testkit.CloseAll(comms) })
	return comms
}

// TestPolledCrash: a worker that goes away while the coordinator polls for
// its frame is found by the poll itself (well before Spin is over), and
// every rank fails naming it.
func TestPolledCrash(t *testing.T) {
	const spin = 10 * time.Second // the whole test runs inside the polling
	for _, op := range []string{"barrier", "allreduce", "allgatherv"} {
		t.Run("op="+op, func(t *testing.T) {
			const size, dead = 4, 2
			comms := startTCP(t, size, spin, time.Minute)
			run := func(c comm.Communicator) error {
				ctx := context.Background()
				switch op {
				case "allreduce":
					out := make([]float64, 4)
					return comm.Allreduce(ctx, c, []float64{1, 2, 3, 4}, out, comm.Sum)
				case "allgatherv":
					counts, displs := []int{100, 100, 100, 100}, []int{0, 100, 200, 300}
					return comm.Allgatherv(ctx, c, make([]float64, 100), make([]float64, 400), counts, displs)
				}
				return c.Barrier(ctx)
			}
			begin := time.Now()
			errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
				if c.Rank() == dead {
					return c.Close() // its link closes: a crash, as the others see it
				}
				return run(c)
			})
			took := time.Since(begin)
			// The closing rank left while the others were in a
			// collective: its Close learns that it was blamed.
			var cf *comm.CollectiveFailedError
			require.ErrorAs(t, errs[dead], &cf)
			assert.Equal(t, star.OpClose, cf.Operation)
			for r := range size {
				if r != dead {
					collectiveFailed(t, errs[r], dead)
				}
			}
			assert.ErrorIs(t, errs[0], io.EOF, "the coordinator sees the close")
			assert.Less(t, took, spin, "found by polling, not after the polling gave up")
		})
	}
}

// TestPolledHang: polling gives up after Spin, and the timeout then finds
// a rank that never joins, as without polling: not before Timeout.
func TestPolledHang(t *testing.T) {
	const size, idle, timeout = 4, 3, 300 * time.Millisecond
	comms := startTCP(t, size, time.Millisecond, timeout)
	begin := time.Now()
	errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
		if c.Rank() == idle {
			return nil
		}
		return c.Barrier(context.Background())
	})
	took := time.Since(begin)
	for r := range size {
		if r != idle {
			collectiveFailed(t, errs[r], idle)
		}
	}
	assert.ErrorIs(t, errs[0], os.ErrDeadlineExceeded)
	assert.GreaterOrEqual(t, took, timeout)
}

// TestPolledHandoff: with a Spin so short that polling gives up in the
// middle of frames, the links' goroutines finish them; every result is
// exact. Run with sizes either side of the polling limit.
func TestPolledHandoff(t *testing.T) {
	for _, spin := range []time.Duration{time.Nanosecond, 50 * time.Microsecond} {
		for _, n := range []int{1, 1000, 40_000} { // 8 B, 8 KB, 320 KB per rank
			t.Run(fmt.Sprintf("spin=%v/values=%d", spin, n), func(t *testing.T) {
				const size = 4
				comms := startTCP(t, size, spin, time.Minute)
				counts, displs := make([]int, size), make([]int, size)
				for r := range size {
					counts[r], displs[r] = n, r*n
				}
				errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
					ctx := context.Background()
					for rep := range 20 {
						send := make([]float64, n)
						for i := range send {
							send[i] = float64(c.Rank()*1_000_000 + rep*1000 + i%1000)
						}
						recv := make([]float64, size*n)
						if err := comm.Allgatherv(ctx, c, send, recv, counts, displs); err != nil {
							return err
						}
						for r := range size {
							for i := 0; i < n; i++ {
								if want := float64(r*1_000_000 + rep*1000 + i%1000); recv[r*n+i] != want {
									return fmt.Errorf("rep %d: recv[%d] = %v, want %v", rep, r*n+i, recv[r*n+i], want)
								}
							}
						}
						sum := make([]float64, n)
						if err := comm.Allreduce(ctx, c, send, sum, comm.Sum); err != nil {
							return err
						}
						for i := 0; i < n; i++ {
							want := 0.0
							for r := range size {
								want += float64(r*1_000_000 + rep*1000 + i%1000)
							}
							if sum[i] != want {
								return fmt.Errorf("rep %d: sum[%d] = %v, want %v", rep, i, sum[i], want)
							}
						}
						buf := make([]float64, n)
						if c.Rank() == rep%size {
							copy(buf, send)
						}
						if err := comm.Broadcast(ctx, c, buf, rep%size); err != nil {
							return err
						}
						if want := float64((rep%size)*1_000_000 + rep*1000); buf[0] != want {
							return fmt.Errorf("rep %d: broadcast gave %v, want %v", rep, buf[0], want)
						}
						if err := c.Barrier(ctx); err != nil {
							return err
						}
					}
					return nil
				})
				for r, err := range errs {
					require.NoError(t, err, "rank %d", r)
				}
			})
		}
	}
}

// TestPolledCancel: a context that ends stops a rank that is polling at
// once, not after Spin.
func TestPolledCancel(t *testing.T) {
	const spin = 10 * time.Second
	// Rank 0 polls its worker link for BarrierReady; rank 1 sends its own
	// and polls for a BarrierGo that never comes.
	for _, waiter := range []int{0, 1} {
		t.Run(fmt.Sprintf("rank=%d", waiter), func(t *testing.T) {
			comms := startTCP(t, 2, spin, time.Minute)
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			begin := time.Now()
			err := comms[waiter].Barrier(ctx)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			assert.Less(t, time.Since(begin), spin)
		})
	}
}
