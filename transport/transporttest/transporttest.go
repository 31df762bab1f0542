// Package transporttest is the conformance suite every transport driver runs.
// A driver's test builds a Harness and calls Run:
//
//	func TestConformance(t *testing.T) {
//		transporttest.Run(t, func(t *testing.T) transporttest.Harness {
//			n := pipe.NewNetwork()
//			return transporttest.Harness{Listen: ..., Dialer: n, DeadAddr: ...}
//		})
//	}
//
// Run checks the contract written in the transport package doc, plus the
// parts of net.Conn's contract that star relies on:
//   - bytes round-trip in both directions, including several MiB sent both
//     ways at once (reading and writing concurrently, so an unbuffered
//     driver cannot deadlock);
//   - a read or write that hits its deadline fails with an error satisfying
//     errors.Is(err, os.ErrDeadlineExceeded), a deadline in the past unblocks
//     a pending Read, and clearing the deadline makes the Conn usable again;
//   - Close unblocks a pending Read or Write on the same end and a pending
//     Write on the other end; the peer reads the data already sent, then
//     io.EOF;
//   - Listener.Close unblocks Accept with an error satisfying
//     errors.Is(err, net.ErrClosed), and later Accepts fail the same way;
//   - a dial to an address nobody listens on fails with an error satisfying
//     errors.Is(err, syscall.ECONNREFUSED);
//   - optional abilities, when the Conn has them: transport.BuffersWriter
//     writes every buffer in order and reports the total; and
//     transport.CloseWriter lets the peer read EOF while the writer can still
//     read;
//   - transport.Poller, when the Conn has it (checked on both ends):
//     ReadNow returns 0, nil when nothing has arrived, gets the bytes the
//     peer writes (while the peer's Write is pending or after it returned,
//     whatever the driver's buffering) in order and sharing the stream with
//     Read, returns io.EOF after the peer's Close, fails with an error
//     satisfying errors.Is(err, os.ErrDeadlineExceeded) when the read
//     deadline has passed even with data available, and fails after the
//     end's own Close; WriteNow returns a count in [0, len(p)], never waits
//     (it ends up taking 0 bytes when the peer does not read), its bytes
//     arrive in order and before those of a later Write, and a passed write
//     deadline or the end's own Close fails it. Pollers call Yield between
//     rounds that found nothing, as star does.
//
// Every blocking step runs under a watchdog (Harness.Timeout), so a hang is a
// test failure naming the step, never a stuck test binary. The suite never
// sleeps to synchronise.
package transporttest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/starcomm/starcomm/transport"
)

// DefaultTimeout bounds each blocking step when Harness.Timeout is zero.
const DefaultTimeout = 10 * time.Second

// bulkSize is the size of the large transfer sent each way at once.
const bulkSize = 8 << 20

// fillLimit bounds how many bytes the suite writes to a peer that does not
// read before it concludes the write never blocks.
const fillLimit = 1 << 30

// Harness tells the suite how to use a driver. Run calls the factory once
// per check, so each check gets fresh state.
type Harness struct {
	// Listen starts a new listener whose Addr the Dialer can dial. The suite
	// closes it. Required.
	Listen func() (transport.Listener, error)
	// Dialer dials the listeners Listen returns. Required.
	Dialer transport.Dialer
	// DeadAddr returns an address nobody listens on, which the Dialer must
	// refuse with an error wrapping syscall.ECONNREFUSED within Timeout. A
	// nil DeadAddr skips that check.
	DeadAddr func(t *testing.T) string
	// Timeout bounds every blocking step; a step that takes longer fails
	// the test as a hang. Zero means DefaultTimeout.
	Timeout time.Duration
}

// Run runs the conformance suite as subtests of t, calling mk for a fresh
// Harness in each subtest.
func Run(t *testing.T, mk func(t *testing.T) Harness) {
	tests := []struct {
		name string
		fn   func(s *suite)
	}{
		{"case=roundtrip", testRoundTrip},
		{"case=bulk-both-ways", testBulk},
		{"case=read-deadline", testReadDeadline},
		{"case=past-deadline-unblocks-read", testPastDeadlineUnblocksRead},
		{"case=past-deadline", testPastDeadline},
		{"case=write-deadline", testWriteDeadline},
		{"case=close-unblocks-read", testCloseUnblocksRead},
		{"case=close-unblocks-write", testCloseUnblocksWrite},
		{"case=close-unblocks-peer-write", testCloseUnblocksPeerWrite},
		{"case=close-after-write", testCloseAfterWrite},
		{"case=listener-close", testListenerClose},
		{"case=dial-refused", testDialRefused},
		{"case=write-buffers", testWriteBuffers},
		{"case=close-write", testCloseWrite},
		{"case=poll-read-idle", testPollReadIdle},
		{"case=poll-read", testPollRead},
		{"case=poll-read-then-read", testPollReadThenRead},
		{"case=poll-read-eof", testPollReadEOF},
		{"case=poll-read-past-deadline", testPollReadPastDeadline},
		{"case=poll-after-close", testPollAfterClose},
		{"case=poll-write", testPollWrite},
		{"case=poll-write-no-reader", testPollWriteNoReader},
		{"case=poll-write-past-deadline", testPollWritePastDeadline},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := mk(t)
			if h.Listen == nil || h.Dialer == nil {
				t.Fatal("transporttest: Harness.Listen and Harness.Dialer are required")
			}
			s := &suite{t: t, h: h, timeout: h.Timeout}
			if s.timeout <= 0 {
				s.timeout = DefaultTimeout
			}
			tc.fn(s)
		})
	}
}

type suite struct {
	t       *testing.T
	h       Harness
	timeout time.Duration
}

// ioResult is the outcome of a Read or Write run in a goroutine.
type ioResult struct {
	n   int
	err error
}

// readResult is the outcome of reading a whole message in a goroutine.
type readResult struct {
	data []byte
	err  error
}

// async runs f in a goroutine and delivers its result on the channel.
func async[T any](f func() T) <-chan T {
	ch := make(chan T, 1)
	go func() { ch <- f() }()
	return ch
}

// await is the watchdog: it returns the value from ch, or fails the test as
// a hang after s.timeout. The cleanups registered by listen and pair then
// close the connections, which unblocks the abandoned goroutine.
func await[T any](s *suite, ch <-chan T, what string) T {
	s.t.Helper()
	timer := time.NewTimer(s.timeout)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		s.t.Fatalf("hang: %s did not return within %v", what, s.timeout)
		panic("unreachable")
	}
}

// listen starts a listener that is closed when the test ends.
func (s *suite) listen() transport.Listener {
	s.t.Helper()
	l, err := s.h.Listen()
	if err != nil {
		s.t.Fatalf("Listen: %v", err)
	}
	s.t.Cleanup(func() { l.Close() })
	return l
}

// pair returns both ends of a fresh connection: dialed is the Dial side,
// accepted the Accept side. Both are closed when the test ends.
func (s *suite) pair() (dialed, accepted transport.Conn) {
	s.t.Helper()
	l := s.listen()
	type connResult struct {
		c   transport.Conn
		err error
	}
	acc := async(func() connResult { c, err := l.Accept(); return connResult{c, err} })
	ctx, cancel := context.WithTimeout(s.t.Context(), s.timeout)
	defer cancel()
	dial := async(func() connResult { c, err := s.h.Dialer.Dial(ctx, l.Addr()); return connResult{c, err} })
	d := await(s, dial, "Dial")
	if d.err == nil {
		s.t.Cleanup(func() { d.c.Close() })
	}
	a := await(s, acc, "Accept")
	if a.err == nil {
		s.t.Cleanup(func() { a.c.Close() })
	}
	if d.err != nil {
		s.t.Fatalf("Dial(%q): %v", l.Addr(), d.err)
	}
	if a.err != nil {
		s.t.Fatalf("Accept: %v", a.err)
	}
	return d.c, a.c
}

func write(c transport.Conn, p []byte) func() ioResult {
	return func() ioResult { n, err := c.Write(p); return ioResult{n, err} }
}

func read(c transport.Conn, size int) func() ioResult {
	return func() ioResult { n, err := c.Read(make([]byte, size)); return ioResult{n, err} }
}

func readFull(c transport.Conn, size int) func() readResult {
	return func() readResult {
		p := make([]byte, size)
		n, err := io.ReadFull(c, p)
		return readResult{p[:n], err}
	}
}

// fill writes to c until a Write fails, which it must once the peer stops
// reading and the deadline passes or the connection closes.
func fill(c transport.Conn) func() ioResult {
	return func() ioResult {
		chunk := make([]byte, 1<<20)
		total := 0
		for total < fillLimit {
			n, err := c.Write(chunk)
			total += n
			if err != nil {
				return ioResult{total, err}
			}
		}
		return ioResult{total, nil}
	}
}

// pattern returns n pseudo-random bytes that depend on seed, so data sent one
// way cannot pass for data sent the other way.
func pattern(n int, seed byte) []byte {
	p := make([]byte, n)
	rand.NewChaCha8([32]byte{seed}).Read(p)
	return p
}

// sameBytes reports a mismatch by its first differing offset rather than by
// dumping megabytes.
func (s *suite) sameBytes(what string, got, want []byte) {
	s.t.Helper()
	if bytes.Equal(got, want) {
		return
	}
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	s.t.Fatalf("%s: got %d bytes, want %d; first difference at offset %d", what, len(got), len(want), i)
}

// send writes msg on w and checks that r reads exactly msg.
func (s *suite) send(w, r transport.Conn, msg []byte) {
	s.t.Helper()
	wr := async(write(w, msg))
	rd := async(readFull(r, len(msg)))
	if res := await(s, wr, "Write"); res.err != nil || res.n != len(msg) {
		s.t.Fatalf("Write(%d bytes) = %d, %v", len(msg), res.n, res.err)
	}
	res := await(s, rd, "Read")
	if res.err != nil {
		s.t.Fatalf("reading %d bytes: %v", len(msg), res.err)
	}
	s.sameBytes("Read", res.data, msg)
}

// expectDeadline fails unless err reports a deadline.
func (s *suite) expectDeadline(what string, err error) {
	s.t.Helper()
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		s.t.Fatalf("%s: got error %v, want one satisfying errors.Is(err, os.ErrDeadlineExceeded)", what, err)
	}
}

func testRoundTrip(s *suite) {
	a, b := s.pair()
	s.send(a, b, []byte("ping"))
	s.send(b, a, []byte("pong"))
	s.send(a, b, []byte{0})
}

func testBulk(s *suite) {
	a, b := s.pair()
	ab, ba := pattern(bulkSize, 1), pattern(bulkSize, 2)
	wa, wb := async(write(a, ab)), async(write(b, ba))
	ra, rb := async(readFull(a, bulkSize)), async(readFull(b, bulkSize))
	for _, w := range []struct {
		name string
		ch   <-chan ioResult
	}{{"Write on dialed end", wa}, {"Write on accepted end", wb}} {
		if res := await(s, w.ch, w.name); res.err != nil || res.n != bulkSize {
			s.t.Fatalf("%s = %d, %v; want %d, nil", w.name, res.n, res.err, bulkSize)
		}
	}
	for _, r := range []struct {
		name string
		ch   <-chan readResult
		want []byte
	}{{"read on accepted end", rb, ab}, {"read on dialed end", ra, ba}} {
		res := await(s, r.ch, r.name)
		if res.err != nil {
			s.t.Fatalf("%s: %v", r.name, res.err)
		}
		s.sameBytes(r.name, res.data, r.want)
	}
}

func testReadDeadline(s *suite) {
	a, b := s.pair()
	if err := a.SetReadDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
		s.t.Fatalf("SetReadDeadline: %v", err)
	}
	res := await(s, async(read(a, 1)), "Read with a deadline")
	if res.n != 0 {
		s.t.Fatalf("Read with nothing sent returned %d bytes", res.n)
	}
	s.expectDeadline("Read past its deadline", res.err)
	// Clearing the deadline makes the Conn usable again.
	if err := a.SetReadDeadline(time.Time{}); err != nil {
		s.t.Fatalf("SetReadDeadline(zero): %v", err)
	}
	s.send(b, a, []byte("after the deadline"))
}

func testPastDeadlineUnblocksRead(s *suite) {
	a, b := s.pair()
	// The Read is most likely blocked by the time the deadline moves into
	// the past; if not, it must fail at once all the same.
	rd := async(read(a, 1))
	if err := a.SetReadDeadline(time.Now().Add(-time.Second)); err != nil {
		s.t.Fatalf("SetReadDeadline: %v", err)
	}
	s.expectDeadline("pending Read after its deadline moved into the past", await(s, rd, "pending Read").err)
	if err := a.SetReadDeadline(time.Time{}); err != nil {
		s.t.Fatalf("SetReadDeadline(zero): %v", err)
	}
	s.send(b, a, []byte("x"))
}

func testPastDeadline(s *suite) {
	a, b := s.pair()
	if err := a.SetDeadline(time.Now().Add(-time.Second)); err != nil {
		s.t.Fatalf("SetDeadline: %v", err)
	}
	s.expectDeadline("Read with a past deadline", await(s, async(read(a, 1)), "Read").err)
	res := await(s, async(write(a, []byte("x"))), "Write")
	s.expectDeadline("Write with a past deadline", res.err)
	if res.n != 0 {
		s.t.Fatalf("Write with a past deadline wrote %d bytes", res.n)
	}
	if err := a.SetDeadline(time.Time{}); err != nil {
		s.t.Fatalf("SetDeadline(zero): %v", err)
	}
	s.send(a, b, []byte("both ways"))
	s.send(b, a, []byte("again"))
}

func testWriteDeadline(s *suite) {
	a, _ := s.pair() // the peer never reads
	if err := a.SetWriteDeadline(time.Now().Add(100 * time.Millisecond)); err != nil {
		s.t.Fatalf("SetWriteDeadline: %v", err)
	}
	res := await(s, async(fill(a)), "Write to a peer that does not read")
	if res.err == nil {
		s.t.Fatalf("wrote %d bytes to a peer that does not read without hitting the write deadline", res.n)
	}
	s.expectDeadline("Write past its deadline", res.err)
}

func testCloseUnblocksRead(s *suite) {
	a, b := s.pair()
	rd := async(read(a, 1))
	if err := a.Close(); err != nil {
		s.t.Fatalf("Close: %v", err)
	}
	if res := await(s, rd, "Read pending during Close"); res.err == nil {
		s.t.Fatalf("Read pending during Close returned %d bytes and no error", res.n)
	}
	a.Close() // a second Close must not panic or hang; its error is not specified
	res := await(s, async(read(b, 1)), "peer Read after Close")
	if res.n != 0 || res.err != io.EOF {
		s.t.Fatalf("peer Read after Close = %d, %v; want 0, io.EOF", res.n, res.err)
	}
}

func testCloseUnblocksWrite(s *suite) {
	a, _ := s.pair() // the peer never reads, so a's writes block
	wr := async(fill(a))
	if err := a.Close(); err != nil {
		s.t.Fatalf("Close: %v", err)
	}
	if res := await(s, wr, "Write pending during Close"); res.err == nil {
		s.t.Fatalf("Write pending during Close wrote %d bytes and returned no error", res.n)
	}
}

func testCloseUnblocksPeerWrite(s *suite) {
	a, b := s.pair() // a never reads, so b's writes block
	wr := async(fill(b))
	if err := a.Close(); err != nil {
		s.t.Fatalf("Close: %v", err)
	}
	if res := await(s, wr, "peer Write pending during Close"); res.err == nil {
		s.t.Fatalf("peer Write pending during Close wrote %d bytes and returned no error", res.n)
	}
}

func testCloseAfterWrite(s *suite) {
	a, b := s.pair()
	msg := []byte("last words")
	wr := async(func() error {
		if _, err := a.Write(msg); err != nil {
			return err
		}
		return a.Close()
	})
	res := await(s, async(readFull(b, len(msg))), "peer Read of data sent before Close")
	if res.err != nil {
		s.t.Fatalf("peer Read of data sent before Close: %v", res.err)
	}
	s.sameBytes("peer Read of data sent before Close", res.data, msg)
	if err := await(s, wr, "Write then Close"); err != nil {
		s.t.Fatalf("Write then Close: %v", err)
	}
	if res := await(s, async(read(b, 1)), "peer Read after the data"); res.n != 0 || res.err != io.EOF {
		s.t.Fatalf("peer Read after the data = %d, %v; want 0, io.EOF", res.n, res.err)
	}
}

func testListenerClose(s *suite) {
	l := s.listen()
	acc := async(func() error { c, err := l.Accept(); closeIfAny(c); return err })
	if err := l.Close(); err != nil {
		s.t.Fatalf("Listener.Close: %v", err)
	}
	if err := await(s, acc, "Accept pending during Listener.Close"); !errors.Is(err, net.ErrClosed) {
		s.t.Fatalf("Accept pending during Listener.Close: got %v, want an error satisfying errors.Is(err, net.ErrClosed)", err)
	}
	acc = async(func() error { c, err := l.Accept(); closeIfAny(c); return err })
	if err := await(s, acc, "Accept after Listener.Close"); !errors.Is(err, net.ErrClosed) {
		s.t.Fatalf("Accept after Listener.Close: got %v, want an error satisfying errors.Is(err, net.ErrClosed)", err)
	}
}

func closeIfAny(c transport.Conn) {
	if c != nil {
		c.Close()
	}
}

func testDialRefused(s *suite) {
	if s.h.DeadAddr == nil {
		s.t.Skip("Harness.DeadAddr is nil")
	}
	addr := s.h.DeadAddr(s.t)
	ctx, cancel := context.WithTimeout(s.t.Context(), s.timeout)
	defer cancel()
	type dialResult struct {
		c   transport.Conn
		err error
	}
	res := await(s, async(func() dialResult { c, err := s.h.Dialer.Dial(ctx, addr); return dialResult{c, err} }), "Dial to "+addr)
	if res.err == nil {
		res.c.Close()
		s.t.Fatalf("Dial(%q) to an address nobody listens on succeeded", addr)
	}
	if !errors.Is(res.err, syscall.ECONNREFUSED) {
		s.t.Fatalf("Dial(%q): got %v, want an error satisfying errors.Is(err, syscall.ECONNREFUSED)", addr, res.err)
	}
}

func testWriteBuffers(s *suite) {
	dialed, accepted := s.pair()
	for _, side := range []struct {
		name string
		w, r transport.Conn
	}{{"dialed", dialed, accepted}, {"accepted", accepted, dialed}} {
		s.t.Run("side="+side.name, func(t *testing.T) {
			s := &suite{t: t, h: s.h, timeout: s.timeout}
			bw, ok := side.w.(transport.BuffersWriter)
			if !ok {
				t.Skipf("%T does not implement transport.BuffersWriter", side.w)
			}
			bufs := [][]byte{[]byte("head"), nil, {}, pattern(1<<20, 3), []byte("x"), pattern(300_000, 4), []byte("tail")}
			want := bytes.Join(bufs, nil)
			type wbResult struct {
				n   int64
				err error
			}
			wr := async(func() wbResult { n, err := bw.WriteBuffers(bufs); return wbResult{n, err} })
			rd := async(readFull(side.r, len(want)))
			if res := await(s, wr, "WriteBuffers"); res.err != nil || res.n != int64(len(want)) {
				t.Fatalf("WriteBuffers = %d, %v; want %d, nil", res.n, res.err, len(want))
			}
			res := await(s, rd, "Read of gathered write")
			if res.err != nil {
				t.Fatalf("Read of gathered write: %v", res.err)
			}
			s.sameBytes("Read of gathered write", res.data, want)
		})
	}
}

func testCloseWrite(s *suite) {
	a, b := s.pair()
	cw, ok := a.(transport.CloseWriter)
	if !ok {
		s.t.Skipf("%T does not implement transport.CloseWriter", a)
	}
	msg := []byte("final frame")
	wr := async(func() error {
		if _, err := a.Write(msg); err != nil {
			return err
		}
		return cw.CloseWrite()
	})
	res := await(s, async(readFull(b, len(msg))), "peer Read before EOF")
	if res.err != nil {
		s.t.Fatalf("peer Read before EOF: %v", res.err)
	}
	s.sameBytes("peer Read before EOF", res.data, msg)
	if err := await(s, wr, "Write then CloseWrite"); err != nil {
		s.t.Fatalf("Write then CloseWrite: %v", err)
	}
	if r := await(s, async(read(b, 1)), "peer Read after CloseWrite"); r.n != 0 || r.err != io.EOF {
		s.t.Fatalf("peer Read after CloseWrite = %d, %v; want 0, io.EOF", r.n, r.err)
	}
	// The half-closed end still reads.
	s.send(b, a, []byte("reply after half-close"))
}
