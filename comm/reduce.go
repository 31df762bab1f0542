package comm

import (
	"fmt"
	"unsafe"
)

// Reduce applies acc[i] = op(acc[i], in[i]) element-wise, treating both byte
// slices as elements of type dt in native byte order. Both must hold the same
// whole number of aligned elements (as checked by CheckAllreduce). Backends
// call it once per rank, in rank order, which makes float results
// deterministic. It panics only on programming errors, which
// CheckAllreduce rules out: an unknown dt or op, or acc and in of
// different lengths or not a whole number of elements (a message naming
// the lengths, never a slice bounds panic or a silent partial reduce).
func Reduce(dt DType, op ReduceOp, acc, in []byte) {
	if n := dt.Size(); len(acc) != len(in) || (n > 0 && len(acc)%n != 0) {
		panic(fmt.Sprintf("comm.Reduce: acc has %d bytes and in %d: want the same whole number of %v elements", len(acc), len(in), dt))
	}
	if len(acc) == 0 {
		return
	}
	switch dt {
	case Float64:
		reduceFloat(op, cast[float64](acc), cast[float64](in))
	case Float32:
		reduceFloat(op, cast[float32](acc), cast[float32](in))
	case Int64:
		reduceInt(op, cast[int64](acc), cast[int64](in))
	case Int32:
		reduceInt(op, cast[int32](acc), cast[int32](in))
	case Uint64:
		reduceInt(op, cast[uint64](acc), cast[uint64](in))
	case Uint32:
		reduceInt(op, cast[uint32](acc), cast[uint32](in))
	case Uint8:
		reduceInt(op, acc, in)
	default:
		panic("comm.Reduce: invalid element type " + dt.String())
	}
}

func cast[T Elem](b []byte) []T {
	var z T
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), len(b)/int(unsafe.Sizeof(z)))
}

func reduceFloat[T float64 | float32](op ReduceOp, acc, in []T) {
	in = in[:len(acc)]
	switch op {
	case Sum:
		for i := range acc {
			acc[i] += in[i]
		}
	case Min:
		for i := range acc {
			acc[i] = min(acc[i], in[i])
		}
	case Max:
		for i := range acc {
			acc[i] = max(acc[i], in[i])
		}
	default:
		panic("comm.Reduce: operator " + op.String() + " is not defined for floats")
	}
}

func reduceInt[T int64 | int32 | uint64 | uint32 | uint8](op ReduceOp, acc, in []T) {
	in = in[:len(acc)]
	switch op {
	case Sum:
		for i := range acc {
			acc[i] += in[i]
		}
	case Min:
		for i := range acc {
			acc[i] = min(acc[i], in[i])
		}
	case Max:
		for i := range acc {
			acc[i] = max(acc[i], in[i])
		}
	case BitwiseOr:
		for i := range acc {
			acc[i] |= in[i]
		}
	default:
		panic("comm.Reduce: invalid operator " + op.String())
	}
}
