//go:build unix

package tcp

import "syscall"

// setBufferSizes sets SO_RCVBUF and SO_SNDBUF to n bytes.
func setBufferSizes(rc syscall.RawConn, n int) error {
	if err := rawSetsockopt(rc, "SO_RCVBUF", func(fd uintptr) error {
		return syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, n)
	}); err != nil {
		return err
	}
	return rawSetsockopt(rc, "SO_SNDBUF", func(fd uintptr) error {
		return syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, n)
	})
}
