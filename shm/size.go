package shm

import (
	"fmt"
	"math"
	"math/bits"
	"runtime/debug"
	"strconv"

	"github.com/starcomm/starcomm/comm"
)

// maxAlloc is the largest allocation the Go runtime accepts on 64-bit
// platforms (1<<48 bytes on linux/amd64 and arm64); on 32-bit platforms the
// int overflow check comes first.
var maxAlloc uint64 = func() uint64 {
	if strconv.IntSize == 64 {
		return 1 << 48
	}
	return math.MaxInt32
}()

// regionBytes validates a CreateRegion request and returns its size in
// bytes. The checks come before any allocation: Go treats an allocation the
// system refuses as a fatal error, not a panic.
func regionBytes(dt comm.DType, count int, cfg Config) (int, error) {
	es := dt.Size()
	if es == 0 {
		return 0, &comm.InvalidArgumentError{Operation: OpCreateRegion, Message: fmt.Sprintf("invalid element type %v", dt)}
	}
	if count < 0 {
		return 0, &comm.InvalidArgumentError{Operation: OpCreateRegion, Message: fmt.Sprintf("count %d is negative", count)}
	}
	hi, lo := bits.Mul64(uint64(count), uint64(es))
	if hi != 0 || lo > math.MaxInt {
		return 0, &comm.AllocationFailedError{RequestedBytes: math.MaxInt,
			Message: fmt.Sprintf("%d %v elements of %d bytes overflow int", count, dt, es)}
	}
	n := int(lo)
	fail := func(format string, args ...any) error {
		return &comm.AllocationFailedError{RequestedBytes: n,
			Message: fmt.Sprintf("%d %v elements ", count, dt) + fmt.Sprintf(format, args...)}
	}
	if cfg.MaxRegionBytes > 0 && n > cfg.MaxRegionBytes {
		return 0, fail("exceed Config.MaxRegionBytes (%d bytes)", cfg.MaxRegionBytes)
	}
	if lim := debug.SetMemoryLimit(-1); lim < math.MaxInt64 && uint64(n) > uint64(lim) {
		return 0, fail("exceed the Go memory limit (GOMEMLIMIT, %d bytes)", lim)
	}
	if host, ok := hostMemory(); ok && uint64(n) > host {
		return 0, fail("exceed the host's RAM plus swap (%d bytes)", host)
	}
	if uint64(n) > maxAlloc {
		return 0, fail("exceed the largest allocation Go can make (%d bytes)", maxAlloc)
	}
	return n, nil
}
