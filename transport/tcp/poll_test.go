//go:build unix

package tcp

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// readNowAll polls c until it has read want bytes, or fails the test at the
// watchdog.
func readNowAll(t *testing.T, c *Conn, want int) []byte {
	t.Helper()
	got := make([]byte, 0, want)
	buf := make([]byte, want)
	stop := time.Now().Add(watchdog)
	for len(got) < want {
		n, err := c.ReadNow(buf[:want-len(got)])
		if err != nil {
			t.Fatalf("ReadNow after %d of %d bytes: %v", len(got), want, err)
		}
		got = append(got, buf[:n]...)
		if n == 0 {
			if time.Now().After(stop) {
				t.Fatalf("hang: ReadNow found %d of %d bytes within %v", len(got), want, watchdog)
			}
			c.Yield()
		}
	}
	return got
}

func TestReadNow(t *testing.T) {
	a, b := pair(t, testConfig())

	n, err := b.ReadNow(make([]byte, 8))
	if n != 0 || err != nil {
		t.Fatalf("ReadNow on an idle link = %d, %v; want 0, nil (nothing yet, no wait)", n, err)
	}
	if n, err := b.ReadNow(nil); n != 0 || err != nil {
		t.Fatalf("ReadNow(nil) = %d, %v; want 0, nil", n, err)
	}
	if _, err := a.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if got := readNowAll(t, b, 5); string(got) != "hello" {
		t.Fatalf("ReadNow read %q, want %q", got, "hello")
	}
	// ReadNow and Read share the stream.
	if _, err := a.Write([]byte("xy")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 2)
	if _, err := io.ReadFull(b, got); err != nil || string(got) != "xy" {
		t.Fatalf("Read after ReadNow = %q, %v; want %q", got, err, "xy")
	}

	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := pollUntilError(t, b); !errors.Is(err, io.EOF) {
		t.Fatalf("ReadNow after the peer closed: %v, want io.EOF", err)
	}
}

// pollUntilError polls c with ReadNow, expecting no data, until it fails,
// and returns the error; it fails the test at the watchdog.
func pollUntilError(t *testing.T, c *Conn) error {
	t.Helper()
	buf := make([]byte, 1)
	stop := time.Now().Add(watchdog)
	for {
		n, err := c.ReadNow(buf)
		if n != 0 {
			t.Fatalf("ReadNow read %d bytes the peer never sent", n)
		}
		if err != nil {
			return err
		}
		if time.Now().After(stop) {
			t.Fatal("hang: ReadNow never saw the peer go")
		}
		c.Yield()
	}
}

func TestReadNowDeadlineAndClose(t *testing.T) {
	_, b := pair(t, testConfig())
	if err := b.SetReadDeadline(time.Unix(1, 0)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ReadNow(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("ReadNow past the read deadline: %v, want os.ErrDeadlineExceeded", err)
	}
	if err := b.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if _, err := b.ReadNow(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("ReadNow after Close: %v, want net.ErrClosed", err)
	}
	if _, err := b.WriteNow([]byte{1}); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("WriteNow after Close: %v, want net.ErrClosed", err)
	}
}

func TestReadNowReset(t *testing.T) {
	a, b := pair(t, testConfig())
	if err := a.SetLinger(0); err != nil {
		t.Fatal(err)
	}
	a.Close() // linger 0: the close sends RST
	if err := pollUntilError(t, b); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("ReadNow after a reset: %v, want syscall.ECONNRESET", err)
	}
}

func TestWriteNow(t *testing.T) {
	cfg := testConfig()
	cfg.BufferSize = 64 << 10
	a, b := pair(t, cfg)
	if n, err := a.WriteNow(nil); n != 0 || err != nil {
		t.Fatalf("WriteNow(nil) = %d, %v; want 0, nil", n, err)
	}
	// Nobody reads b: WriteNow takes what fits, then 0 bytes, never
	// waiting.
	chunk := make([]byte, 256<<10)
	for i := range chunk {
		chunk[i] = byte(i * 7)
	}
	var sent []byte
	for tries := 0; ; tries++ {
		n, err := a.WriteNow(chunk)
		if err != nil {
			t.Fatalf("WriteNow: %v", err)
		}
		sent = append(sent, chunk[:n]...)
		if n == 0 {
			break
		}
		if tries > 1000 {
			t.Fatalf("WriteNow took %d bytes without filling a %d-byte buffer", len(sent), cfg.BufferSize)
		}
	}
	if len(sent) == 0 {
		t.Fatal("WriteNow wrote nothing to an empty send buffer")
	}
	// Everything WriteNow said it wrote arrives, in order.
	got := make([]byte, len(sent))
	done := make(chan error, 1)
	go func() { _, err := io.ReadFull(b, got); done <- err }()
	if err := await(t, done, "reading what WriteNow sent"); err != nil {
		t.Fatal(err)
	}
	for i := range sent {
		if got[i] != sent[i] {
			t.Fatalf("byte %d: got %d, sent %d", i, got[i], sent[i])
		}
	}
}

func TestPollerAllocations(t *testing.T) {
	a, b := pair(t, testConfig())
	buf := make([]byte, 16)
	msg := []byte("0123456789abcdef")
	allocs := testing.AllocsPerRun(100, func() {
		if n, err := a.WriteNow(msg); n != len(msg) || err != nil {
			t.Fatalf("WriteNow = %d, %v", n, err)
		}
		for got := 0; got < len(msg); {
			n, err := b.ReadNow(buf[got:])
			if err != nil {
				t.Fatal(err)
			}
			got += n
		}
		b.ReadNow(buf) // nothing there: the EAGAIN path
	})
	if allocs != 0 {
		t.Fatalf("ReadNow and WriteNow allocate %v times per round trip, want 0", allocs)
	}
}

// TestNowDeadlines checks that ReadNow and WriteNow keep the deadlines set
// through the Conn as Read and Write do: a passed one fails them with a
// timeout even when data waits, one not yet passed or cleared does not, a
// deadline without a monotonic reading counts on the wall clock, and one
// set in the near future fails them no earlier than it passes.
func TestNowDeadlines(t *testing.T) {
	a, b := pair(t, testConfig())
	if n, err := a.WriteNow([]byte("waiting")); n != 7 || err != nil {
		t.Fatalf("WriteNow = %d, %v", n, err)
	}
	isTimeout := func(what string, err error) {
		t.Helper()
		var ne net.Error
		if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("%s: %v, want a timeout satisfying os.ErrDeadlineExceeded", what, err)
		}
	}
	buf := make([]byte, 16)

	// Past, with bytes waiting: a timeout, and the bytes stay.
	for _, past := range []time.Time{time.Unix(1, 0), time.Now().Add(-time.Second), time.Now().Add(-time.Second).Round(0)} {
		if err := b.SetReadDeadline(past); err != nil {
			t.Fatal(err)
		}
		_, err := b.ReadNow(buf)
		isTimeout("ReadNow past its deadline "+past.String(), err)
	}
	if err := b.SetDeadline(time.Now().Add(-time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	_, err := b.ReadNow(buf)
	isTimeout("ReadNow past SetDeadline's deadline", err)
	_, err = b.WriteNow(buf)
	isTimeout("WriteNow past SetDeadline's deadline", err)

	// Future (monotonic, wall clock only, far beyond any clock) or none:
	// the bytes that waited.
	for _, future := range []time.Time{time.Now().Add(time.Hour), time.Now().Add(time.Hour).Round(0), time.Unix(1<<62, 0), {}} {
		if err := b.SetDeadline(future); err != nil {
			t.Fatal(err)
		}
		if n, err := b.WriteNow([]byte("x")); n != 1 || err != nil {
			t.Fatalf("WriteNow with deadline %v = %d, %v", future, n, err)
		}
	}
	if got := string(readNowAll(t, b, 7)); got != "waiting" {
		t.Fatalf("ReadNow after the deadlines were lifted read %q, want %q", got, "waiting")
	}

	// A write deadline does not touch reads, nor a read deadline writes.
	if err := a.SetWriteDeadline(time.Unix(1, 0)); err != nil {
		t.Fatal(err)
	}
	_, err = a.WriteNow(buf)
	isTimeout("WriteNow past its deadline", err)
	if got := string(readNowAll(t, a, 4)); got != "xxxx" {
		t.Fatalf("ReadNow with only a passed write deadline read %q, want the %q b sent", got, "xxxx")
	}

	// Near future: ReadNow polls until the deadline, and fails at it, not
	// before.
	dl := time.Now().Add(20 * time.Millisecond)
	if err := b.SetReadDeadline(dl); err != nil {
		t.Fatal(err)
	}
	stop := time.Now().Add(watchdog)
	for {
		n, err := b.ReadNow(buf)
		if err != nil {
			if now := time.Now(); now.Before(dl) {
				t.Fatalf("ReadNow failed %v before its deadline: %v", dl.Sub(now), err)
			}
			isTimeout("ReadNow at its deadline", err)
			break
		}
		if n != 0 {
			t.Fatalf("ReadNow read %d bytes nobody sent", n)
		}
		if time.Now().After(stop) {
			t.Fatalf("hang: ReadNow still polled %v after its deadline", time.Since(dl))
		}
		b.Yield()
	}
}

// TestNowAfterCloseLeavesReusedDescriptor checks that ReadNow and WriteNow
// after Close fail with net.ErrClosed and do not touch the file that the
// closed socket's descriptor number now names.
func TestNowAfterCloseLeavesReusedDescriptor(t *testing.T) {
	_, b := pair(t, testConfig())
	fd := int(b.fd)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	// The lowest free number is taken first: a pipe made now gets the
	// socket's number in one of its ends (unless another goroutine of the
	// test binary took it first; then nothing here can reach it either).
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	if ends := []int{int(pr.Fd()), int(pw.Fd())}; ends[0] != fd && ends[1] != fd {
		t.Logf("the pipe took descriptors %v, not the socket's %d", ends, fd)
	}
	if _, err := pw.Write([]byte("pipe")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ReadNow(make([]byte, 4)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("ReadNow after Close: %v, want net.ErrClosed", err)
	}
	if _, err := b.WriteNow([]byte("sock")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("WriteNow after Close: %v, want net.ErrClosed", err)
	}
	pw.Close() // the read below then ends after what the pipe holds
	got, err := io.ReadAll(pr)
	if err != nil || string(got) != "pipe" {
		t.Fatalf("the pipe holds %q (%v), want %q: ReadNow or WriteNow used the closed socket's number", got, err, "pipe")
	}
}

// TestCloseDuringNow closes a Conn from another goroutine while one polls
// it with ReadNow and WriteNow: each call returns data, nothing, or
// net.ErrClosed, and the poller ends (run with -race).
func TestCloseDuringNow(t *testing.T) {
	for round := range 20 {
		a, b := pair(t, testConfig())
		done := make(chan error, 1)
		started := make(chan struct{})
		go func() {
			buf := make([]byte, 64)
			for i := 0; ; i++ {
				if i == 10 {
					close(started)
				}
				if _, err := b.WriteNow(buf); err != nil {
					done <- err
					return
				}
				if _, err := b.ReadNow(buf); err != nil {
					done <- err
					return
				}
				b.Yield()
			}
		}()
		go func() { _, _ = a.Write(make([]byte, 1024)) }()
		<-started
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		if err := await(t, done, "the poller to end after Close"); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("round %d: polling ended with %v, want net.ErrClosed", round, err)
		}
	}
}

// TestDeadlineTimersEndAtClose checks that Close stops the timers of
// ReadNow's and WriteNow's deadlines and that a deadline set after Close
// starts none.
func TestDeadlineTimersEndAtClose(t *testing.T) {
	_, b := pair(t, testConfig())
	if err := b.SetDeadline(time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if b.rdl.timer == nil || b.wdl.timer == nil {
		t.Fatal("SetDeadline an hour ahead started no timer")
	}
	b.Close()
	_ = b.SetDeadline(time.Now().Add(time.Hour))
	for _, d := range []*nowDeadline{&b.rdl, &b.wdl} {
		if d.timer.Stop() {
			t.Fatal("a deadline's timer runs after Close")
		}
	}
}
