//go:build unix

package tcp

import (
	"io"
	"net"
	"os"
	"syscall"
)

// ReadNow implements transport.Poller: it reads into p what the socket
// already holds, without waiting, with one read(2) on the non-blocking
// socket. It returns 0 and a nil error when nothing has arrived, io.EOF
// after the peer's orderly close, and otherwise the errors Read would give
// (a passed read deadline or Close included). Steady-state calls do not
// allocate.
func (c *Conn) ReadNow(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	c.rp = p
	err := c.rc.Read(c.readStep)
	n, errno := c.rn, c.rerr
	c.rp = nil
	switch {
	case err != nil:
		return 0, err
	case errno == syscall.EAGAIN || errno == syscall.EWOULDBLOCK:
		return 0, nil
	case errno != nil:
		return 0, c.opError("read", errno)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// WriteNow implements transport.Poller: it writes as much of p as the
// socket's send buffer takes now, with one write(2), and returns how much
// that was (0 when the buffer is full). Errors are those Write would give.
// Steady-state calls do not allocate.
func (c *Conn) WriteNow(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.pwmu.Lock()
	defer c.pwmu.Unlock()
	c.wp = p
	err := c.rc.Write(c.writeStep)
	n, errno := c.wn, c.werr
	c.wp = nil
	switch {
	case err != nil:
		return 0, err
	case errno == syscall.EAGAIN || errno == syscall.EWOULDBLOCK:
		return 0, nil
	case errno != nil:
		return 0, c.opError("write", errno)
	}
	return n, nil
}

// readOnce is what ReadNow hands to RawConn.Read: one read, never parking.
func (c *Conn) readOnce(fd uintptr) bool {
	for {
		n, err := syscall.Read(int(fd), c.rp)
		if err == syscall.EINTR {
			continue
		}
		c.rn, c.rerr = max(n, 0), err
		return true
	}
}

// writeOnce is what WriteNow hands to RawConn.Write: one write, never
// parking.
func (c *Conn) writeOnce(fd uintptr) bool {
	for {
		n, err := syscall.Write(int(fd), c.wp)
		if err == syscall.EINTR {
			continue
		}
		c.wn, c.werr = max(n, 0), err
		return true
	}
}

// opError wraps a system call's error as *net.TCPConn's methods do, so
// errors.Is finds syscall.ECONNRESET, syscall.EPIPE and the rest.
func (c *Conn) opError(op string, errno error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError(op, errno)}
}
