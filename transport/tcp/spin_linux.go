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
	c.rmu.Lock()
	defer c.rmu.Unlock()
	c.sp, c.sn, c.serr, c.spEnd = p, 0, nil, time.Time{}
	err := c.rc.Read(c.poll)
	n, rerr := c.sn, c.serr
	c.sp = nil
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

// pollStep is the function spinRead hands to RawConn.Read: read; on EAGAIN
// yield and retry until the spin time is over, then report false to park.
func (c *Conn) pollStep(fd uintptr) bool {
	for {
		k, e := syscall.Read(int(fd), c.sp)
		switch {
		case e == syscall.EINTR:
			continue
		case e == syscall.EAGAIN:
			if c.spEnd.IsZero() {
				c.spEnd = time.Now().Add(c.spin)
			} else if time.Now().After(c.spEnd) {
				return false // park until readable
			}
			syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
			continue
		}
		c.sn, c.serr = max(k, 0), e
		return true
	}
}
