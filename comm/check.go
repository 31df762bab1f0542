package comm

import (
	"fmt"
	"math"
	"unsafe"
)

// Operation names used in errors.
const (
	OpAllgatherv = "allgatherv"
	OpAllreduce  = "allreduce"
	OpBroadcast  = "broadcast"
	OpBarrier    = "barrier"
)

func checkView(op, name string, v View) error {
	if err := v.validate(op, name); err != nil {
		return err
	}
	if s := v.Type.Size(); s > 1 && len(v.Bytes) > 0 && uintptr(unsafe.Pointer(&v.Bytes[0]))%uintptr(s) != 0 {
		return &InvalidArgumentError{Operation: op, Message: fmt.Sprintf("%s is not aligned to its %v elements", name, v.Type)}
	}
	return nil
}

// span returns the addresses of b's first byte and one past its last.
func span(b []byte) (lo, hi uintptr) {
	if len(b) == 0 {
		return 0, 0
	}
	lo = uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return lo, lo + uintptr(len(b))
}

// overlaps reports whether a and b share memory (empty ones never do).
func overlaps(a, b []byte) bool {
	alo, ahi := span(a)
	blo, bhi := span(b)
	return len(a) > 0 && len(b) > 0 && alo < bhi && blo < ahi
}

// sameMemory reports whether a and b are the same bytes: same start, same
// length.
func sameMemory(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || unsafe.SliceData(a) == unsafe.SliceData(b))
}

// CheckAllgatherv validates the arguments of an Allgatherv call on rank of a
// communicator of the given size, as every backend must before sending
// anything. It returns the total number of elements, sum(counts).
//
// The first problem found is reported, naming the index and value at
// fault: the views, then the lengths of counts and displs and the rank,
// then a negative count or displacement (an *InvalidArgumentError), then
// the length of send (an *InvalidBufferSizeError), then each region: one
// whose end, displs[r]+counts[r], does not fit an int is an
// *InvalidArgumentError, one that ends beyond recv an
// *InvalidBufferSizeError; then overlapping regions; then a send that
// shares memory with recv other than as this rank's own region (in place:
// send is exactly recv's region of rank), an *InvalidArgumentError.
func CheckAllgatherv(rank, size int, send, recv View, counts, displs []int) (int, error) {
	const op = OpAllgatherv
	if err := checkView(op, "send", send); err != nil {
		return 0, err
	}
	if err := checkView(op, "recv", recv); err != nil {
		return 0, err
	}
	if send.Type != recv.Type {
		return 0, &InvalidArgumentError{Operation: op, Message: fmt.Sprintf("send is %v but recv is %v", send.Type, recv.Type)}
	}
	if len(counts) != size {
		return 0, &InvalidBufferSizeError{Operation: op, Expected: size, Actual: len(counts), Detail: "len(counts) must equal the communicator size"}
	}
	if len(displs) != size {
		return 0, &InvalidBufferSizeError{Operation: op, Expected: size, Actual: len(displs), Detail: "len(displs) must equal the communicator size"}
	}
	if rank < 0 || rank >= size {
		return 0, &InvalidArgumentError{Operation: op, Message: fmt.Sprintf("rank %d outside 0..%d", rank, size-1)}
	}
	// Negative counts and displacements first: every later check reads
	// them as lengths and offsets.
	for r := 0; r < size; r++ {
		if c := counts[r]; c < 0 {
			return 0, &InvalidArgumentError{Operation: op, Message: fmt.Sprintf("counts[%d] = %d is negative", r, c)}
		}
		if d := displs[r]; d < 0 {
			return 0, &InvalidArgumentError{Operation: op, Message: fmt.Sprintf("displs[%d] = %d is negative", r, d)}
		}
	}
	if send.Len() != counts[rank] {
		return 0, &InvalidBufferSizeError{Operation: op, Expected: counts[rank], Actual: send.Len(), Detail: fmt.Sprintf("len(send) must equal counts[%d]", rank)}
	}
	total := 0
	sorted := true
	prevEnd := 0
	n := recv.Len()
	for r := 0; r < size; r++ {
		c, d := counts[r], displs[r]
		if c > math.MaxInt-d {
			// d + c overflows: no recv can hold the region.
			return 0, &InvalidArgumentError{Operation: op, Message: fmt.Sprintf("rank %d's region in recv, displs[%d] = %d plus counts[%d] = %d, ends beyond the largest int", r, r, d, r, c)}
		}
		if d+c > n {
			return 0, &InvalidBufferSizeError{Operation: op, Expected: d + c, Actual: n, Detail: fmt.Sprintf("recv too small for rank %d's region, displs[%d] = %d plus counts[%d] = %d", r, r, d, r, c)}
		}
		total += c
		if c > 0 {
			if d < prevEnd {
				sorted = false
			}
			prevEnd = d + c
		}
	}
	if !sorted {
		// Regions are not in increasing order: compare every pair.
		for a := 0; a < size; a++ {
			for b := a + 1; b < size; b++ {
				if counts[a] == 0 || counts[b] == 0 {
					continue
				}
				if displs[a] < displs[b]+counts[b] && displs[b] < displs[a]+counts[a] {
					return 0, &InvalidArgumentError{Operation: op, Message: fmt.Sprintf("recv regions of rank %d [%d, %d) and rank %d [%d, %d) overlap",
						a, displs[a], displs[a]+counts[a], b, displs[b], displs[b]+counts[b])}
				}
			}
		}
	}
	if overlaps(send.Bytes, recv.Bytes) {
		es := recv.Type.Size()
		own := recv.Bytes[displs[rank]*es : (displs[rank]+counts[rank])*es]
		if !sameMemory(send.Bytes, own) {
			return 0, &InvalidArgumentError{Operation: op, Message: fmt.Sprintf("send shares memory with recv but is not rank %d's own region of it, recv[%d:%d] (in place, send must be exactly that region; otherwise give separate buffers)",
				rank, displs[rank], displs[rank]+counts[rank])}
		}
	}
	return total, nil
}

// CheckAllreduce validates the arguments of an Allreduce call: send and
// recv have the same element type and the same length, at least 1, the
// operator is defined for that type, and they are either the same memory
// (in place) or do not overlap.
func CheckAllreduce(send, recv View, op ReduceOp) error {
	const name = OpAllreduce
	if err := checkView(name, "send", send); err != nil {
		return err
	}
	if err := checkView(name, "recv", recv); err != nil {
		return err
	}
	if send.Type != recv.Type {
		return &InvalidArgumentError{Operation: name, Message: fmt.Sprintf("send is %v but recv is %v", send.Type, recv.Type)}
	}
	if !op.Valid() {
		return &InvalidArgumentError{Operation: name, Message: fmt.Sprintf("unknown reduction operator %v", op)}
	}
	if op == BitwiseOr && !send.Type.IsInteger() {
		return &InvalidArgumentError{Operation: name, Message: fmt.Sprintf("bitwise-or is defined for integer types only, not %v", send.Type)}
	}
	if send.Len() != recv.Len() {
		return &InvalidBufferSizeError{Operation: name, Expected: send.Len(), Actual: recv.Len(), Detail: "len(recv) must equal len(send)"}
	}
	if send.Len() == 0 {
		return &InvalidBufferSizeError{Operation: name, Expected: 1, Actual: 0, Detail: "send and recv must not be empty"}
	}
	if overlaps(send.Bytes, recv.Bytes) && !sameMemory(send.Bytes, recv.Bytes) {
		return &InvalidArgumentError{Operation: name, Message: "send and recv overlap without being the same buffer (in place, pass the same slice as both; otherwise give separate buffers)"}
	}
	return nil
}

// CheckBroadcast validates the arguments of a Broadcast call.
func CheckBroadcast(buf View, root, size int) error {
	if err := checkView(OpBroadcast, "buf", buf); err != nil {
		return err
	}
	if root < 0 || root >= size {
		return &InvalidRootError{Root: root, Size: size}
	}
	return nil
}
