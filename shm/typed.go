package shm

import (
	"fmt"
	"unsafe"

	"github.com/starcomm/starcomm/comm"
)

// TypedRegion is a Region of elements of type T. It is the spec's
// SharedRegion<T>. Get one from Create; the zero value is not usable. See
// the package doc for who may write when.
type TypedRegion[T comm.Elem] struct {
	r Region
}

// Create creates a region of count zeroed elements of type T with p. It is
// the typed form of Provider.CreateRegion and returns the same errors; a nil
// p gives a *comm.InvalidArgumentError. The caller owns the region and
// releases it.
func Create[T comm.Elem](p Provider, count int) (*TypedRegion[T], error) {
	if p == nil {
		return nil, &comm.InvalidArgumentError{Operation: OpCreateRegion, Message: "nil Provider"}
	}
	dt := comm.DTypeOf[T]()
	r, err := p.CreateRegion(dt, count)
	if err != nil {
		return nil, err
	}
	if err := checkRegion(r, dt, count); err != nil {
		_ = r.Release()
		return nil, err
	}
	return &TypedRegion[T]{r: r}, nil
}

// checkRegion guards Slice against a Provider that breaks its contract.
func checkRegion(r Region, dt comm.DType, count int) error {
	if r.DType() != dt {
		return fmt.Errorf("shm: %s: provider returned a %v region for %v elements", OpCreateRegion, r.DType(), dt)
	}
	b := r.Bytes()
	if r.Len() != count || len(b)%dt.Size() != 0 || len(b)/dt.Size() != count {
		return fmt.Errorf("shm: %s: provider returned %d elements in %d bytes for %d %v elements", OpCreateRegion, r.Len(), len(b), count, dt)
	}
	if len(b) > 0 && uintptr(unsafe.Pointer(&b[0]))%uintptr(dt.Size()) != 0 {
		return fmt.Errorf("shm: %s: provider returned memory not aligned for %v", OpCreateRegion, dt)
	}
	return nil
}

// Slice returns the region's elements: the region's memory itself, not a
// copy, so writes through it change the region. It returns an empty non-nil
// slice for an empty region and nil after Release. It serves both reading
// and writing: Go has no read-only slices.
func (t *TypedRegion[T]) Slice() []T {
	b := t.r.Bytes()
	if b == nil {
		return nil
	}
	if len(b) == 0 {
		return []T{}
	}
	var z T
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), len(b)/int(unsafe.Sizeof(z)))
}

// Len returns the number of elements, or 0 after Release.
func (t *TypedRegion[T]) Len() int { return t.r.Len() }

// Fence makes the leader's writes visible to every rank of the host; see
// Region.Fence. It returns ErrReleased after Release.
func (t *TypedRegion[T]) Fence() error { return t.r.Fence() }

// Release frees the region; see Region.Release. A second call returns
// ErrReleased.
func (t *TypedRegion[T]) Release() error { return t.r.Release() }

// Raw returns the untyped region underneath.
func (t *TypedRegion[T]) Raw() Region { return t.r }
