//go:build unix

package tcp

import "syscall"

// setBufferSizes sets SO_RCVBUF to recv and SO_SNDBUF to send bytes, each
// only when above 0 (see bufferSizes).
func setBufferSizes(rc syscall.RawConn, recv, send int) error {
	if recv > 0 {
		if err := rawSetsockopt(rc, "SO_RCVBUF", func(fd uintptr) error {
			return syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, recv)
		}); err != nil {
			return err
		}
	}
	if send <= 0 {
		return nil
	}
	return rawSetsockopt(rc, "SO_SNDBUF", func(fd uintptr) error {
		return syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, send)
	})
}
