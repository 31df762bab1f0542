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
	if c.closed {
		c.rmu.Unlock()
		return 0, c.opError("read", net.ErrClosed)
	}
	if c.rdl.passed.Load() {
		c.rmu.Unlock()
		return 0, c.opError("read", os.ErrDeadlineExceeded)
	}
	n, errno := once(sysRead, c.fd, p)
	c.rmu.Unlock()
	if errno == 0 && n == 0 {
		return 0, io.EOF // read(2) returned 0: the peer closed
	}
	return c.nowResult("read", n, errno)
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
	if c.closed {
		c.pwmu.Unlock()
		return 0, c.opError("write", net.ErrClosed)
	}
	if c.wdl.passed.Load() {
		c.pwmu.Unlock()
		return 0, c.opError("write", os.ErrDeadlineExceeded)
	}
	n, errno := once(sysWrite, c.fd, p)
	c.pwmu.Unlock()
	return c.nowResult("write", n, errno)
}

// nowResult turns the outcome of one non-blocking system call into
// ReadNow's and WriteNow's results: EAGAIN as 0 bytes and no error, another
// errno wrapped as *net.TCPConn's methods wrap it.
func (c *Conn) nowResult(op string, n int, errno syscall.Errno) (int, error) {
	switch {
	case errno == syscall.EAGAIN || errno == syscall.EWOULDBLOCK:
		return 0, nil
	case errno != 0:
		return 0, c.opError(op, os.NewSyscallError(op, errno))
	}
	return n, nil
}

// once makes one read(2) or write(2), again if a signal interrupted it.
func once(sys func(int, []byte) (int, syscall.Errno), fd uintptr, p []byte) (int, syscall.Errno) {
	for {
		n, errno := sys(int(fd), p)
		if errno != syscall.EINTR {
			return max(n, 0), errno
		}
	}
}

// opError wraps err as *net.TCPConn's methods do, so errors.Is finds
// syscall.ECONNRESET, syscall.EPIPE, os.ErrDeadlineExceeded, net.ErrClosed
// and the rest, and a deadline's error is a net.Error whose Timeout is
// true.
func (c *Conn) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}

// CanPoll reports whether ReadNow and WriteNow really poll the socket on
// this system. Where they do not (outside Unix), they report that nothing
// has arrived and nothing went, and a poller should not poll at all.
const CanPoll = true
