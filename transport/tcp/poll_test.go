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
