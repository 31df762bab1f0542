package tcp

import (
	"fmt"
	"syscall"
	"unsafe"

	"github.com/starcomm/starcomm/transport"
)

var _ transport.UnsentCounter = (*Conn)(nil)

// siocoutq is Linux's SIOCOUTQ (the same number as TIOCOUTQ): the bytes in
// a TCP socket's send queue, sent or not, that the peer has not
// acknowledged.
const siocoutq = 0x5411

// Unsent implements transport.UnsentCounter with ioctl(SIOCOUTQ). The
// closure allocates; it is called only on a failing collective's way out.
func (c *Conn) Unsent() (int, error) {
	var n int32
	var errno syscall.Errno
	err := c.rc.Control(func(fd uintptr) {
		_, _, errno = syscall.Syscall(syscall.SYS_IOCTL, fd, siocoutq, uintptr(unsafe.Pointer(&n)))
	})
	if err != nil {
		return 0, err
	}
	if errno != 0 {
		return 0, fmt.Errorf("tcp: ioctl SIOCOUTQ: %w", errno)
	}
	return int(n), nil
}
