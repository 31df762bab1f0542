package tcp

import (
	"math"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/starcomm/starcomm/transport"
)

// Conn is an established TCP connection with the Config's socket options
// applied. Listener.Accept and Dialer.Dial return one as a transport.Conn;
// a type assertion to *Conn reaches the *net.TCPConn methods.
//
// Close ends ReadNow and WriteNow (they fail with net.ErrClosed from then
// on), closes the embedded *net.TCPConn, then the pipe WriteSpliced made, if
// any (call it, not the embedded Close, or the pipe leaks and ReadNow and
// WriteNow go on using the closed descriptor's number).
//
// Read and Write are those of the embedded *net.TCPConn, and so are their
// errors, unchanged; SetDeadline, SetReadDeadline and SetWriteDeadline set
// its deadlines and the Conn's own, which ReadNow and WriteNow check (set
// them through the Conn, not the embedded *net.TCPConn): a deadline gives an error
// satisfying errors.Is(err, os.ErrDeadlineExceeded), a reset one satisfying
// errors.Is(err, syscall.ECONNRESET), an orderly close by the peer io.EOF,
// and use after Close one satisfying errors.Is(err, net.ErrClosed).
type Conn struct {
	*net.TCPConn

	// timeout and keepAlive are the Config's, which SetPeerTimeout(0)
	// restores.
	timeout   time.Duration
	keepAlive time.Duration

	// rc is the socket's RawConn: socket options, SO_RCVLOWAT and
	// WriteSpliced go through it.
	rc syscall.RawConn
	// fd is the socket's descriptor, which ReadNow and WriteNow use
	// directly: Go's RawConn.Read and Write (a lock on the descriptor, a
	// check of the poller's deadline state and a closure per call) took
	// about a tenth of a small collective's user CPU. closed and the
	// deadlines below keep their guarantees: rmu serialises ReadNow,
	// pwmu WriteNow; Close sets closed under both before it closes the
	// socket, so the descriptor is never used after Close (nor, reused,
	// for another file); rdl and wdl are the read and write deadlines as
	// set through this Conn, which ReadNow and WriteNow check as Read and
	// Write would, without reading the clock.
	fd     uintptr
	rmu    sync.Mutex
	pwmu   sync.Mutex
	closed bool
	rdl    nowDeadline
	wdl    nowDeadline
	// yields counts Yield calls (one poller at a time calls Yield).
	yields uint
	// lowat is the SO_RCVLOWAT last set (0: the default, 1); lowStep,
	// lowWant and lowErr serve SetReadLowWater without allocating. All
	// under rmu.
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
	// and spErr serve RawConn.Write without allocating. All under
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
	c.rdl.when, c.wdl.when = noDeadline, noDeadline
	if err := rc.Control(func(fd uintptr) { c.fd = fd }); err != nil {
		return nil, err
	}
	c.spliceStep = c.spliceOnce
	return c, nil
}

// nowDeadline is a deadline of ReadNow or WriteNow: passed says, with one
// atomic load, whether it has passed. A timer sets passed when it passes,
// as Go's runtime does for the deadlines of Read and Write.
type nowDeadline struct {
	passed atomic.Bool
	mu     sync.Mutex
	when   int64 // nanoseconds since monoBase; noDeadline: none
	timer  *time.Timer
	// stopped is set by Close: no timer is started after it.
	stopped bool
}

// noDeadline is nowDeadline.when when no deadline is set.
const noDeadline = math.MaxInt64

// monoBase is the origin of nowDeadline.when.
var monoBase = time.Now()

// monoNow is now in nanoseconds since monoBase, on the monotonic clock.
func monoNow() int64 { return int64(time.Since(monoBase)) }

// monoOf turns deadline t into nanoseconds since monoBase on the monotonic
// clock, as Go's runtime turns the deadlines of Read and Write: the time
// left until t (on the monotonic clock when t has a monotonic reading, as
// time.Now's and its sums do, on the wall clock otherwise) from now.
func monoOf(t time.Time) int64 {
	if t.IsZero() {
		return noDeadline
	}
	now, left := monoNow(), int64(time.Until(t))
	if left >= noDeadline-now {
		return noDeadline - 1 // beyond any clock reading: never passes
	}
	return now + left
}

// set makes t (zero: none) the deadline.
func (d *nowDeadline) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.when = monoOf(t)
	d.arm()
}

// arm sets passed, or the timer, for d.when. The caller holds d.mu.
func (d *nowDeadline) arm() {
	left := time.Duration(0)
	if d.when != noDeadline {
		left = time.Duration(d.when - monoNow())
	}
	d.passed.Store(d.when != noDeadline && left <= 0)
	switch {
	case d.stopped: // closed: ReadNow and WriteNow fail before they look
	case left > 0 && d.timer == nil:
		d.timer = time.AfterFunc(left, d.fire)
	case left > 0:
		d.timer.Reset(left)
	case d.timer != nil:
		d.timer.Stop()
	}
}

// fire is the timer's: the deadline set last has passed, or (a timer of an
// earlier deadline, or one that fired early) is rearmed.
func (d *nowDeadline) fire() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.arm()
}

// stop stops the timer for good (Close).
func (d *nowDeadline) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stopped = true
	if d.timer != nil {
		d.timer.Stop()
	}
}

// SetDeadline sets the read and write deadlines of Read, Write, ReadNow,
// WriteNow and the rest, as net.Conn's SetDeadline does.
func (c *Conn) SetDeadline(t time.Time) error {
	c.rdl.set(t)
	c.wdl.set(t)
	return c.TCPConn.SetDeadline(t)
}

// SetReadDeadline sets the deadline of Read and ReadNow, as net.Conn's
// does.
func (c *Conn) SetReadDeadline(t time.Time) error {
	c.rdl.set(t)
	return c.TCPConn.SetReadDeadline(t)
}

// SetWriteDeadline sets the deadline of Write, WriteNow, WriteBuffers and
// WriteSpliced, as net.Conn's does.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	c.wdl.set(t)
	return c.TCPConn.SetWriteDeadline(t)
}

// Close closes the connection, then the pipe of WriteSpliced if one was
// made. It waits for a ReadNow or WriteNow under way (neither waits for the
// network), so that the socket's descriptor is never used after it is
// closed. A WriteSpliced under way returns (the connection is closed) before
// the pipe goes.
func (c *Conn) Close() error {
	c.rmu.Lock()
	c.pwmu.Lock()
	c.closed = true
	c.pwmu.Unlock()
	c.rmu.Unlock()
	c.rdl.stop()
	c.wdl.stop()
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

var _ transport.HostLocal = (*Conn)(nil)

// PeerOnHost implements transport.HostLocal: the peer's address is a
// loopback address or the connection's own local address (the same IP; an
// IPv4 address and its IPv4-mapped IPv6 form are the same).
func (c *Conn) PeerOnHost() bool { return peerOnHost(c.LocalAddr(), c.RemoteAddr()) }

// peerOnHost reports whether remote, the peer of a connection whose own
// address is local, is on this host: both TCP addresses, remote a loopback
// address or local's IP.
func peerOnHost(local, remote net.Addr) bool {
	l, lok := local.(*net.TCPAddr)
	r, rok := remote.(*net.TCPAddr)
	if !lok || !rok || l == nil || r == nil {
		return false
	}
	return r.IP.IsLoopback() || (len(r.IP) > 0 && r.IP.Equal(l.IP))
}
