//go:build unix

package tcp

import (
	"io"
	"net"
	"os"
	"sync"
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
	n, errno, err := c.nowCall(&c.rmu, &c.rdl, "read", sysRead, p)
	if err != nil {
		return 0, err
	}
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
	n, errno, err := c.nowCall(&c.pwmu, &c.wdl, "write", sysWrite, p)
	if err != nil {
		return 0, err
	}
	return c.nowResult("write", n, errno)
}

// nowCall makes one non-blocking system call sys (read(2) or write(2)) on
// the socket for ReadNow or WriteNow, under mu (rmu or pwmu), unless the
// Conn is closed or deadline dl (rdl or wdl) has passed: then it returns
// the error Read or Write would give.
func (c *Conn) nowCall(mu *sync.Mutex, dl *nowDeadline, op string, sys func(int, []byte) (int, syscall.Errno), p []byte) (int, syscall.Errno, error) {
	mu.Lock()
	defer mu.Unlock()
	switch {
	case c.closed:
		return 0, 0, c.opError(op, net.ErrClosed)
	case dl.passed.Load():
		return 0, 0, c.opError(op, os.ErrDeadlineExceeded)
	}
	n, errno := once(sys, c.fd, p)
	return n, errno, nil
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
