package tcp

import (
	"io"
	"net"
	"os"
	"syscall"
	"time"
)

// spinRead is Read with polling: it reads the socket directly, and while it
// finds nothing it yields the CPU (sched_yield) and tries again, for up to
// c.spin; then it parks in the network poller until the socket is readable
// or a deadline passes. Deadlines and Close keep their meaning: the poller
// checks them before the first poll and whenever it parks.
func (c *Conn) spinRead(p []byte) (int, error) {
	var (
		n    int
		rerr error
		end  time.Time
	)
	err := c.rc.Read(func(fd uintptr) bool {
		for {
			k, e := syscall.Read(int(fd), p)
			switch {
			case e == syscall.EINTR:
				continue
			case e == syscall.EAGAIN:
				if end.IsZero() {
					end = time.Now().Add(c.spin)
				} else if time.Now().After(end) {
					return false // park until readable
				}
				syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
				continue
			}
			n, rerr = k, e
			if n < 0 {
				n = 0
			}
			return true
		}
	})
	if err == nil && rerr != nil {
		err = os.NewSyscallError("read", rerr)
	}
	if err != nil {
		return n, &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
	}
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}
