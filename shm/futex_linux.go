package shm

import (
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Futex operations (linux/futex.h): shared, not FUTEX_PRIVATE_FLAG.
const (
	futexOpWait = 0
	futexOpWake = 1
)

// futexWait sleeps while *addr == val, at most d (d > 0), or until a
// futexWake on the same word of the same file (the futex is not private:
// the word is in a MAP_SHARED mapping that several processes, or several
// mappings of one process, share). Spurious returns are fine: callers
// re-check their condition.
func futexWait(addr *uint32, val uint32, d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexOpWait, uintptr(val),
		uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// futexWake wakes up to n sleepers on addr.
func futexWake(addr *uint32, n int) {
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexOpWake, uintptr(n), 0, 0, 0)
}

// schedYield gives the CPU to another runnable thread, if any, without
// parking the goroutine (ranks of one host often outnumber its cores).
func schedYield() {
	_, _, _ = unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
}
