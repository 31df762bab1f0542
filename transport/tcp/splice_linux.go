package tcp

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"

	"github.com/starcomm/starcomm/transport"
)

var _ transport.SpliceWriter = (*Conn)(nil)

// spliceMax is the most WriteSpliced takes: a write of at most PIPE_BUF
// bytes to an empty pipe goes in whole.
const spliceMax = 4096

// The flags of splice(2): do not wait on the pipe, and hold the bytes for
// the data that follows (MSG_MORE), so that a header spliced alone does
// not leave as a segment of its own and wake the reader once for it.
const (
	spliceNonblock = 0x2
	spliceMore     = 0x4
)

// WriteSpliced implements transport.SpliceWriter: it writes p into a pipe
// of the Conn's (made on first use) and moves it into the socket with
// splice(2), so that p becomes a page fragment of its own instead of
// bytes of the calling thread's fragment. The write deadline applies, and
// errors are wrapped as Write's are. If no pipe can be made, it writes
// nothing and returns an error wrapping errors.ErrUnsupported, as it does
// when splice(2) refuses the socket outright (ENOSYS, EINVAL, EOPNOTSUPP,
// EPERM) before a byte went. After any
// other failure the pipe is closed (a part of p left in it must never go
// out ahead of a later write) and the next call makes a new one.
// Steady-state calls do not allocate.
func (c *Conn) WriteSpliced(p []byte) error {
	if len(p) == 0 {
		return nil
	}
	if len(p) > spliceMax {
		return fmt.Errorf("tcp: WriteSpliced of %d bytes: at most %d", len(p), spliceMax)
	}
	c.smu.Lock()
	defer c.smu.Unlock()
	if c.pipeClosed {
		return c.opError("splice", net.ErrClosed)
	}
	if !c.hasPipe {
		if err := syscall.Pipe2(c.pipe[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
			return fmt.Errorf("tcp: a pipe for splice(2): %w (%w)", err, errors.ErrUnsupported)
		}
		c.hasPipe = true
	}
	if n, errno := once(sysWrite, uintptr(c.pipe[1]), p); errno != 0 || n != len(p) {
		c.dropPipe()
		var cause error = errno
		if errno == 0 {
			cause = fmt.Errorf("%d of %d bytes went in", n, len(p))
		}
		return fmt.Errorf("tcp: writing into the splice pipe: %w (%w)", cause, errors.ErrUnsupported)
	}
	c.spLeft, c.spErr = len(p), 0
	err := c.rc.Write(c.spliceStep)
	if err == nil && c.spErr != 0 {
		if c.spLeft == len(p) && cannotSplice(c.spErr) {
			// Nothing reached the socket, and this system will not splice
			// into it: say so, so the caller writes p as usual.
			c.dropPipe()
			return fmt.Errorf("tcp: splice(2) into the socket: %w (%w)", c.spErr, errors.ErrUnsupported)
		}
		err = c.opError("splice", os.NewSyscallError("splice", c.spErr))
	}
	if err != nil || c.spLeft > 0 {
		c.dropPipe()
	}
	return err
}

// spliceOnce is what WriteSpliced hands to RawConn.Write: splice what is in
// the pipe into the socket, and park (return false) when the socket's
// buffer is full.
func (c *Conn) spliceOnce(fd uintptr) bool {
	for c.spLeft > 0 {
		n, err := syscall.Splice(c.pipe[0], nil, int(fd), nil, c.spLeft, spliceNonblock|spliceMore)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			return false
		case err != nil:
			c.spErr, _ = err.(syscall.Errno)
			if c.spErr == 0 {
				c.spErr = syscall.EIO
			}
			return true
		case n <= 0:
			c.spErr = syscall.EIO // a pipe holding bytes gave none
			return true
		}
		c.spLeft -= int(n)
	}
	return true
}

// cannotSplice reports whether errno from splice(2) means that it cannot
// splice into this socket at all (an old or restricted kernel, a seccomp
// filter), rather than that the connection failed.
func cannotSplice(errno syscall.Errno) bool {
	switch errno {
	case syscall.ENOSYS, syscall.EINVAL, syscall.EOPNOTSUPP, syscall.EPERM:
		return true
	}
	return false
}

// dropPipe closes the pipe, if any (under smu).
func (c *Conn) dropPipe() {
	if c.hasPipe {
		syscall.Close(c.pipe[0])
		syscall.Close(c.pipe[1])
		c.hasPipe = false
	}
}
