package mtls

import (
	"encoding/binary"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/starcomm/starcomm/transport"
)

// rawConn is what a tls.Conn reads records from and writes records to: the
// inner transport.Conn, with two modes that Conn's polling calls switch on
// around their TLS call, and a stash of records written without waiting
// that the inner conn has not taken yet.
//
// A tls.Conn writes records one at a time under its own lock, so Write is
// never called concurrently by it; Conn's write lock keeps a polling write
// (writeNow) from overlapping any other write. The only write tls makes
// from a read is an alert (a corrupt record) or a key update answer, which
// Write orders after the stash like any other.
type rawConn struct {
	inner  transport.Conn
	poller transport.Poller // inner's, or nil

	// readNow: Read takes what has arrived and fails with errWouldBlock
	// instead of waiting. Set by Conn.ReadNow around its tls read.
	readNow atomic.Bool
	// writeNow: Write hands the inner conn what it takes without waiting
	// and stashes the rest (all of it when inner cannot poll). Set by
	// Conn.WriteNow and Conn.CloseWrite around their tls writes.
	writeNow atomic.Bool

	// wmu is held while writing to inner; it guards the fields below.
	wmu sync.Mutex
	// stash holds record bytes tls wrote in writeNow mode that inner has
	// not taken yet: they go out before any later byte (by the flusher, a
	// WriteNow or a Write, whichever comes first).
	stash []byte
	// flushing says a flusher goroutine is running (see Conn.flushLater).
	flushing bool
	// werr is the first error of a write to inner: the record stream may
	// be cut, so every later write fails with it.
	werr error
	// batching: records gather in batch and go to inner in writes of
	// batchSize (see Conn.Write); batch is flushed by endBatch.
	batching bool
	batch    []byte

	// Read-ahead (used by one reader at a time, under Conn's read lock):
	// inner's bytes not handed to tls yet are rbuf[rpos:rend].
	rbuf       []byte
	rpos, rend int
	// Where tls is in the record stream (see recordLimit): hdrHave bytes
	// of a record header handed to it (in hdr), or recLeft bytes of a
	// record's body still to hand.
	hdr     [recordHeaderLen]byte
	hdrHave int
	recLeft int
}

// recordHeaderLen is the length of a TLS record's header: type, version,
// and the body's length (u16 BE).
const recordHeaderLen = 5

// recordLimit bounds a read of n bytes for tls to the end of the record
// (or record header) it is in: crypto/tls would otherwise take whole
// buffers into buffers of its own, where Conn.Unread could not count them.
// Between Reads, tls then holds no record bytes it has not returned (a
// Read returns a record's plaintext in full unless the caller's buffer is
// shorter).
func (r *rawConn) recordLimit(n int) int {
	if r.recLeft > 0 {
		return min(n, r.recLeft)
	}
	return min(n, recordHeaderLen-r.hdrHave)
}

// handed follows the record stream over b, handed to tls.
func (r *rawConn) handed(b []byte) {
	for len(b) > 0 {
		if r.recLeft > 0 {
			k := min(len(b), r.recLeft)
			r.recLeft -= k
			b = b[k:]
			continue
		}
		k := copy(r.hdr[r.hdrHave:], b)
		r.hdrHave += k
		b = b[k:]
		if r.hdrHave == recordHeaderLen {
			r.recLeft, r.hdrHave = int(binary.BigEndian.Uint16(r.hdr[3:])), 0
		}
	}
}

// batchSize is how many bytes of records a large write hands the inner
// conn per call: a TLS record holds 16 KiB, and a system call per record
// costs more than copying the records together.
const batchSize = 256 << 10

// readAhead is the size of the read-ahead buffer: tls asks for a record
// at a time, and a system call per record costs more than a copy.
const readAhead = 256 << 10

var _ net.Conn = (*rawConn)(nil)

// errWouldBlock is Read's answer in readNow mode when nothing has arrived.
// It is a temporary timeout to crypto/tls, which then keeps what it has
// read of a record and the connection usable; Conn.ReadNow turns it into
// (0, nil). It never leaves the package.
var errWouldBlock error = wouldBlock{}

type wouldBlock struct{}

func (wouldBlock) Error() string   { return "mtls: nothing to read yet" }
func (wouldBlock) Timeout() bool   { return true }
func (wouldBlock) Temporary() bool { return true }

// Read reads record bytes: what was read ahead, else from inner (without
// waiting in readNow mode), reading ahead up to readAhead bytes.
func (r *rawConn) Read(p []byte) (int, error) {
	p = p[:r.recordLimit(len(p))]
	if r.rpos < r.rend {
		n := copy(p, r.rbuf[r.rpos:r.rend])
		r.rpos += n
		r.handed(p[:n])
		return n, nil
	}
	if r.rbuf == nil {
		r.rbuf = make([]byte, readAhead)
	}
	var n int
	var err error
	if r.readNow.Load() {
		if n, err = r.poller.ReadNow(r.rbuf); n == 0 && err == nil {
			return 0, errWouldBlock
		}
	} else {
		n, err = r.inner.Read(r.rbuf)
	}
	if n == 0 {
		return 0, err
	}
	r.rpos, r.rend = 0, n
	k := copy(p, r.rbuf[:n])
	r.rpos = k
	r.handed(p[:k])
	return k, nil // an error with data recurs at the next call
}

// Write writes record bytes to inner after the stash. In writeNow mode it
// never waits: what inner does not take at once (everything, when inner
// is not a Poller) joins the stash, and
// Write reports all of b written (tls must not write the record again).
func (r *rawConn) Write(b []byte) (int, error) {
	now := r.writeNow.Load()
	r.wmu.Lock()
	defer r.wmu.Unlock()
	if r.werr != nil {
		return 0, r.werr
	}
	if now {
		rest := b
		if len(r.stash) == 0 && r.poller != nil {
			n, err := r.poller.WriteNow(b)
			if err != nil {
				r.werr = err
				return n, err
			}
			rest = b[n:]
		}
		r.stash = append(r.stash, rest...)
		return len(b), nil
	}
	if err := r.flushLocked(); err != nil {
		return 0, err
	}
	if r.batching {
		r.batch = append(r.batch, b...)
		if len(r.batch) >= batchSize {
			if err := r.writeBatchLocked(); err != nil {
				return 0, err
			}
		}
		return len(b), nil
	}
	n, err := r.inner.Write(b)
	if err != nil {
		r.werr = err
	}
	return n, err
}

// writeBatchLocked writes the batch to inner. r.wmu is held.
func (r *rawConn) writeBatchLocked() error {
	if len(r.batch) == 0 {
		return nil
	}
	_, err := r.inner.Write(r.batch)
	r.batch = r.batch[:0]
	if err != nil {
		r.werr = err
	}
	return err
}

// beginBatch makes blocking writes gather records into batches.
func (r *rawConn) beginBatch() {
	r.wmu.Lock()
	r.batching = true
	r.wmu.Unlock()
}

// endBatch writes what the batch holds and ends batching.
func (r *rawConn) endBatch() error {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	r.batching = false
	return r.writeBatchLocked()
}

// flushLocked writes the stash to inner, waiting under inner's write
// deadline. r.wmu is held.
func (r *rawConn) flushLocked() error {
	if len(r.stash) == 0 {
		return nil
	}
	_, err := r.inner.Write(r.stash)
	r.stash = r.stash[:0]
	if err != nil {
		r.werr = err
	}
	return err
}

// tryFlush hands inner as much of the stash as it takes without waiting.
// It reports whether the stash is empty now; false with a nil error means
// the stash is not empty or a flusher is writing it.
func (r *rawConn) tryFlush() (bool, error) {
	if !r.wmu.TryLock() {
		return false, nil // a flusher (or an alert from a read) is writing
	}
	defer r.wmu.Unlock()
	if r.werr != nil {
		return false, r.werr
	}
	if len(r.stash) == 0 {
		return true, nil
	}
	n, err := r.poller.WriteNow(r.stash)
	if err != nil {
		r.werr = err
		return false, err
	}
	r.stash = r.stash[:copy(r.stash, r.stash[n:])]
	return len(r.stash) == 0, nil
}

// Close closes inner (crypto/tls calls it when a handshake's context ends).
func (r *rawConn) Close() error { return r.inner.Close() }

// LocalAddr and RemoteAddr are inner's when it has them (crypto/tls only
// shows them in errors and ClientHelloInfo).
func (r *rawConn) LocalAddr() net.Addr {
	if a, ok := r.inner.(interface{ LocalAddr() net.Addr }); ok {
		return a.LocalAddr()
	}
	return addr{}
}

// RemoteAddr is inner's remote address, when it has one.
func (r *rawConn) RemoteAddr() net.Addr {
	if a, ok := r.inner.(interface{ RemoteAddr() net.Addr }); ok {
		return a.RemoteAddr()
	}
	return addr{}
}

// The deadline methods do nothing: Conn sets inner's deadlines itself, and
// crypto/tls only calls these from CloseWrite and Close, to bound and then
// stop writing the close_notify alert. Conn sends that alert without
// waiting instead (see Conn.CloseWrite) and never calls tls's Close.

// SetDeadline does nothing (see above).
func (r *rawConn) SetDeadline(time.Time) error { return nil }

// SetReadDeadline does nothing (see above).
func (r *rawConn) SetReadDeadline(time.Time) error { return nil }

// SetWriteDeadline does nothing (see above).
func (r *rawConn) SetWriteDeadline(time.Time) error { return nil }

// addr is the address of an inner conn that has none.
type addr struct{}

func (addr) Network() string { return "mtls" }
func (addr) String() string  { return "unknown" }
