package tcp

import (
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/starcomm/starcomm/transport"
)

// Conn is an established TCP connection with the Config's socket options
// applied. Listener.Accept and Dialer.Dial return one as a transport.Conn;
// a type assertion to *Conn reaches the *net.TCPConn methods.
//
// Read, Write and the deadline methods are those of the embedded
// *net.TCPConn, and so are their errors, unchanged: a deadline gives an error
// satisfying errors.Is(err, os.ErrDeadlineExceeded), a reset one satisfying
// errors.Is(err, syscall.ECONNRESET), an orderly close by the peer io.EOF,
// and use after Close one satisfying errors.Is(err, net.ErrClosed).
type Conn struct {
	*net.TCPConn

	// spin is how long Read polls the socket before parking (SpinRead);
	// rc, poll and the sp* fields serve spinRead without allocating (rmu
	// serialises spinning Reads, which share them).
	spin  time.Duration
	rc    syscall.RawConn
	poll  func(fd uintptr) bool
	rmu   sync.Mutex
	sp    []byte
	sn    int
	serr  error
	spEnd time.Time

	// wmu serialises WriteBuffers, which reuses scratch and bufs.
	wmu sync.Mutex
	// scratch keeps the backing array of bufs between calls.
	scratch [][]byte
	// bufs is what net.Buffers.WriteTo consumes; as a field it needs no
	// allocation per call.
	bufs net.Buffers
}

var (
	_ transport.Conn          = (*Conn)(nil)
	_ transport.BuffersWriter = (*Conn)(nil)
	_ transport.CloseWriter   = (*Conn)(nil)
)

// newConn applies cfg's per-connection options to tc and wraps it.
func newConn(tc *net.TCPConn, cfg Config) (*Conn, error) {
	if err := configure(tc, cfg); err != nil {
		return nil, err
	}
	c := &Conn{TCPConn: tc, spin: cfg.SpinRead}
	if c.spin > 0 {
		rc, err := tc.SyscallConn()
		if err != nil {
			return nil, err
		}
		c.rc = rc
		c.poll = c.pollStep
	}
	return c, nil
}

// Read reads into p. With Config.SpinRead set, a Read that finds no data
// polls the socket for up to that long, yielding the CPU between polls,
// before it parks in the runtime's network poller: a small message then
// costs no scheduler wake-up, which is most of a small collective's latency.
// Errors are those of *net.TCPConn.
func (c *Conn) Read(p []byte) (int, error) {
	if c.rc == nil || len(p) == 0 {
		return c.TCPConn.Read(p)
	}
	return c.spinRead(p)
}

// WriteBuffers writes the buffers in order as one gathered write (writev on
// systems that have it) and returns the number of bytes written, which is
// less than the total only when err is non-nil. Unlike net.Buffers.WriteTo
// it leaves bufs and its elements as they were, so a caller may reuse them;
// the caller keeps ownership of both. The write deadline applies. Steady-state
// calls do not allocate. Concurrent calls on one Conn are serialised.
func (c *Conn) WriteBuffers(bufs [][]byte) (int64, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.scratch = append(c.scratch[:0], bufs...)
	c.bufs = c.scratch
	n, err := c.bufs.WriteTo(c.TCPConn)
	// Drop the references so the Conn does not keep the caller's memory
	// alive.
	clear(c.scratch)
	c.bufs = nil
	return n, err
}
