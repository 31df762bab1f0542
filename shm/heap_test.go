package shm_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"runtime/debug"
	"strconv"
	"sync"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/shm"
)

// rankComm stands in for rank Rank of a Size-rank communicator of another
// backend (star over TCP): the heap fallback must not care which.
type rankComm struct{ rank, size int }

func (c rankComm) Rank() int { return c.rank }
func (c rankComm) Size() int { return c.size }
func (c rankComm) Allgatherv(context.Context, comm.View, comm.View, []int, []int) error {
	return errors.New("rankComm: not a real communicator")
}
func (c rankComm) Allreduce(context.Context, comm.View, comm.View, comm.ReduceOp) error {
	return errors.New("rankComm: not a real communicator")
}
func (c rankComm) Broadcast(context.Context, comm.View, int) error {
	return errors.New("rankComm: not a real communicator")
}
func (c rankComm) Barrier(context.Context) error {
	return errors.New("rankComm: not a real communicator")
}
func (c rankComm) Close() error { return nil }

// providers returns heap-fallback providers for every rank of a local
// communicator and of 2- and 4-rank communicators of another backend.
func providers() map[string][]shm.Provider {
	out := map[string][]shm.Provider{"backend=local/ranks=1": {shm.HeapFallback(comm.NewLocal())}}
	for _, size := range []int{2, 4} {
		ps := make([]shm.Provider, size)
		for r := range ps {
			ps[r] = shm.HeapFallback(rankComm{rank: r, size: size})
		}
		out[fmt.Sprintf("backend=star/ranks=%d", size)] = ps
	}
	return out
}

// eachRank runs f concurrently for every rank's provider (so the race
// detector sees ranks sharing nothing) and fails t with every rank's error.
func eachRank(t *testing.T, ps []shm.Provider, f func(rank int, p shm.Provider) error) {
	t.Helper()
	errs := make([]error, len(ps))
	var wg sync.WaitGroup
	for r, p := range ps {
		wg.Go(func() { errs[r] = f(r, p) })
	}
	wg.Wait()
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
}

func iota64(n int) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = float64(i)
	}
	return s
}

func TestKind(t *testing.T) {
	require.Equal(t, shm.KindHeap, shm.HeapFallback(comm.NewLocal()).Kind())
}

// Conformance "lifecycle": the leader creates 100 float64, writes 0..99 and
// fences; a follower fences and reads 0..99. With the heap fallback every
// rank is its own leader and reads back what it wrote into its own copy.
func TestLifecycle(t *testing.T) {
	for name, ps := range providers() {
		t.Run(name, func(t *testing.T) {
			eachRank(t, ps, func(rank int, p shm.Provider) error {
				r, err := shm.Create[float64](p, 100)
				if err != nil {
					return err
				}
				defer r.Release()
				if p.IsLeader() {
					copy(r.Slice(), iota64(100))
				}
				if err := r.Fence(); err != nil {
					return fmt.Errorf("leader fence: %w", err)
				}
				// The follower's side: fence, then read.
				if err := r.Fence(); err != nil {
					return fmt.Errorf("follower fence: %w", err)
				}
				if d := cmp.Diff(iota64(100), r.Slice()); d != "" {
					return fmt.Errorf("Slice after fence (-want +got):\n%s", d)
				}
				// The raw bytes are the same memory, in native byte order.
				b := r.Raw().Bytes()
				if len(b) != 800 {
					return fmt.Errorf("len(Bytes) = %d, want 800", len(b))
				}
				got := make([]float64, 100)
				for i := range got {
					got[i] = math.Float64frombits(binary.NativeEndian.Uint64(b[8*i:]))
				}
				if d := cmp.Diff(iota64(100), got); d != "" {
					return fmt.Errorf("Bytes after fence (-want +got):\n%s", d)
				}
				return nil
			})
		})
	}
}

// Conformance "is_leader": the heap fallback says true on every rank.
func TestIsLeader(t *testing.T) {
	for name, ps := range providers() {
		t.Run(name, func(t *testing.T) {
			for r, p := range ps {
				require.True(t, p.IsLeader(), "rank %d", r)
			}
		})
	}
}

// Conformance "split_local": a size-1 communicator with rank 0 that works.
func TestSplitLocal(t *testing.T) {
	ctx := context.Background()
	for name, ps := range providers() {
		t.Run(name, func(t *testing.T) {
			eachRank(t, ps, func(rank int, p shm.Provider) error {
				c, err := p.SplitLocal()
				if err != nil {
					return err
				}
				defer c.Close()
				if c.Rank() != 0 || c.Size() != 1 {
					return fmt.Errorf("SplitLocal: rank %d of size %d, want rank 0 of size 1", c.Rank(), c.Size())
				}
				if err := c.Barrier(ctx); err != nil {
					return fmt.Errorf("barrier: %w", err)
				}
				send, recv := []float64{1, float64(rank), -3}, make([]float64, 3)
				if err := comm.Allreduce(ctx, c, send, recv, comm.Sum); err != nil {
					return fmt.Errorf("allreduce: %w", err)
				}
				if d := cmp.Diff(send, recv); d != "" {
					return fmt.Errorf("allreduce (-want +got):\n%s", d)
				}
				return nil
			})
		})
	}
}

func TestSplitLocalReturnsIndependentCommunicators(t *testing.T) {
	p := shm.HeapFallback(comm.NewLocal())
	a, err := p.SplitLocal()
	require.NoError(t, err)
	b, err := p.SplitLocal()
	require.NoError(t, err)
	require.NoError(t, a.Close())
	require.ErrorIs(t, a.Barrier(context.Background()), comm.ErrInvalidCommunicator)
	require.NoError(t, b.Barrier(context.Background()), "closing one SplitLocal communicator closed another")
	require.NoError(t, b.Close())
}

// Conformance "release": a released region frees its memory; creating it
// again works and gives zeroed memory.
func TestRelease(t *testing.T) {
	p := shm.HeapFallback(comm.NewLocal())
	r, err := shm.Create[float64](p, 100)
	require.NoError(t, err)
	copy(r.Slice(), iota64(100))
	require.NoError(t, r.Fence())

	require.NoError(t, r.Release())
	require.Nil(t, r.Slice())
	require.Nil(t, r.Raw().Bytes())
	require.Zero(t, r.Len())
	require.Zero(t, r.Raw().Len())
	require.Equal(t, comm.Float64, r.Raw().DType())
	require.ErrorIs(t, r.Fence(), shm.ErrReleased)
	require.ErrorIs(t, r.Raw().Fence(), shm.ErrReleased)
	require.NotPanics(t, func() { require.ErrorIs(t, r.Release(), shm.ErrReleased) })

	again, err := shm.Create[float64](p, 100)
	require.NoError(t, err)
	defer again.Release()
	require.Empty(t, cmp.Diff(make([]float64, 100), again.Slice()), "a new region must be zeroed")
	require.NoError(t, again.Fence())
}

func TestConcurrentRelease(t *testing.T) {
	const goroutines = 8
	r, err := shm.Create[int32](shm.HeapFallback(comm.NewLocal()), 10)
	require.NoError(t, err)
	errs := make([]error, goroutines)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() { errs[i] = r.Release() })
	}
	wg.Wait()
	succeeded := 0
	for _, err := range errs {
		if err == nil {
			succeeded++
		} else {
			require.ErrorIs(t, err, shm.ErrReleased)
		}
	}
	require.Equal(t, 1, succeeded, "exactly one Release must succeed")
}

func TestEmptyRegion(t *testing.T) {
	r, err := shm.Create[float64](shm.HeapFallback(comm.NewLocal()), 0)
	require.NoError(t, err)
	require.NotNil(t, r.Slice())
	require.Empty(t, r.Slice())
	require.NotNil(t, r.Raw().Bytes())
	require.Empty(t, r.Raw().Bytes())
	require.Zero(t, r.Len())
	require.NoError(t, r.Fence())
	require.NoError(t, r.Release())
	require.Nil(t, r.Slice())
	require.ErrorIs(t, r.Fence(), shm.ErrReleased)
}

// elemCase checks one element type: right length and type, aligned, zeroed,
// and Slice and Bytes are the same memory.
func elemCase[T comm.Elem](t *testing.T, p shm.Provider, count int) {
	r, err := shm.Create[T](p, count)
	require.NoError(t, err)
	defer r.Release()
	var z T
	size := int(unsafe.Sizeof(z))
	s := r.Slice()
	require.Len(t, s, count)
	require.Equal(t, count, r.Len())
	require.Equal(t, comm.DTypeOf[T](), r.Raw().DType())
	b := r.Raw().Bytes()
	require.Len(t, b, count*size)
	require.Empty(t, cmp.Diff(make([]T, count), s), "new region must be zeroed")
	if count == 0 {
		return
	}
	require.Zero(t, uintptr(unsafe.Pointer(&s[0]))%unsafe.Alignof(z), "Slice not aligned")
	require.Equal(t, unsafe.Pointer(&b[0]), unsafe.Pointer(&s[0]), "Slice and Bytes must share memory")
	for i := range s {
		s[i] = T(i + 1)
	}
	require.NoError(t, r.Fence())
	require.Equal(t, comm.ViewOf(s).Bytes, b, "writes through Slice must show in Bytes")
}

func TestElementTypes(t *testing.T) {
	p := shm.HeapFallback(rankComm{rank: 1, size: 3})
	for _, count := range []int{0, 1, 7, 100} {
		for _, c := range []struct {
			name string
			run  func(*testing.T, shm.Provider, int)
		}{
			{"float64", elemCase[float64]},
			{"float32", elemCase[float32]},
			{"int64", elemCase[int64]},
			{"int32", elemCase[int32]},
			{"uint64", elemCase[uint64]},
			{"uint32", elemCase[uint32]},
			{"uint8", elemCase[uint8]},
		} {
			t.Run("type="+c.name+"/count="+strconv.Itoa(count), func(t *testing.T) { c.run(t, p, count) })
		}
	}
}

// Conformance "excessive size": AllocationFailed with the bytes requested.
func TestExcessiveSize(t *testing.T) {
	p := shm.HeapFallback(comm.NewLocal())
	capped, err := shm.NewHeapFallback(comm.NewLocal(), shm.Config{MaxRegionBytes: 1024})
	require.NoError(t, err)
	for _, c := range []struct {
		name      string
		create    func() error
		requested int
	}{
		{"why=overflow/type=float64", func() error { _, err := shm.Create[float64](p, math.MaxInt); return err }, math.MaxInt},
		{"why=overflow/type=uint32", func() error { _, err := shm.Create[uint32](p, math.MaxInt/4+1); return err }, math.MaxInt},
		{"why=overflow/raw", func() error { _, err := p.CreateRegion(comm.Int64, math.MaxInt/2); return err }, math.MaxInt},
		{"why=cap/type=float64", func() error { _, err := shm.Create[float64](capped, 129); return err }, 1032},
		{"why=cap/type=uint8", func() error { _, err := shm.Create[uint8](capped, 1025); return err }, 1025},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.create()
			var ae *comm.AllocationFailedError
			require.ErrorAs(t, err, &ae)
			require.Equal(t, c.requested, ae.RequestedBytes)
			require.NotEmpty(t, ae.Message)
		})
	}
	t.Run("why=cap/at-limit", func(t *testing.T) {
		r, err := shm.Create[float64](capped, 128)
		require.NoError(t, err)
		require.Len(t, r.Slice(), 128)
		require.NoError(t, r.Release())
	})
}

func TestExcessiveSizeHuge(t *testing.T) {
	if strconv.IntSize != 64 {
		t.Skip("needs a 64-bit int")
	}
	// 2^63-1 bytes fits in an int but no machine or Go runtime can provide it.
	_, err := shm.Create[uint8](shm.HeapFallback(comm.NewLocal()), math.MaxInt)
	var ae *comm.AllocationFailedError
	require.ErrorAs(t, err, &ae)
	require.Equal(t, math.MaxInt, ae.RequestedBytes)
}

func TestExcessiveSizeMemoryLimit(t *testing.T) {
	old := debug.SetMemoryLimit(1 << 20)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })
	_, err := shm.Create[uint8](shm.HeapFallback(comm.NewLocal()), 1<<20+1)
	var ae *comm.AllocationFailedError
	require.ErrorAs(t, err, &ae)
	require.Equal(t, 1<<20+1, ae.RequestedBytes)
	require.Contains(t, ae.Message, "GOMEMLIMIT")
}

func TestInvalidArguments(t *testing.T) {
	p := shm.HeapFallback(comm.NewLocal())
	for _, c := range []struct {
		name   string
		create func() error
	}{
		{"arg=count/count=-1", func() error { _, err := shm.Create[float64](p, -1); return err }},
		{"arg=count/count=minint", func() error { _, err := p.CreateRegion(comm.Uint8, math.MinInt); return err }},
		{"arg=dtype/dtype=0", func() error { _, err := p.CreateRegion(comm.DType(0), 1); return err }},
		{"arg=dtype/dtype=99", func() error { _, err := p.CreateRegion(comm.DType(99), 1); return err }},
		{"arg=provider/provider=nil", func() error { _, err := shm.Create[float64](nil, 1); return err }},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.create()
			var ie *comm.InvalidArgumentError
			require.ErrorAs(t, err, &ie)
			require.Equal(t, shm.OpCreateRegion, ie.Operation)
			require.Equal(t, "create_shared_region", ie.Operation)
		})
	}
}

func TestConfig(t *testing.T) {
	require.NoError(t, shm.DefaultConfig().Validate())
	require.NoError(t, shm.Config{MaxRegionBytes: 1}.Validate())
	err := shm.Config{MaxRegionBytes: -1}.Validate()
	require.ErrorContains(t, err, "MaxRegionBytes")
	p, err := shm.NewHeapFallback(comm.NewLocal(), shm.Config{MaxRegionBytes: -1})
	require.Error(t, err)
	require.Nil(t, p)
}

// lyingProvider returns regions that break the Region contract.
type lyingProvider struct {
	shm.Provider
	dt       comm.DType
	released *bool
}

type trackedRegion struct {
	shm.Region
	released *bool
}

func (r trackedRegion) Release() error { *r.released = true; return r.Region.Release() }

func (p lyingProvider) CreateRegion(_ comm.DType, count int) (shm.Region, error) {
	r, err := p.Provider.CreateRegion(p.dt, count)
	if err != nil {
		return nil, err
	}
	return trackedRegion{Region: r, released: p.released}, nil
}

func TestCreateRefusesAMismatchedRegion(t *testing.T) {
	released := false
	p := lyingProvider{Provider: shm.HeapFallback(comm.NewLocal()), dt: comm.Float32, released: &released}
	r, err := shm.Create[float64](p, 10)
	require.Error(t, err)
	require.Nil(t, r)
	require.True(t, released, "Create must release the region it refuses")
}
