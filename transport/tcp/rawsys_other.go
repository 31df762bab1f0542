//go:build unix && !linux

package tcp

import "syscall"

// sysRead is read(2) on a non-blocking socket.
func sysRead(fd int, p []byte) (int, syscall.Errno) { return errno(syscall.Read(fd, p)) }

// sysWrite is write(2) on a non-blocking socket.
func sysWrite(fd int, p []byte) (int, syscall.Errno) { return errno(syscall.Write(fd, p)) }

// errno returns a system call's result with its error as an Errno.
func errno(n int, err error) (int, syscall.Errno) {
	if err == nil {
		return n, 0
	}
	if e, ok := err.(syscall.Errno); ok {
		return n, e
	}
	return n, syscall.EIO
}
