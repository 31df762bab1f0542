package pipe

import (
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/starcomm/starcomm/transport"
)

// Conn is one end of an in-memory connection; see the package doc for its
// behaviour. Dial and Accept return one (unless Network.NoPoll is set).
type Conn struct {
	in, out *stream // what this end reads, what it writes
	local   addr
	remote  addr
	closed  atomic.Bool
	yields  atomic.Uint32
}

var (
	_ net.Conn                = (*Conn)(nil)
	_ transport.Conn          = (*Conn)(nil)
	_ transport.CloseWriter   = (*Conn)(nil)
	_ transport.Poller        = (*Conn)(nil)
	_ transport.UnreadCounter = (*Conn)(nil)
)

// newPair returns both ends of a connection whose directions each buffer
// size bytes (0: unbuffered).
func newPair(name addr, size int) (client, server *Conn) {
	ab, ba := newStream(size), newStream(size)
	return &Conn{in: ba, out: ab, local: name, remote: name},
		&Conn{in: ab, out: ba, local: name, remote: name}
}

// stream is one direction of a connection: the bytes one end writes and
// the other reads. All of it is guarded by mu, which is never held while
// waiting.
type stream struct {
	mu sync.Mutex
	// ring holds the buffered bytes: n of them from head on, wrapping
	// around. It is empty (capacity 0) when the stream is unbuffered.
	ring []byte
	head int
	n    int
	// wp is what a Write waiting for the reader still offers; non-nil
	// (possibly empty) while a Write holds the stream. Readers take from it
	// directly once the ring is empty, and move it into the ring as room
	// frees, so the ring is full whenever wp holds bytes.
	wp []byte
	// rp is the buffer of a Read waiting for data (nil: none), of which
	// WriteNow and Write have filled rn bytes, all older than the ring's.
	rp []byte
	rn int
	// rdl is the reading end's read deadline, wdl the writing end's write
	// deadline (zero: none).
	rdl, wdl time.Time
	// rclosed: the reading end closed; writes fail and buffered bytes are
	// dropped. wclosed: the writing end closed or half-closed; reads get
	// io.EOF once the data is consumed and writes fail.
	rclosed, wclosed bool
	// wake is closed (and set to nil) when anything above changes; nil
	// while nobody waits, so that a change costs nothing then.
	wake chan struct{}
}

func newStream(size int) *stream { return &stream{ring: make([]byte, size)} }

// signal wakes every goroutine waiting on s. s.mu is held.
func (s *stream) signal() {
	if s.wake != nil {
		close(s.wake)
		s.wake = nil
	}
}

// wait releases s.mu until s changes or deadline dl (zero: none) passes,
// and takes it again. The caller rechecks its condition.
func (s *stream) wait(dl time.Time) {
	if s.wake == nil {
		s.wake = make(chan struct{})
	}
	wake := s.wake
	s.mu.Unlock()
	if dl.IsZero() {
		<-wake
	} else {
		t := time.NewTimer(time.Until(dl))
		select {
		case <-wake:
		case <-t.C:
		}
		t.Stop()
	}
	s.mu.Lock()
}

// passed reports whether deadline dl is set and has passed.
func passed(dl time.Time) bool { return !dl.IsZero() && !time.Now().Before(dl) }

// readable reports whether a reader can take bytes now.
func (s *stream) readable() bool { return s.n > 0 || len(s.wp) > 0 }

// take moves into p what has arrived, oldest first: the ring, then the
// pending Write's bytes; it then refills the ring from those. s.mu is held.
func (s *stream) take(p []byte) int {
	k := 0
	for s.n > 0 && k < len(p) {
		m := copy(p[k:], s.ring[s.head:min(s.head+s.n, len(s.ring))])
		k += m
		s.head = (s.head + m) % len(s.ring)
		s.n -= m
	}
	if s.n == 0 {
		s.head = 0
		m := copy(p[k:], s.wp)
		s.wp = s.wp[m:]
		k += m
	}
	for len(s.wp) > 0 && s.n < len(s.ring) {
		tail := (s.head + s.n) % len(s.ring)
		end := len(s.ring)
		if tail < s.head {
			end = s.head
		}
		m := copy(s.ring[tail:end], s.wp)
		s.wp = s.wp[m:]
		s.n += m
	}
	if k > 0 {
		s.signal()
	}
	return k
}

// put moves into the stream as much of p as fits without waiting: into a
// waiting Read's buffer while nothing older is buffered, then into the
// ring. The caller holds s.mu, and no Write holds the stream.
func (s *stream) put(p []byte) int {
	k := 0
	if s.rp != nil && s.n == 0 {
		m := copy(s.rp[s.rn:], p)
		s.rn += m
		k += m
	}
	for k < len(p) && s.n < len(s.ring) {
		tail := (s.head + s.n) % len(s.ring)
		end := len(s.ring)
		if tail < s.head {
			end = s.head
		}
		m := copy(s.ring[tail:end], p[k:])
		s.n += m
		k += m
	}
	if k > 0 {
		s.signal()
	}
	return k
}

// Read reads into p, waiting until some bytes have arrived, the peer has
// closed or half-closed (io.EOF once the data is consumed), this end has
// closed (io.ErrClosedPipe) or the read deadline passes
// (os.ErrDeadlineExceeded).
func (c *Conn) Read(p []byte) (int, error) {
	s := c.in
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(p) == 0 {
		if s.rclosed {
			return 0, io.ErrClosedPipe
		}
		return 0, nil
	}
	registered := false
	for {
		if registered && s.rn > 0 {
			n := s.rn
			s.rp, s.rn = nil, 0
			return n, nil
		}
		n, err, done := s.readNow(p)
		if done {
			if registered {
				s.rp, s.rn = nil, 0
			}
			return n, err
		}
		if !registered && s.rp == nil {
			s.rp, s.rn, registered = p, 0, true
		}
		s.wait(s.rdl)
	}
}

// readNow is one step of Read and ReadNow: it reports done when the call
// has its result, n bytes and err. s.mu is held.
func (s *stream) readNow(p []byte) (n int, err error, done bool) {
	switch {
	case s.rclosed:
		return 0, io.ErrClosedPipe, true
	case passed(s.rdl):
		return 0, os.ErrDeadlineExceeded, true
	case s.readable():
		return s.take(p), nil, true
	case s.wclosed:
		return 0, io.EOF, true
	}
	return 0, nil, false
}

// ReadNow implements transport.Poller: it copies into p what has already
// arrived, without waiting. It returns n > 0, or 0 and nil when nothing is
// there, or 0 and io.EOF at the end of the stream. A read deadline that has
// passed fails it with os.ErrDeadlineExceeded even when data is there (as
// TCP's ReadNow), and so does Close with io.ErrClosedPipe.
func (c *Conn) ReadNow(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	s := c.in
	s.mu.Lock()
	defer s.mu.Unlock()
	n, err, _ := s.readNow(p)
	return n, err
}

// writeErr is the error a write on s fails with now, if any. s.mu is held.
func (s *stream) writeErr() error {
	switch {
	case s.wclosed:
		return io.ErrClosedPipe // this end closed or half-closed
	case passed(s.wdl):
		return os.ErrDeadlineExceeded
	case s.rclosed:
		return io.ErrClosedPipe // the peer closed
	}
	return nil
}

// Write writes p, waiting until all of it has been read by the peer
// (unbuffered) or fits in the buffer. It fails with io.ErrClosedPipe when
// either end closes first or this end half-closed, and with
// os.ErrDeadlineExceeded when the write deadline passes; n then counts the
// bytes the peer got. Concurrent Writes are serialised.
func (c *Conn) Write(p []byte) (int, error) {
	s := c.out
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if err := s.writeErr(); err != nil {
			return 0, err
		}
		if s.wp == nil {
			break
		}
		s.wait(s.wdl) // another Write holds the stream
	}
	k := s.put(p)
	if k == len(p) {
		return k, nil
	}
	s.wp = p[k:]
	for {
		if len(s.wp) == 0 {
			s.wp = nil
			s.signal() // a Write waiting for the stream may go on
			return len(p), nil
		}
		if err := s.writeErr(); err != nil {
			n := len(p) - len(s.wp)
			s.wp = nil
			s.signal()
			return n, err
		}
		s.wait(s.wdl)
	}
}

// WriteNow implements transport.Poller: it writes as much of p as the peer
// takes now (free buffer space; unbuffered, a Read pending on the peer),
// possibly nothing, without waiting, and returns how much that was. It
// fails as Write would on a passed write deadline or a closed end. While a
// Write of this end waits, it writes nothing (the Write's bytes go first).
func (c *Conn) WriteNow(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	s := c.out
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.writeErr(); err != nil {
		return 0, err
	}
	if s.wp != nil {
		return 0, nil
	}
	return s.put(p), nil
}

// Yield implements transport.Poller: a poller calls it between rounds of
// ReadNow that found nothing. It lets the other goroutines run
// (runtime.Gosched), and every fourth call it sleeps for a microsecond
// instead.
//
// The sleep is for testing/synctest: a poller loops on time.Now() until its
// spin time has passed, and inside a bubble the fake clock only moves when
// every goroutine of the bubble is durably blocked. A poller that only
// called runtime.Gosched would never block, so a poll waiting for a peer
// that waits for the clock (a timer, a deadline, a delayed write) would
// spin forever; with the sleep, the clock moves a microsecond each time the
// rest of the bubble is blocked, and the poll ends after its spin time of
// fake time (four polling rounds per microsecond; a poll may so see an
// event up to about a microsecond of fake time after it happened). Outside
// a bubble a short sleep costs more than it says (about 0.4 ms when the
// process is otherwise idle, the runtime's timer resolution), which is why
// only one call in four sleeps: a 1-byte ping-pong of two polling
// goroutines took 17 µs a round trip when every call slept, 8 µs with one
// in four, and 1 µs with runtime.Gosched alone (2 cores).
func (c *Conn) Yield() {
	if c.yields.Add(1)%4 == 0 {
		time.Sleep(time.Microsecond)
		return
	}
	runtime.Gosched()
}

// CloseWrite implements transport.CloseWriter: it shuts down the writing
// direction. The peer reads the data written so far and then io.EOF; this
// end can still read, and its Writes (pending or later) fail with
// io.ErrClosedPipe. After Close it fails with io.ErrClosedPipe.
func (c *Conn) CloseWrite() error {
	if c.closed.Load() {
		return io.ErrClosedPipe
	}
	s := c.out
	s.mu.Lock()
	s.wclosed = true
	s.signal()
	s.mu.Unlock()
	return nil
}

// Unread implements transport.UnreadCounter: the bytes the peer has
// written (into the buffer, or offered by a Write still waiting) that no
// read of this end has taken yet; 0 once this end is closed.
func (c *Conn) Unread() (int, error) {
	s := c.in
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rclosed {
		return 0, nil
	}
	return s.n + len(s.wp), nil
}

// Close closes this end: pending and later I/O on it fails with
// io.ErrClosedPipe; the peer reads what was written before and then
// io.EOF, and its Writes fail with io.ErrClosedPipe. Close always returns
// nil.
func (c *Conn) Close() error {
	c.closed.Store(true)
	s := c.out
	s.mu.Lock()
	s.wclosed = true
	s.signal()
	s.mu.Unlock()
	s = c.in
	s.mu.Lock()
	s.rclosed = true
	s.head, s.n = 0, 0 // nobody will read them
	s.signal()
	s.mu.Unlock()
	return nil
}

// SetDeadline sets the read and write deadlines; see SetReadDeadline.
func (c *Conn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}

// SetReadDeadline sets the deadline for Read and ReadNow, pending ones
// included; the zero time clears it. After Close it fails with
// io.ErrClosedPipe.
func (c *Conn) SetReadDeadline(t time.Time) error {
	return c.setDeadline(c.in, &c.in.rdl, t)
}

// SetWriteDeadline sets the deadline for Write and WriteNow, pending ones
// included; the zero time clears it. After Close it fails with
// io.ErrClosedPipe.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	return c.setDeadline(c.out, &c.out.wdl, t)
}

func (c *Conn) setDeadline(s *stream, dl *time.Time, t time.Time) error {
	if c.closed.Load() {
		return io.ErrClosedPipe
	}
	s.mu.Lock()
	*dl = t
	s.signal()
	s.mu.Unlock()
	return nil
}

// LocalAddr returns the name of the listener the connection was dialed to.
func (c *Conn) LocalAddr() net.Addr { return c.local }

// RemoteAddr returns the name of the listener the connection was dialed to.
func (c *Conn) RemoteAddr() net.Addr { return c.remote }
