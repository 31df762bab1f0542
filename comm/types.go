package comm

import (
	"fmt"
	"unsafe"
)

// DType identifies the element type of a View.
type DType uint8

// The element types a Communicator transfers. The zero DType is invalid so a
// forgotten field is caught by Validate.
const (
	Float64 DType = iota + 1
	Float32
	Int64
	Int32
	Uint64
	Uint32
	Uint8
)

// Size returns the size of one element in bytes, or 0 for an invalid DType.
func (d DType) Size() int {
	switch d {
	case Float64, Int64, Uint64:
		return 8
	case Float32, Int32, Uint32:
		return 4
	case Uint8:
		return 1
	}
	return 0
}

// IsInteger reports whether d is an integer type (BitwiseOr applies to it).
func (d DType) IsInteger() bool {
	switch d {
	case Int64, Int32, Uint64, Uint32, Uint8:
		return true
	}
	return false
}

// String returns the Go name of the element type.
func (d DType) String() string {
	switch d {
	case Float64:
		return "float64"
	case Float32:
		return "float32"
	case Int64:
		return "int64"
	case Int32:
		return "int32"
	case Uint64:
		return "uint64"
	case Uint32:
		return "uint32"
	case Uint8:
		return "uint8"
	}
	return fmt.Sprintf("DType(%d)", uint8(d))
}

// Elem is the set of element types the typed helpers accept.
type Elem interface {
	float64 | float32 | int64 | int32 | uint64 | uint32 | uint8
}

// DTypeOf returns the DType of T.
func DTypeOf[T Elem]() DType {
	var z T
	switch any(z).(type) {
	case float64:
		return Float64
	case float32:
		return Float32
	case int64:
		return Int64
	case int32:
		return Int32
	case uint64:
		return Uint64
	case uint32:
		return Uint32
	default: // uint8: the only member of Elem left
		return Uint8
	}
}

// View is an untyped window on a caller's buffer: the element type and the
// buffer's bytes in native byte order. A View does not own its memory; the
// backend reads or writes it only during the call it is passed to.
type View struct {
	Type  DType
	Bytes []byte
}

// ViewOf returns a View sharing s's memory (no copy).
func ViewOf[T Elem](s []T) View {
	var z T
	if len(s) == 0 {
		return View{Type: DTypeOf[T](), Bytes: []byte{}}
	}
	return View{Type: DTypeOf[T](), Bytes: unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(z)))}
}

// Len returns the number of elements in v (0 for an invalid DType).
func (v View) Len() int {
	if s := v.Type.Size(); s > 0 {
		return len(v.Bytes) / s
	}
	return 0
}

// validate checks that v has a known type and a whole number of elements.
func (v View) validate(op, name string) error {
	s := v.Type.Size()
	if s == 0 {
		return &InvalidArgumentError{Operation: op, Message: fmt.Sprintf("%s has invalid element type %v", name, v.Type)}
	}
	if len(v.Bytes)%s != 0 {
		return &InvalidArgumentError{Operation: op, Message: fmt.Sprintf("%s holds %d bytes, not a whole number of %v elements", name, len(v.Bytes), v.Type)}
	}
	return nil
}

// ReduceOp is an element-wise reduction operator. Its numeric value is the
// byte sent on the wire in AllreduceSend.
type ReduceOp uint8

// The reduction operators. Their values are fixed by the wire protocol.
const (
	Sum       ReduceOp = 0
	Min       ReduceOp = 1
	Max       ReduceOp = 2
	BitwiseOr ReduceOp = 3
)

// String returns the operator's name.
func (o ReduceOp) String() string {
	switch o {
	case Sum:
		return "sum"
	case Min:
		return "min"
	case Max:
		return "max"
	case BitwiseOr:
		return "bitwise-or"
	}
	return fmt.Sprintf("ReduceOp(%d)", uint8(o))
}

// Valid reports whether o is one of the four operators.
func (o ReduceOp) Valid() bool { return o <= BitwiseOr }
