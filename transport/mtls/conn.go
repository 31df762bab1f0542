package mtls

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/starcomm/starcomm/transport"
)

// maxRecord is the most plaintext one TLS record carries.
const maxRecord = 16 << 10

// Conn is a TLS 1.3 connection with mutual authentication over an inner
// transport.Conn. Listener.Accept and Dialer.Dial return one as a
// transport.Conn.
//
// Read, Write and the deadline methods keep the transport contract: a
// deadline that has passed fails Read and Write at once, with an error
// satisfying errors.Is(err, os.ErrDeadlineExceeded), even when decrypted
// data is waiting; a read that times out leaves the Conn usable. A write
// that fails, at its deadline or otherwise, may have cut a record short,
// so every later write fails with the same error (reads go on). Close
// closes the inner conn at once, without a close_notify alert (which could
// wait for a peer that does not read): the peer reads io.EOF at the
// record boundary, or io.ErrUnexpectedEOF in the middle of a record, as
// over TCP. An alert the peer sent (it refused this end's certificate)
// comes back from Read as a *PeerRefusedError.
//
// A Conn implements transport.BuffersWriter and transport.CloseWriter,
// and, as a PollingConn, transport.Poller; see the package documentation
// for what each means over TLS.
type Conn struct {
	tls   *tls.Conn
	raw   *rawConn
	inner transport.Conn
	// peer names the other end in errors: the address dialed, or the
	// remote address of an accepted conn.
	peer string

	// dialed: this is the client end.
	dialed bool

	// hsDone is closed when the handshake has ended, hsErr its error.
	hsDone chan struct{}
	hsErr  error

	// The caller's deadlines, for the checks before each call.
	dmu      sync.Mutex
	rdl, wdl time.Time

	// rmu serialises Read and ReadNow; wmu serialises Write, WriteNow,
	// WriteBuffers and CloseWrite (and so the raw conn's writeNow mode).
	rmu sync.Mutex
	wmu sync.Mutex
	// scratch gathers small buffers of WriteBuffers into one record.
	scratch []byte

	flushers  sync.WaitGroup
	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

var (
	_ transport.Conn          = (*Conn)(nil)
	_ transport.BuffersWriter = (*Conn)(nil)
	_ transport.CloseWriter   = (*Conn)(nil)
	_ transport.UnsentCounter = (*Conn)(nil)
	_ transport.UnreadCounter = (*Conn)(nil)
	_ transport.AckReporter   = (*Conn)(nil)
)

// newConn wraps inner; mk builds the tls.Conn over the raw conn.
func newConn(inner transport.Conn, peer string, mk func(net.Conn) *tls.Conn) *Conn {
	raw := &rawConn{inner: inner}
	raw.poller, _ = inner.(transport.Poller)
	return &Conn{tls: mk(raw), raw: raw, inner: inner, peer: peer, hsDone: make(chan struct{})}
}

// PollingConn is the Conn Dial and Accept return when the inner conn is a
// transport.Poller: it is one too (see ReadNow and WriteNow). Over an
// inner conn that cannot poll they return a plain *Conn, so that a type
// assertion to transport.Poller tells the truth.
type PollingConn struct{ *Conn }

var _ transport.Poller = PollingConn{}

// wrap returns c as Dial and Accept give it.
func (c *Conn) wrap() transport.Conn {
	if c.raw.poller != nil {
		return PollingConn{c}
	}
	return c
}

// Unwrap returns the *Conn of a connection Dial or Accept returned, for
// ConnectionState and Handshake.
func Unwrap(c transport.Conn) (*Conn, bool) {
	switch v := c.(type) {
	case *Conn:
		return v, true
	case PollingConn:
		return v.Conn, true
	}
	return nil, false
}

// ConnectionState returns the TLS state of the connection (version,
// cipher suite, the peer's verified certificates) once the handshake is
// over; before, its HandshakeComplete is false.
func (c *Conn) ConnectionState() tls.ConnectionState {
	select {
	case <-c.hsDone:
		return c.tls.ConnectionState()
	default:
		return tls.ConnectionState{}
	}
}

// Handshake waits for the handshake to end and returns its error, a
// *HandshakeError. It is bounded by Config.HandshakeTimeout (and by the
// read deadline set on the Conn). Read and Write wait for it themselves.
func (c *Conn) Handshake() error {
	<-c.hsDone
	return c.hsErr
}

// serverHandshake runs an accepted conn's handshake within l's timeout,
// answers a client that does not speak TLS, and records the end.
func (c *Conn) serverHandshake(l *Listener) {
	defer close(c.hsDone)
	ctx, cancel := newTimeout(l.cfg.HandshakeTimeout)
	defer cancel()
	if err := c.tls.HandshakeContext(ctx); err != nil {
		c.hsErr = &HandshakeError{Peer: c.peer, Server: true, TimedOut: timedOut(err, ctx), Err: err}
		l.answerPlaintext(c)
	}
}

// SetDeadline sets the read and write deadlines.
func (c *Conn) SetDeadline(t time.Time) error {
	c.dmu.Lock()
	c.rdl, c.wdl = t, t
	c.dmu.Unlock()
	return c.inner.SetDeadline(t)
}

// SetReadDeadline sets the read deadline. On an accepted Conn whose
// handshake is still running, it bounds the handshake's reads too.
func (c *Conn) SetReadDeadline(t time.Time) error {
	c.dmu.Lock()
	c.rdl = t
	c.dmu.Unlock()
	return c.inner.SetReadDeadline(t)
}

// SetWriteDeadline sets the write deadline.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	c.dmu.Lock()
	c.wdl = t
	c.dmu.Unlock()
	return c.inner.SetWriteDeadline(t)
}

// passed reports whether the read (or write) deadline has passed.
func (c *Conn) passed(write bool) bool {
	c.dmu.Lock()
	d := c.rdl
	if write {
		d = c.wdl
	}
	c.dmu.Unlock()
	return !d.IsZero() && !time.Now().Before(d)
}

// ready is the check before a blocking call: the Conn is open, the
// deadline has not passed, the handshake is over and succeeded.
func (c *Conn) ready(write bool) error {
	if c.closed.Load() {
		return net.ErrClosed
	}
	if c.passed(write) {
		return os.ErrDeadlineExceeded
	}
	<-c.hsDone
	return c.hsErr
}

// readyNow is ready for a polling call, which must not wait: handshook is
// false while the handshake runs.
func (c *Conn) readyNow(write bool) (handshook bool, err error) {
	if !c.closed.Load() && c.passed(write) {
		return false, os.ErrDeadlineExceeded
	}
	return c.handshookNow()
}

// handshookNow is readyNow whatever the deadlines: the connection is not
// closed and its handshake is over (false, nil while it runs).
func (c *Conn) handshookNow() (bool, error) {
	if c.closed.Load() {
		return false, net.ErrClosed
	}
	select {
	case <-c.hsDone:
		return c.hsErr == nil, c.hsErr
	default:
		return false, nil
	}
}

// Read reads decrypted data: at most one record's worth per call.
func (c *Conn) Read(p []byte) (int, error) {
	if err := c.ready(false); err != nil {
		return 0, err
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	n, err := c.tls.Read(p)
	if n > 0 {
		// Data first; crypto/tls keeps an end of stream or a failure for
		// the next call (a timeout recurs by itself).
		return n, nil
	}
	return 0, c.readErr(err)
}

// ReadNow reads decrypted data that has already arrived, without waiting:
// the bytes of a record are taken from the inner conn as they come
// (ReadNow returns 0, nil until the record is whole, keeping what came),
// and a whole record is decrypted and returned. See transport.Poller.
func (c PollingConn) ReadNow(p []byte) (int, error) {
	ok, err := c.readyNow(false)
	if !ok || len(p) == 0 {
		return 0, err
	}
	if !c.rmu.TryLock() {
		return 0, nil // a Read is waiting on the conn: nothing for us
	}
	defer c.rmu.Unlock()
	c.raw.readNow.Store(true)
	n, err := c.tls.Read(p)
	c.raw.readNow.Store(false)
	if n > 0 || errors.Is(err, errWouldBlock) {
		return n, nil
	}
	return 0, c.readErr(err)
}

// readErr translates an error of tls's Read: an alert from the peer
// becomes a *PeerRefusedError.
func (c *Conn) readErr(err error) error {
	if err == nil {
		return nil
	}
	if isAlert(err) {
		return &PeerRefusedError{Peer: c.peer, Server: !c.dialed, Err: err}
	}
	return err
}

// Write encrypts p and writes it, waiting under the write deadline.
func (c *Conn) Write(p []byte) (int, error) {
	if err := c.ready(true); err != nil {
		return 0, err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if len(p) <= maxRecord {
		return c.tls.Write(p)
	}
	c.raw.beginBatch()
	n, err := c.tls.Write(p)
	if ferr := c.raw.endBatch(); err == nil && ferr != nil {
		return 0, ferr // records tls counted did not go
	}
	return n, err
}

// WriteNow encrypts and writes at most one record of p (16 KiB) if the
// connection can take it without waiting, and reports how many bytes of
// p that was. A record the inner conn takes only in part is finished by
// a goroutine of the Conn under the write deadline (the record is
// already sealed, so it cannot be taken back), and every write waits for
// it to go; WriteNow takes nothing until it has. See transport.Poller.
func (c PollingConn) WriteNow(p []byte) (int, error) {
	ok, err := c.readyNow(true)
	if !ok || len(p) == 0 {
		return 0, err
	}
	if !c.wmu.TryLock() {
		return 0, nil // another write is in progress
	}
	defer c.wmu.Unlock()
	if empty, err := c.raw.tryFlush(); !empty {
		return 0, err
	}
	c.raw.writeNow.Store(true)
	n, err := c.tls.Write(p[:min(len(p), maxRecord)])
	c.raw.writeNow.Store(false)
	c.flushLater()
	return n, err
}

// flushLater starts a goroutine that writes the raw conn's stash, if it
// holds anything and none is writing it yet.
func (c *Conn) flushLater() {
	r := c.raw
	r.wmu.Lock()
	defer r.wmu.Unlock()
	if len(r.stash) == 0 || r.flushing {
		return
	}
	r.flushing = true
	c.flushers.Add(1)
	go func() {
		defer c.flushers.Done()
		r.wmu.Lock()
		defer r.wmu.Unlock()
		_ = r.flushLocked() // its error stays in r.werr for the next write
		r.flushing = false
	}()
}

// WriteBuffers writes the buffers in order as if concatenated and returns
// the number of bytes written. Small buffers are gathered into whole
// records (a frame's header travels in the record of its payload's first
// bytes); large ones are encrypted in place, record by record. The caller
// keeps ownership of bufs, which WriteBuffers leaves as they were.
func (c *Conn) WriteBuffers(bufs [][]byte) (int64, error) {
	if err := c.ready(true); err != nil {
		return 0, err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.raw.beginBatch()
	n, err := c.writeBuffers(bufs)
	if ferr := c.raw.endBatch(); err == nil && ferr != nil {
		return 0, ferr // records tls counted did not go
	}
	return n, err
}

// writeBuffers is WriteBuffers under the write lock.
func (c *Conn) writeBuffers(bufs [][]byte) (int64, error) {
	var total int64
	pend := c.scratch[:0]
	flush := func() error {
		if len(pend) == 0 {
			return nil
		}
		n, err := c.tls.Write(pend)
		total += int64(n)
		pend = pend[:0]
		return err
	}
	for _, b := range bufs {
		if len(pend) > 0 || len(b) < maxRecord {
			k := min(len(b), maxRecord-len(pend))
			pend, b = append(pend, b[:k]...), b[k:]
			if len(pend) < maxRecord {
				continue
			}
			if err := flush(); err != nil {
				c.scratch = pend
				return total, err
			}
		}
		// Whole records straight from b; the tail waits in pend.
		if whole := len(b) - len(b)%maxRecord; whole > 0 {
			n, err := c.tls.Write(b[:whole])
			total += int64(n)
			if err != nil {
				c.scratch = pend
				return total, err
			}
			b = b[whole:]
		}
		pend = append(pend, b...)
	}
	err := flush()
	c.scratch = pend
	return total, err
}

// CloseWrite sends the close_notify alert: the peer's Read returns io.EOF
// after the data already sent, and this end still reads; Write fails
// afterwards. Like TCP's half-close it does not wait for the peer: an
// alert the inner conn cannot take at once goes out after the data ahead
// of it, under the write deadline, from a goroutine of the Conn.
func (c *Conn) CloseWrite() error {
	if err := c.ready(true); err != nil {
		return err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.raw.writeNow.Store(true)
	err := c.tls.CloseWrite()
	c.raw.writeNow.Store(false)
	c.flushLater()
	return err
}

// Unread implements transport.UnreadCounter when the inner conn does: the
// record bytes the inner conn holds unread and those read ahead from it
// and not handed to crypto/tls yet (ciphertext: more than 0 means the peer
// sent something that no Read has returned). crypto/tls is handed one
// record at a time, so between Reads it holds none; plaintext it keeps
// from a record whose Read was given a shorter buffer is not counted
// (star reads whole frames, each sent in records of its own). It fails
// while a Read is in progress (which owns the read-ahead) or the
// handshake runs, and over an inner conn that cannot tell
// (errors.ErrUnsupported).
func (c *Conn) Unread() (int, error) {
	uc, ok := c.inner.(transport.UnreadCounter)
	if !ok {
		return 0, fmt.Errorf("mtls: the inner conn cannot count unread bytes: %w", errors.ErrUnsupported)
	}
	// Not readyNow: a read deadline that has passed (a link idle since
	// its last read, or set in the past at the end of a start-up) says
	// nothing about what waits unread.
	if handshook, err := c.handshookNow(); !handshook {
		return 0, errors.Join(errors.New("mtls: unread bytes: the handshake is not over"), err)
	}
	if !c.rmu.TryLock() {
		return 0, errors.New("mtls: unread bytes: a read is in progress")
	}
	ahead := c.raw.rend - c.raw.rpos
	c.rmu.Unlock()
	n, err := uc.Unread()
	return n + ahead, err
}

// Unsent implements transport.UnsentCounter when the inner conn does: the
// record bytes the inner conn has not sent yet, and those stashed for it
// (written without waiting, see WriteNow). It fails at once while a write
// to the inner conn is in progress (it may wait for a peer that reads
// nothing), and over an inner conn that cannot tell (an error wrapping
// errors.ErrUnsupported).
func (c *Conn) Unsent() (int, error) {
	uc, ok := c.inner.(transport.UnsentCounter)
	if !ok {
		return 0, fmt.Errorf("mtls: the inner conn cannot count unsent bytes: %w", errors.ErrUnsupported)
	}
	if !c.raw.wmu.TryLock() {
		return 0, errors.New("mtls: unsent bytes: a write is in progress")
	}
	stashed := len(c.raw.stash) + len(c.raw.batch)
	c.raw.wmu.Unlock()
	n, err := uc.Unsent()
	return n + stashed, err
}

// Acks implements transport.AckReporter with the inner conn's report: the
// TLS records move as the bytes that carry them do. Over an inner conn
// that cannot tell, it fails with an error wrapping errors.ErrUnsupported.
func (c *Conn) Acks() (transport.Acks, error) {
	ar, ok := c.inner.(transport.AckReporter)
	if !ok {
		return transport.Acks{}, fmt.Errorf("mtls: the inner conn cannot tell how bytes move: %w", errors.ErrUnsupported)
	}
	return ar.Acks()
}

// Close closes the inner conn, which ends any I/O in progress and a
// handshake still running, and waits for the Conn's goroutines to end.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		c.closeErr = c.inner.Close()
	})
	<-c.hsDone
	c.flushers.Wait()
	return c.closeErr
}

// Yield is the inner conn's: it gives the processor to other threads once.
func (c PollingConn) Yield() { c.raw.poller.Yield() }

var _ transport.PeerTimeoutSetter = (*Conn)(nil)

// SetPeerTimeout implements transport.PeerTimeoutSetter when the inner
// conn does (TLS adds nothing to how the peer's host acknowledges); over
// another it fails with an error wrapping errors.ErrUnsupported.
func (c *Conn) SetPeerTimeout(d time.Duration) error {
	ps, ok := c.inner.(transport.PeerTimeoutSetter)
	if !ok {
		return fmt.Errorf("mtls: the inner conn cannot set a peer timeout: %w", errors.ErrUnsupported)
	}
	return ps.SetPeerTimeout(d)
}
