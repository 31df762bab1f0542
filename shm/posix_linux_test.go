package shm_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/shm"
	"github.com/starcomm/starcomm/testkit"
)

// TestPosixRegionShared: the leader's writes to a region are what every
// other rank reads after Fence (ranks as goroutines, each with its own
// mapping: the memory is shared through the file, not the Go heap), a rank
// reads what another wrote after a later Fence, and no file is left behind.
func TestPosixRegionShared(t *testing.T) {
	testkit.CheckGoroutines(t)
	cs := startRanks(t, 4, nil)
	defer closeAll(cs)
	const n = 1 << 20 // 8 MiB of float64
	errs := testkit.RunRanks(asComms(cs), func(c comm.Communicator) error {
		p := shm.For(c)
		if p.Kind() != shm.KindPOSIX {
			return fmt.Errorf("kind %q", p.Kind())
		}
		r, err := shm.Create[float64](p, n)
		if err != nil {
			return err
		}
		defer r.Release()
		s := r.Slice()
		if p.IsLeader() {
			for i := range s {
				s[i] = float64(i) * 0.5
			}
		}
		if err := r.Fence(); err != nil {
			return err
		}
		for i := range s {
			if s[i] != float64(i)*0.5 {
				return fmt.Errorf("rank %d: element %d is %v after the fence", c.Rank(), i, s[i])
			}
		}
		if err := r.Fence(); err != nil { // every rank has read before rank 3 writes
			return err
		}
		if c.Rank() == 3 {
			s[7] = -1
		}
		if err := r.Fence(); err != nil {
			return err
		}
		if s[7] != -1 {
			return fmt.Errorf("rank %d does not see rank 3's write", c.Rank())
		}
		return nil
	})
	require.NoError(t, errors.Join(errs...))
	entries, err := os.ReadDir(shm.DefaultDir)
	require.NoError(t, err)
	for _, e := range entries {
		if strings.Contains(e.Name(), ".region-") && strings.Contains(e.Name(), strings.TrimPrefix(cs[0].Path(), shm.DefaultDir+"/")) {
			t.Errorf("region file left: %s", e.Name())
		}
	}
}

// TestPosixRegionTooLarge: a region over MaxRegionBytes, or over the host's
// memory, is an AllocationFailedError with the bytes asked for, on every
// rank, and the communicator still works.
func TestPosixRegionTooLarge(t *testing.T) {
	testkit.CheckGoroutines(t)
	cs := startRanks(t, 2, func(c *shm.CommConfig) { c.MaxRegionBytes = 1 << 20 })
	defer closeAll(cs)
	errs := testkit.RunRanks(asComms(cs), func(c comm.Communicator) error {
		p := shm.For(c)
		for _, count := range []int{1<<17 + 1, math.MaxInt / 8} {
			_, err := shm.Create[float64](p, count)
			var af *comm.AllocationFailedError
			if !errors.As(err, &af) {
				return fmt.Errorf("%d float64: %v, want AllocationFailedError", count, err)
			}
			if want := count * 8; af.RequestedBytes != want && count < math.MaxInt/8 {
				return fmt.Errorf("RequestedBytes %d, want %d", af.RequestedBytes, want)
			}
		}
		r, err := shm.Create[float64](p, 1<<17)
		if err != nil {
			return err
		}
		if err := r.Release(); err != nil {
			return err
		}
		return c.Barrier(context.Background())
	})
	require.NoError(t, errors.Join(errs...))
}

// TestPosixRegionArgumentsDiffer: ranks that ask CreateRegion for another
// count or element type than the leader's get ErrMismatch, naming both,
// and so does every other rank; nobody maps a region sized for another
// count (rank 1 asking for a million elements against the leader's
// thousand read past the leader's file: SIGBUS). A rank that refuses its
// own count (negative) fails with its own error and the others with
// ErrMismatch, together, where the others used to go on into a collective
// that rank never called. The communicator stays usable after both.
func TestPosixRegionArgumentsDiffer(t *testing.T) {
	testkit.CheckGoroutines(t)
	cs := startRanks(t, 3, nil)
	defer closeAll(cs)
	errs := testkit.RunRanks(asComms(cs), func(c comm.Communicator) error {
		p := shm.For(c)
		count := 1000
		if c.Rank() == 1 {
			count = 1000000
		}
		r, err := shm.Create[int64](p, count)
		if err == nil {
			_ = r.Release()
			return fmt.Errorf("rank %d: a region despite the counts differing", c.Rank())
		}
		if !errors.Is(err, shm.ErrMismatch) {
			return fmt.Errorf("rank %d: %v, want ErrMismatch", c.Rank(), err)
		}
		if c.Rank() == 1 && !strings.Contains(err.Error(), "rank 1 asked for 1000000 int64 elements, the leader (rank 0) for 1000 int64") {
			return fmt.Errorf("rank 1: %q does not name both requests", err)
		}
		if c.Rank() != 1 && !strings.Contains(err.Error(), "1 rank refused its arguments or asked for other than the leader's 1000 int64 elements") {
			return fmt.Errorf("rank %d: %q", c.Rank(), err)
		}
		count = 10
		if c.Rank() == 2 {
			count = -1
		}
		_, err = shm.Create[float64](p, count)
		var ia *comm.InvalidArgumentError
		switch {
		case c.Rank() == 2 && !errors.As(err, &ia):
			return fmt.Errorf("rank 2, count -1: %v, want its InvalidArgumentError", err)
		case c.Rank() != 2 && !errors.Is(err, shm.ErrMismatch):
			return fmt.Errorf("rank %d, rank 2 refusing its count: %v, want ErrMismatch", c.Rank(), err)
		}
		r2, err := shm.Create[float64](p, 10)
		if err != nil {
			return fmt.Errorf("rank %d: a region after the refusals: %w", c.Rank(), err)
		}
		_ = r2.Release()
		return c.Barrier(context.Background())
	})
	require.NoError(t, errors.Join(errs...))
}
