package tcp

import (
	"syscall"
	"time"
)

// tcpUserTimeout is TCP_USER_TIMEOUT from <netinet/tcp.h> (Linux 2.6.37+),
// which package syscall does not define.
const tcpUserTimeout = 0x12

// setUserTimeout sets TCP_USER_TIMEOUT: how long sent data may stay
// unacknowledged before the kernel drops the connection with ETIMEDOUT.
func setUserTimeout(rc syscall.RawConn, d time.Duration) error {
	ms := int(d / time.Millisecond)
	return rawSetsockopt(rc, "TCP_USER_TIMEOUT", func(fd uintptr) error {
		return syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpUserTimeout, ms)
	})
}
