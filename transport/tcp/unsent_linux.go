package tcp

import (
	"fmt"
	"syscall"
	"unsafe"

	"github.com/starcomm/starcomm/transport"
)

var _ transport.UnsentCounter = (*Conn)(nil)

// siocoutqnsd is Linux's SIOCOUTQNSD: the bytes in a TCP socket's send
// queue not sent yet. (SIOCOUTQ would also count bytes sent but not yet
// acknowledged, which a peer that reads them but has nothing to send
// acknowledges only when its delayed-ACK timer fires, 40 ms and more.)
const siocoutqnsd = 0x894B

// Unsent implements transport.UnsentCounter with ioctl(SIOCOUTQNSD). The
// closure allocates; it is called only on a failing collective's way out.
func (c *Conn) Unsent() (int, error) {
	var n int32
	var errno syscall.Errno
	err := c.rc.Control(func(fd uintptr) {
		_, _, errno = syscall.Syscall(syscall.SYS_IOCTL, fd, siocoutqnsd, uintptr(unsafe.Pointer(&n)))
	})
	if err != nil {
		return 0, err
	}
	if errno != 0 {
		return 0, fmt.Errorf("tcp: ioctl SIOCOUTQNSD: %w", errno)
	}
	return int(n), nil
}

var _ transport.UnreadCounter = (*Conn)(nil)

// Unread implements transport.UnreadCounter with ioctl(FIONREAD) (SIOCINQ
// for a TCP socket): the bytes in the socket's receive queue that no read
// has taken yet. Bytes that arrived before the peer reset the connection
// are counted, as they are still read before the reset's error.
func (c *Conn) Unread() (int, error) {
	var n int32
	var errno syscall.Errno
	err := c.rc.Control(func(fd uintptr) {
		_, _, errno = syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCINQ, uintptr(unsafe.Pointer(&n)))
	})
	if err != nil {
		return 0, err
	}
	if errno != 0 {
		return 0, fmt.Errorf("tcp: ioctl FIONREAD: %w", errno)
	}
	return int(n), nil
}
