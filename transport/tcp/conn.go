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
// Close is the embedded *net.TCPConn's, then closes the pipe WriteSpliced
// made, if any (call it, not the embedded Close, or the pipe leaks).
//
// Read, Write and the deadline methods are those of the embedded
// *net.TCPConn, and so are their errors, unchanged: a deadline gives an error
// satisfying errors.Is(err, os.ErrDeadlineExceeded), a reset one satisfying
// errors.Is(err, syscall.ECONNRESET), an orderly close by the peer io.EOF,
// and use after Close one satisfying errors.Is(err, net.ErrClosed).
type Conn struct {
	*net.TCPConn

	// rc and the fields below serve ReadNow and WriteNow without
	// allocating: readStep and writeStep are method values made once, and
	// the arguments and results of a call pass through rp, rn, rerr (under
	// rmu) and wp, wn, werr (under pwmu).
	// timeout and keepAlive are the Config's, which SetPeerTimeout(0)
	// restores.
	timeout   time.Duration
	keepAlive time.Duration

	rc        syscall.RawConn
	readStep  func(fd uintptr) bool
	writeStep func(fd uintptr) bool
	rmu       sync.Mutex
	rp        []byte
	rn        int
	rerr      syscall.Errno
	pwmu      sync.Mutex
	wp        []byte
	wn        int
	werr      syscall.Errno
	// yields counts Yield calls (one poller at a time calls Yield).
	yields uint
	// lowat is the SO_RCVLOWAT last set (0: the default, 1); lowStep,
	// lowWant and lowErr serve SetReadLowWater as readStep and rp serve
	// ReadNow. All under rmu.
	lowat   int
	lowStep func(fd uintptr)
	lowWant int
	lowErr  error

	// wmu serialises WriteBuffers, which reuses scratch and bufs.
	wmu sync.Mutex
	// scratch keeps the backing array of bufs between calls.
	scratch [][]byte
	// bufs is what net.Buffers.WriteTo consumes; as a field it needs no
	// allocation per call.
	bufs net.Buffers

	// pipe serves WriteSpliced (Linux): made on first use, closed by
	// Close, and dropped after any failure so that bytes left in it never
	// precede a later frame; hasPipe says it is open. spliceStep, spLeft
	// and spErr serve RawConn.Write as readStep serves ReadNow. All under
	// smu; pipeClosed is set by Close.
	smu        sync.Mutex
	pipe       [2]int
	hasPipe    bool
	pipeClosed bool
	spliceStep func(fd uintptr) bool
	spLeft     int
	spErr      syscall.Errno
}

var (
	_ transport.Conn           = (*Conn)(nil)
	_ transport.BuffersWriter  = (*Conn)(nil)
	_ transport.CloseWriter    = (*Conn)(nil)
	_ transport.Poller         = (*Conn)(nil)
	_ transport.LowWaterReader = (*Conn)(nil)
)

// newConn applies cfg's per-connection options to tc and wraps it.
func newConn(tc *net.TCPConn, cfg Config) (*Conn, error) {
	if err := configure(tc, cfg); err != nil {
		return nil, err
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil, err
	}
	c := &Conn{TCPConn: tc, rc: rc, timeout: cfg.Timeout, keepAlive: cfg.KeepAlive}
	c.readStep, c.writeStep, c.spliceStep = c.readOnce, c.writeOnce, c.spliceOnce
	return c, nil
}

// Close closes the connection, then the pipe of WriteSpliced if one was
// made. A WriteSpliced under way returns (the connection is closed) before
// the pipe goes.
func (c *Conn) Close() error {
	err := c.TCPConn.Close()
	c.smu.Lock()
	c.pipeClosed = true
	c.dropPipe()
	c.smu.Unlock()
	return err
}

// WritesDirect implements transport.DirectWriter: Write and WriteBuffers
// pass the caller's bytes to the kernel as they are.
func (c *Conn) WritesDirect() bool { return true }

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
