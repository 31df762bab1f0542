package shm

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/starcomm/starcomm/comm"
)

// posixProvider is the provider of a shm communicator: rank 0 is the
// leader, SplitLocal is the communicator itself, and regions are POSIX
// shared memory that every rank maps.
type posixProvider struct{ c *Comm }

var _ Provider = (*posixProvider)(nil)

func (p *posixProvider) Kind() string { return KindPOSIX }

func (p *posixProvider) IsLeader() bool { return p.c.rank == 0 }

// SplitLocal returns the communicator itself (every rank of a shm job is on
// this host), behind a view whose Close does not close the communicator.
func (p *posixProvider) SplitLocal() (comm.Communicator, error) {
	if p.c.closed.Load() {
		return nil, comm.ErrInvalidCommunicator
	}
	return &localView{c: p.c}, nil
}

// CreateRegion is collective over the communicator: the leader creates a
// file next to the segment, sized and allocated (so a full /dev/shm is an
// AllocationFailedError here, not a SIGBUS later), broadcasts whether that
// worked, every rank maps it, and once all have (a barrier) the leader
// removes the name: the memory lives as long as a mapping does, and no
// file is left whatever happens to the job. Every rank compares its element
// type and count with the leader's before it maps anything, and a rank
// that refuses its own arguments still takes part: a difference or a
// refusal fails the call on every rank (ErrMismatch, or the refusing
// rank's own error), and the communicator stays usable.
func (p *posixProvider) CreateRegion(dt comm.DType, count int) (Region, error) {
	c := p.c
	if c.closed.Load() {
		return nil, comm.ErrInvalidCommunicator
	}
	// A rank that refuses its own arguments (see regionBytes) still takes
	// part in the two collectives below, so that every rank fails
	// together instead of the others going on without it.
	n, local := regionBytes(dt, count, Config{MaxRegionBytes: c.cfg.MaxRegionBytes})
	ctx := context.Background()
	k := c.regions.Add(1)
	path := regionPath(c.seg.path, k)
	// status: 0 created, -1 the leader refused its own arguments, else an
	// errno from the leader; then the bytes free, and the leader's element
	// type and count, which every rank compares with its own.
	status := []int64{0, 0, int64(dt), int64(count)}
	fd := -1
	if c.rank == 0 {
		if local != nil {
			status[0] = -1
		} else {
			fd, status[0], status[1] = createRegionFile(path, n)
		}
	}
	if err := comm.Broadcast(ctx, c, status, 0); err != nil {
		closeRegionFile(fd, path)
		return nil, err
	}
	switch {
	case status[0] == -1 && local != nil:
		return nil, local
	case status[0] == -1:
		return nil, &comm.AllocationFailedError{RequestedBytes: n, Message: fmt.Sprintf("%d %v elements: the leader (rank 0) refused its own request of %d %v elements", count, dt, status[3], comm.DType(status[2]))}
	case status[0] != 0:
		msg := fmt.Sprintf("%d %v elements: the leader could not create them in %s: %v", count, dt, c.cfg.Dir, unix.Errno(status[0]))
		if unix.Errno(status[0]) == unix.ENOSPC {
			msg = fmt.Sprintf("%d %v elements exceed the free space of %s (%d bytes)", count, dt, c.cfg.Dir, status[1])
		}
		return nil, &comm.AllocationFailedError{RequestedBytes: n, Message: msg}
	}
	leaderDT, leaderCount := comm.DType(status[2]), status[3]
	var mismatch error
	if local == nil && (leaderDT != dt || leaderCount != int64(count)) {
		// Mapping a region sized for another count could read past the
		// leader's file (SIGBUS), or reinterpret its bytes: not mapped.
		mismatch = fmt.Errorf("shm: CreateRegion: rank %d asked for %d %v elements, the leader (rank 0) for %d %v: %w", c.rank, count, dt, leaderCount, leaderDT, ErrMismatch)
	}
	var mem []byte
	var mapErr error
	if n > 0 && local == nil && mismatch == nil {
		if c.rank != 0 {
			fd, mapErr = unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
		}
		if mapErr == nil {
			mem, mapErr = unix.Mmap(fd, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		}
	}
	if fd >= 0 {
		unix.Close(fd)
	}
	// Every rank has mapped it (or failed to, or refused): the name can go.
	flags := []int64{0, 0} // could not map; refused its arguments or differs from the leader
	if mapErr != nil {
		flags[0] = 1
	}
	if local != nil || mismatch != nil {
		flags[1] = 1
	}
	sum := []int64{0, 0}
	err := comm.Allreduce(ctx, c, flags, sum, comm.Sum)
	if c.rank == 0 && n > 0 {
		_ = unix.Unlink(path)
	}
	switch {
	case err != nil:
	case local != nil:
		err = local
	case mismatch != nil:
		err = mismatch
	case sum[1] != 0:
		err = fmt.Errorf("shm: CreateRegion: %d %s refused %s arguments or asked for other than the leader's %d %v elements: %w", sum[1], rankNoun(sum[1]), possessive(sum[1]), leaderCount, leaderDT, ErrMismatch)
	case sum[0] != 0:
		err = &comm.AllocationFailedError{RequestedBytes: n, Message: fmt.Sprintf("%d ranks could not map the region (this rank: %v)", sum[0], mapErr)}
	}
	if err != nil {
		if mem != nil {
			_ = unix.Munmap(mem)
		}
		return nil, err
	}
	if mem == nil {
		mem = []byte{}
	}
	r := &posixRegion{c: c, dt: dt, n: count}
	r.mem.Store(&mem)
	return r, nil
}

// rankNoun is "rank" or "ranks" for n of them.
func rankNoun(n int64) string {
	if n == 1 {
		return "rank"
	}
	return "ranks"
}

// possessive is "its" or "their" for n ranks.
func possessive(n int64) string {
	if n == 1 {
		return "its"
	}
	return "their"
}

// createRegionFile creates and allocates the region file of n bytes. It
// returns the open file (or -1), and 0 or the errno with the bytes free.
func createRegionFile(path string, n int) (int, int64, int64) {
	if n == 0 {
		return -1, 0, 0
	}
	free := int64(math.MaxInt64)
	var st unix.Statfs_t
	if err := unix.Statfs(dirOf(path), &st); err == nil {
		free = int64(st.Bavail) * int64(st.Bsize) //nolint:unconvert // Bsize is int32 on 32-bit Linux
		if int64(n) > free {
			return -1, int64(unix.ENOSPC), free
		}
	}
	_ = unix.Unlink(path) // a name left by a leader killed inside CreateRegion
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return -1, errnoOf(err), free
	}
	if err := unix.Ftruncate(fd, int64(n)); err != nil {
		closeRegionFile(fd, path)
		return -1, errnoOf(err), free
	}
	if err := unix.Fallocate(fd, 0, 0, int64(n)); err != nil && !errors.Is(err, unix.EOPNOTSUPP) {
		closeRegionFile(fd, path)
		return -1, errnoOf(err), free
	}
	return fd, 0, free
}

func dirOf(path string) string {
	for i := len(path) - 1; i > 0; i-- {
		if path[i] == '/' {
			return path[:i]
		}
	}
	return "."
}

func errnoOf(err error) int64 {
	var e unix.Errno
	if errors.As(err, &e) {
		return int64(e)
	}
	return int64(unix.EIO)
}

func closeRegionFile(fd int, path string) {
	if fd >= 0 {
		unix.Close(fd)
		_ = unix.Unlink(path)
	}
}

// posixRegion is a region every rank of a shm communicator maps.
type posixRegion struct {
	c   *Comm
	dt  comm.DType
	n   int
	mem atomic.Pointer[[]byte] // nil once released
	mu  sync.Mutex             // serialises Release's munmap
}

var _ Region = (*posixRegion)(nil)

func (r *posixRegion) DType() comm.DType { return r.dt }

func (r *posixRegion) Len() int {
	if r.mem.Load() == nil {
		return 0
	}
	return r.n
}

func (r *posixRegion) Bytes() []byte {
	if m := r.mem.Load(); m != nil {
		return *m
	}
	return nil
}

// Fence is a barrier of the communicator's ranks (every rank calls it), so
// that the leader's writes before its Fence are visible to every rank
// after theirs: the barrier's atomic operations order the memory.
func (r *posixRegion) Fence() error {
	if r.mem.Load() == nil {
		return ErrReleased
	}
	return r.c.Barrier(context.Background())
}

// Release unmaps this rank's mapping; the memory is freed when the last
// rank's is gone.
func (r *posixRegion) Release() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.mem.Swap(nil)
	if m == nil {
		return ErrReleased
	}
	if len(*m) > 0 {
		_ = unix.Munmap(*m)
	}
	return nil
}

// localView is what SplitLocal returns: the same communicator, with a
// Close of its own that leaves the communicator open.
type localView struct {
	c      *Comm
	closed atomic.Bool
}

var _ comm.Communicator = (*localView)(nil)

func (v *localView) Rank() int { return v.c.rank }
func (v *localView) Size() int { return v.c.size }

// Provider returns the communicator's provider.
func (v *localView) Provider() Provider { return v.c.Provider() }

func (v *localView) Allgatherv(ctx context.Context, send, recv comm.View, counts, displs []int) error {
	if v.closed.Load() {
		return comm.ErrInvalidCommunicator
	}
	return v.c.Allgatherv(ctx, send, recv, counts, displs)
}

func (v *localView) Allreduce(ctx context.Context, send, recv comm.View, op comm.ReduceOp) error {
	if v.closed.Load() {
		return comm.ErrInvalidCommunicator
	}
	return v.c.Allreduce(ctx, send, recv, op)
}

func (v *localView) Broadcast(ctx context.Context, buf comm.View, root int) error {
	if v.closed.Load() {
		return comm.ErrInvalidCommunicator
	}
	return v.c.Broadcast(ctx, buf, root)
}

func (v *localView) Barrier(ctx context.Context) error {
	if v.closed.Load() {
		return comm.ErrInvalidCommunicator
	}
	return v.c.Barrier(ctx)
}

func (v *localView) Close() error {
	v.closed.Store(true)
	return nil
}
