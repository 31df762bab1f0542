package shm

import (
	"math"
	"math/bits"
	"syscall"
)

// hostMemory returns the host's total RAM plus swap in bytes, as sysinfo(2)
// reports it (cgroup limits are not consulted).
func hostMemory() (uint64, bool) {
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil {
		return 0, false
	}
	unit := uint64(si.Unit)
	if unit == 0 {
		unit = 1
	}
	total, carry := bits.Add64(uint64(si.Totalram), uint64(si.Totalswap), 0)
	if carry != 0 {
		return math.MaxUint64, true
	}
	hi, lo := bits.Mul64(total, unit)
	if hi != 0 {
		return math.MaxUint64, true
	}
	return lo, true
}
