package tcp

import (
	"syscall"
	"unsafe"
)

// sysRead is read(2) on a non-blocking socket, made as a raw system call:
// it never blocks, so telling the Go scheduler about it
// (entersyscall/exitsyscall) costs more than the call can save.
func sysRead(fd int, p []byte) (int, syscall.Errno) {
	r, _, e := syscall.RawSyscall(syscall.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
	if e != 0 {
		return -1, e
	}
	return int(r), 0
}

// sysWrite is write(2) on a non-blocking socket, made as a raw system call
// (see sysRead).
func sysWrite(fd int, p []byte) (int, syscall.Errno) {
	r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
	if e != 0 {
		return -1, e
	}
	return int(r), 0
}
