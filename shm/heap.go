package shm

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/starcomm/starcomm/comm"
)

// Config holds the settings of the heap-fallback provider.
type Config struct {
	// MaxRegionBytes caps the size of one region in bytes: CreateRegion
	// refuses a larger one with a *comm.AllocationFailedError. 0 means no
	// cap beyond the limits checked automatically (see the package doc).
	MaxRegionBytes int
}

// DefaultConfig returns the default settings: no explicit cap.
func DefaultConfig() Config { return Config{} }

// Validate reports the first setting that is out of range, naming it.
func (c Config) Validate() error {
	if c.MaxRegionBytes < 0 {
		return fmt.Errorf("shm: Config.MaxRegionBytes = %d is negative; want 0 (no cap) or a positive number of bytes", c.MaxRegionBytes)
	}
	return nil
}

// HeapFallback returns the heap-fallback provider for c with the default
// settings: every rank is a leader and allocates its own zeroed copy of
// every region on the Go heap, SplitLocal returns a single-rank communicator
// and Fence does nothing. See the package doc. It works for any
// communicator (local or star backend): c is taken for symmetry with true
// shared memory, which needs it to find the ranks of a host; the heap
// fallback never uses it, so c may even be nil.
func HeapFallback(c comm.Communicator) Provider {
	return &heapProvider{}
}

// NewHeapFallback is HeapFallback with settings. It returns cfg.Validate's
// error if cfg is invalid.
func NewHeapFallback(c comm.Communicator, cfg Config) (Provider, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &heapProvider{cfg: cfg}, nil
}

// heapProvider is the heap fallback. It holds no mutable state, so it is
// safe for concurrent use.
type heapProvider struct {
	cfg Config
}

var _ Provider = (*heapProvider)(nil)

func (p *heapProvider) Kind() string { return KindHeap }

func (p *heapProvider) IsLeader() bool { return true }

func (p *heapProvider) SplitLocal() (comm.Communicator, error) { return comm.NewLocal(), nil }

func (p *heapProvider) CreateRegion(dt comm.DType, count int) (Region, error) {
	n, err := regionBytes(dt, count, p.cfg)
	if err != nil {
		return nil, err
	}
	b, err := allocAligned(n)
	if err != nil {
		return nil, err
	}
	r := &heapRegion{dt: dt}
	r.mem.Store(&heapMem{b: b, n: count})
	return r, nil
}

// allocAligned returns n zeroed bytes aligned to 8 (enough for every
// comm.DType): the memory of a []uint64 viewed as bytes. n has passed
// regionBytes, so the allocation is within Go's limits; the recover is a
// last guard should a platform's limit be lower than maxAlloc.
func allocAligned(n int) (b []byte, err error) {
	if n == 0 {
		return []byte{}, nil
	}
	defer func() {
		if v := recover(); v != nil {
			b, err = nil, &comm.AllocationFailedError{RequestedBytes: n, Message: fmt.Sprint(v)}
		}
	}()
	words := n / 8
	if n%8 != 0 {
		words++
	}
	w := make([]uint64, words)
	return unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), n), nil
}

// heapMem is a live region's memory. The bytes keep the []uint64 they view
// alive.
type heapMem struct {
	b []byte
	n int // elements
}

// heapRegion is a Region on the Go heap. mem is nil once released; the
// atomic pointer makes Release safe against any concurrent call.
type heapRegion struct {
	dt  comm.DType
	mem atomic.Pointer[heapMem]
}

var _ Region = (*heapRegion)(nil)

func (r *heapRegion) DType() comm.DType { return r.dt }

func (r *heapRegion) Len() int {
	if m := r.mem.Load(); m != nil {
		return m.n
	}
	return 0
}

func (r *heapRegion) Bytes() []byte {
	if m := r.mem.Load(); m != nil {
		return m.b
	}
	return nil
}

func (r *heapRegion) Fence() error {
	if r.mem.Load() == nil {
		return ErrReleased
	}
	return nil
}

func (r *heapRegion) Release() error {
	if r.mem.Swap(nil) == nil {
		return ErrReleased
	}
	return nil
}
