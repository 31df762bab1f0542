package transporttest

import (
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/starcomm/starcomm/transport"
)

// The checks of the optional transport.Poller ability. Each runs on both
// ends of a connection (side=dialed polls the Dial side, side=accepted the
// Accept side), and skips an end whose Conn is not a Poller.
//
// A poll loop runs in a goroutine under the watchdog like every other
// blocking step, and it gives up by itself after the same timeout, so that
// a ReadNow or WriteNow that never makes progress is a failure naming the
// step, and a ReadNow or WriteNow that blocks is a hang naming it.

// pollEnd is one end under test: c polls, peer is the other end.
type pollEnd struct {
	c    transport.Conn
	p    transport.Poller
	peer transport.Conn
}

// eachPoller runs f as a subtest for each end of a fresh connection that
// is a transport.Poller.
func eachPoller(s *suite, f func(s *suite, e pollEnd)) {
	dialed, accepted := s.pair()
	for _, side := range []struct {
		name    string
		c, peer transport.Conn
	}{{"dialed", dialed, accepted}, {"accepted", accepted, dialed}} {
		s.t.Run("side="+side.name, func(t *testing.T) {
			p, ok := side.c.(transport.Poller)
			if !ok {
				t.Skipf("%T does not implement transport.Poller", side.c)
			}
			f(&suite{t: t, h: s.h, timeout: s.timeout}, pollEnd{c: side.c, p: p, peer: side.peer})
		})
	}
}

// eachPollerPair is eachPoller with a fresh connection per end, for checks
// that close or half-close it.
func eachPollerPair(s *suite, f func(s *suite, e pollEnd)) {
	for _, side := range []string{"dialed", "accepted"} {
		s.t.Run("side="+side, func(t *testing.T) {
			s := &suite{t: t, h: s.h, timeout: s.timeout}
			c, peer := s.pair()
			if side == "accepted" {
				c, peer = peer, c
			}
			p, ok := c.(transport.Poller)
			if !ok {
				t.Skipf("%T does not implement transport.Poller", c)
			}
			f(s, pollEnd{c: c, p: p, peer: peer})
		})
	}
}

// errGaveUp is what a poll loop returns when it made no progress within the
// watchdog.
var errGaveUp = errors.New("transporttest: no progress within the watchdog")

// readNowFull polls p with ReadNow, at most bufSize bytes a call, until it
// has want bytes or ReadNow fails; it yields between calls that found
// nothing. Every call must return 0 <= n <= its buffer, and n == 0 with an
// error.
func (s *suite) readNowFull(p transport.Poller, want, bufSize int) func() readResult {
	return func() readResult {
		got := make([]byte, 0, want)
		buf := make([]byte, bufSize)
		stop := time.Now().Add(s.timeout)
		for len(got) < want {
			b := buf[:min(len(buf), want-len(got))]
			n, err := p.ReadNow(b)
			if n < 0 || n > len(b) || (err != nil && n != 0) {
				return readResult{got, fmt.Errorf("ReadNow(%d bytes) = %d, %v: want 0 <= n <= len(p), and n == 0 with an error", len(b), n, err)}
			}
			got = append(got, b[:n]...)
			switch {
			case err != nil:
				return readResult{got, err}
			case n == 0:
				if time.Now().After(stop) {
					return readResult{got, errGaveUp}
				}
				p.Yield()
			}
		}
		return readResult{got, nil}
	}
}

// pollUntilErr polls p with ReadNow until it fails and returns the error;
// ReadNow must find no data meanwhile.
func (s *suite) pollUntilErr(p transport.Poller) func() ioResult {
	return func() ioResult {
		buf := make([]byte, 16)
		stop := time.Now().Add(s.timeout)
		for {
			n, err := p.ReadNow(buf)
			if n != 0 || err != nil {
				return ioResult{n, err}
			}
			if time.Now().After(stop) {
				return ioResult{0, errGaveUp}
			}
			p.Yield()
		}
	}
}

// writeNowAll polls p with WriteNow until all of msg is written or WriteNow
// fails; it yields between calls that wrote nothing.
func (s *suite) writeNowAll(p transport.Poller, msg []byte) func() ioResult {
	return func() ioResult {
		total := 0
		stop := time.Now().Add(s.timeout)
		for total < len(msg) {
			rest := msg[total:]
			n, err := p.WriteNow(rest)
			if n < 0 || n > len(rest) {
				return ioResult{total, fmt.Errorf("WriteNow(%d bytes) = %d, %v: want 0 <= n <= len(p)", len(rest), n, err)}
			}
			total += n
			switch {
			case err != nil:
				return ioResult{total, err}
			case n == 0:
				if time.Now().After(stop) {
					return ioResult{total, errGaveUp}
				}
				p.Yield()
			}
		}
		return ioResult{total, nil}
	}
}

func testPollReadIdle(s *suite) {
	eachPoller(s, func(s *suite, e pollEnd) {
		for range 3 {
			res := await(s, async(func() ioResult { n, err := e.p.ReadNow(make([]byte, 8)); return ioResult{n, err} }), "ReadNow with nothing sent")
			if res.n != 0 || res.err != nil {
				s.t.Fatalf("ReadNow with nothing sent = %d, %v; want 0, nil", res.n, res.err)
			}
			e.p.Yield()
		}
		// The link is intact.
		s.send(e.peer, e.c, []byte("after the polls"))
	})
}

func testPollRead(s *suite) {
	eachPoller(s, func(s *suite, e pollEnd) {
		for _, msg := range [][]byte{[]byte("hello"), pattern(1<<20, 5)} {
			wr := async(write(e.peer, msg))
			res := await(s, async(s.readNowFull(e.p, len(msg), 7000)), "ReadNow of the peer's Write")
			if res.err != nil {
				s.t.Fatalf("ReadNow of %d bytes the peer wrote, after %d: %v", len(msg), len(res.data), res.err)
			}
			s.sameBytes("ReadNow", res.data, msg)
			if w := await(s, wr, "peer's Write"); w.err != nil || w.n != len(msg) {
				s.t.Fatalf("peer's Write(%d bytes) = %d, %v", len(msg), w.n, w.err)
			}
		}
	})
}

func testPollReadThenRead(s *suite) {
	eachPoller(s, func(s *suite, e pollEnd) {
		msg := pattern(100_000, 6)
		wr := async(write(e.peer, msg))
		first := await(s, async(s.readNowFull(e.p, 3, 3)), "ReadNow of the first bytes")
		if first.err != nil {
			s.t.Fatalf("ReadNow of the first bytes: %v", first.err)
		}
		rest := await(s, async(readFull(e.c, len(msg)-len(first.data))), "Read after ReadNow")
		if rest.err != nil {
			s.t.Fatalf("Read after ReadNow: %v", rest.err)
		}
		s.sameBytes("ReadNow then Read", append(first.data, rest.data...), msg)
		if w := await(s, wr, "peer's Write"); w.err != nil || w.n != len(msg) {
			s.t.Fatalf("peer's Write(%d bytes) = %d, %v", len(msg), w.n, w.err)
		}
		// And Read then ReadNow.
		s.send(e.peer, e.c, []byte("a Read"))
		msg = []byte("then a ReadNow")
		wr = async(write(e.peer, msg))
		res := await(s, async(s.readNowFull(e.p, len(msg), 64)), "ReadNow after Read")
		if res.err != nil {
			s.t.Fatalf("ReadNow after Read: %v", res.err)
		}
		s.sameBytes("ReadNow after Read", res.data, msg)
		await(s, wr, "peer's Write")
	})
}

func testPollReadEOF(s *suite) {
	eachPollerPair(s, func(s *suite, e pollEnd) {
		msg := []byte("last words")
		wr := async(func() error {
			if _, err := e.peer.Write(msg); err != nil {
				return err
			}
			return e.peer.Close()
		})
		res := await(s, async(s.readNowFull(e.p, len(msg), 64)), "ReadNow of data sent before Close")
		if res.err != nil {
			s.t.Fatalf("ReadNow of data sent before the peer's Close: %v", res.err)
		}
		s.sameBytes("ReadNow of data sent before the peer's Close", res.data, msg)
		if err := await(s, wr, "peer's Write then Close"); err != nil {
			s.t.Fatalf("peer's Write then Close: %v", err)
		}
		if r := await(s, async(s.pollUntilErr(e.p)), "ReadNow after the peer's Close"); r.n != 0 || r.err != io.EOF {
			s.t.Fatalf("ReadNow after the peer's Close = %d, %v; want 0, io.EOF", r.n, r.err)
		}
		// It stays at the end.
		if n, err := e.p.ReadNow(make([]byte, 1)); n != 0 || err != io.EOF {
			s.t.Fatalf("second ReadNow after the peer's Close = %d, %v; want 0, io.EOF", n, err)
		}
	})
}

func testPollReadPastDeadline(s *suite) {
	eachPoller(s, func(s *suite, e pollEnd) {
		// Two bytes in one Write: once the first has arrived, so has the
		// second (or, on an unbuffered driver, the Write still offers it).
		wr := async(write(e.peer, []byte("xy")))
		first := await(s, async(s.readNowFull(e.p, 1, 1)), "ReadNow of the first byte")
		if first.err != nil || string(first.data) != "x" {
			s.t.Fatalf("ReadNow of the first byte = %q, %v; want %q", first.data, first.err, "x")
		}
		if err := e.c.SetReadDeadline(time.Now().Add(-time.Second)); err != nil {
			s.t.Fatalf("SetReadDeadline: %v", err)
		}
		res := await(s, async(func() ioResult { n, err := e.p.ReadNow(make([]byte, 8)); return ioResult{n, err} }), "ReadNow past the read deadline")
		s.expectDeadline("ReadNow past the read deadline, with data available", res.err)
		if res.n != 0 {
			s.t.Fatalf("ReadNow past the read deadline read %d bytes", res.n)
		}
		if err := e.c.SetReadDeadline(time.Time{}); err != nil {
			s.t.Fatalf("SetReadDeadline(zero): %v", err)
		}
		rest := await(s, async(s.readNowFull(e.p, 1, 8)), "ReadNow after the deadline was cleared")
		if rest.err != nil || string(rest.data) != "y" {
			s.t.Fatalf("ReadNow after the deadline was cleared = %q, %v; want %q", rest.data, rest.err, "y")
		}
		if w := await(s, wr, "peer's Write"); w.err != nil || w.n != 2 {
			s.t.Fatalf("peer's Write = %d, %v; want 2, nil", w.n, w.err)
		}
	})
}

func testPollAfterClose(s *suite) {
	eachPollerPair(s, func(s *suite, e pollEnd) {
		if err := e.c.Close(); err != nil {
			s.t.Fatalf("Close: %v", err)
		}
		res := await(s, async(func() ioResult { n, err := e.p.ReadNow(make([]byte, 8)); return ioResult{n, err} }), "ReadNow after Close")
		if res.err == nil || res.n != 0 {
			s.t.Fatalf("ReadNow after Close = %d, %v; want 0 and an error", res.n, res.err)
		}
		res = await(s, async(func() ioResult { n, err := e.p.WriteNow([]byte("x")); return ioResult{n, err} }), "WriteNow after Close")
		if res.err == nil || res.n != 0 {
			s.t.Fatalf("WriteNow after Close = %d, %v; want 0 and an error", res.n, res.err)
		}
	})
}

func testPollWrite(s *suite) {
	eachPoller(s, func(s *suite, e pollEnd) {
		for _, size := range []int{1, 5, 1 << 20} {
			msg := pattern(size, 7)
			rd := async(readFull(e.peer, size))
			if w := await(s, async(s.writeNowAll(e.p, msg)), "WriteNow to a reading peer"); w.err != nil {
				s.t.Fatalf("WriteNow of %d bytes to a reading peer, after %d: %v", size, w.n, w.err)
			}
			res := await(s, rd, "peer's Read of polled writes")
			if res.err != nil {
				s.t.Fatalf("peer's Read of polled writes: %v", res.err)
			}
			s.sameBytes("peer's Read of polled writes", res.data, msg)
		}
		// WriteNow's bytes go before a later Write's.
		msg := pattern(300_000, 8)
		half := len(msg) / 2
		rd := async(readFull(e.peer, len(msg)))
		if w := await(s, async(s.writeNowAll(e.p, msg[:half])), "WriteNow of the first half"); w.err != nil {
			s.t.Fatalf("WriteNow of the first half: %v", w.err)
		}
		if w := await(s, async(write(e.c, msg[half:])), "Write of the second half"); w.err != nil || w.n != len(msg)-half {
			s.t.Fatalf("Write of the second half = %d, %v", w.n, w.err)
		}
		res := await(s, rd, "peer's Read")
		if res.err != nil {
			s.t.Fatalf("peer's Read: %v", res.err)
		}
		s.sameBytes("WriteNow then Write", res.data, msg)
	})
}

func testPollWriteNoReader(s *suite) {
	eachPoller(s, func(s *suite, e pollEnd) {
		// The peer does not read: WriteNow fills whatever buffers the
		// driver has, then takes nothing, without waiting.
		chunk := pattern(64<<10, 9)
		type fillResult struct {
			data []byte
			err  error
		}
		fill := await(s, async(func() fillResult {
			var sent []byte
			for len(sent) < fillLimit {
				n, err := e.p.WriteNow(chunk)
				if n < 0 || n > len(chunk) {
					return fillResult{sent, fmt.Errorf("WriteNow(%d bytes) = %d, %v: want 0 <= n <= len(p)", len(chunk), n, err)}
				}
				sent = append(sent, chunk[:n]...)
				if err != nil {
					return fillResult{sent, err}
				}
				if n == 0 {
					return fillResult{sent, nil}
				}
			}
			return fillResult{sent, errors.New("WriteNow never stopped taking bytes")}
		}), "WriteNow to a peer that does not read")
		if fill.err != nil {
			s.t.Fatalf("WriteNow to a peer that does not read, after %d bytes: %v", len(fill.data), fill.err)
		}
		// Whatever it took arrives, in order.
		msg := []byte("after the full buffers")
		rd := async(readFull(e.peer, len(fill.data)+len(msg)))
		if w := await(s, async(write(e.c, msg)), "Write after WriteNow filled the buffers"); w.err != nil {
			s.t.Fatalf("Write after WriteNow filled the buffers: %v", w.err)
		}
		res := await(s, rd, "peer's Read")
		if res.err != nil {
			s.t.Fatalf("peer's Read: %v", res.err)
		}
		s.sameBytes("peer's Read", res.data, append(fill.data, msg...))
	})
}

func testPollWritePastDeadline(s *suite) {
	eachPoller(s, func(s *suite, e pollEnd) {
		// A pending Read on the peer: an unbuffered driver would take the
		// byte, were it not for the deadline.
		rd := async(readFull(e.peer, 1))
		if err := e.c.SetWriteDeadline(time.Now().Add(-time.Second)); err != nil {
			s.t.Fatalf("SetWriteDeadline: %v", err)
		}
		res := await(s, async(func() ioResult { n, err := e.p.WriteNow([]byte("x")); return ioResult{n, err} }), "WriteNow past the write deadline")
		s.expectDeadline("WriteNow past the write deadline", res.err)
		if res.n != 0 {
			s.t.Fatalf("WriteNow past the write deadline wrote %d bytes", res.n)
		}
		if err := e.c.SetWriteDeadline(time.Time{}); err != nil {
			s.t.Fatalf("SetWriteDeadline(zero): %v", err)
		}
		if w := await(s, async(s.writeNowAll(e.p, []byte("y"))), "WriteNow after the deadline was cleared"); w.err != nil {
			s.t.Fatalf("WriteNow after the deadline was cleared: %v", w.err)
		}
		if r := await(s, rd, "peer's Read"); r.err != nil || string(r.data) != "y" {
			s.t.Fatalf("peer's Read = %q, %v; want %q", r.data, r.err, "y")
		}
	})
}
