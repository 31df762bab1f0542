package tcp

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// pipeFDs counts this process's open pipe descriptors.
func pipeFDs(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatalf("reading /proc/self/fd: %v", err)
	}
	n := 0
	for _, e := range entries {
		if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(target, "pipe:") {
			n++
		}
	}
	return n
}

// TestWriteSplicedInOrder: headers written with WriteSpliced and payloads
// written with Write and WriteBuffers (and headers twice in a row) reach
// the peer in the order written, byte for byte; WriteSpliced does not
// allocate in steady state.
func TestWriteSplicedInOrder(t *testing.T) {
	a, b := pair(t, testConfig())
	var want bytes.Buffer
	got := async(func() []byte {
		all, _ := io.ReadAll(b)
		return all
	})
	for i, n := range []int{1, 100, 16 << 10, 300_001, 0, 40_000, 2 << 20} {
		hdr := []byte{byte(i), 1, 2, 3, byte(n)}
		payload := bytes.Repeat([]byte{byte(i*7 + 1)}, n)
		if err := a.WriteSpliced(hdr); err != nil {
			t.Fatalf("WriteSpliced before %d bytes: %v", n, err)
		}
		want.Write(hdr)
		if i%3 == 2 { // a second header right after the first
			if err := a.WriteSpliced(hdr[:2]); err != nil {
				t.Fatalf("second WriteSpliced: %v", err)
			}
			want.Write(hdr[:2])
		}
		if i%2 == 0 {
			if _, err := a.Write(payload); err != nil {
				t.Fatalf("Write of %d bytes: %v", n, err)
			}
		} else if _, err := a.WriteBuffers([][]byte{payload[:n/2], payload[n/2:]}); err != nil {
			t.Fatalf("WriteBuffers of %d bytes: %v", n, err)
		}
		want.Write(payload)
	}
	hdr := []byte("abcde")
	allocs := testing.AllocsPerRun(50, func() {
		if err := a.WriteSpliced(hdr); err != nil {
			t.Fatalf("WriteSpliced: %v", err)
		}
		if _, err := a.Write(hdr); err != nil {
			t.Fatalf("Write: %v", err)
		}
	})
	for range 51 { // AllocsPerRun's warm-up run and its 50
		want.Write(hdr)
		want.Write(hdr)
	}
	if allocs != 0 {
		t.Errorf("WriteSpliced allocates %v times per call, want 0", allocs)
	}
	a.Close()
	if all := await(t, got, "reading the peer"); !bytes.Equal(all, want.Bytes()) {
		t.Fatalf("the peer read %d bytes that differ from the %d written", len(all), want.Len())
	}
}

// TestWriteSplicedFailures: a passed write deadline fails WriteSpliced
// with os.ErrDeadlineExceeded and leaves nothing of its bytes to go out
// ahead of later ones; an over-long p is refused before anything is
// written; after Close it fails with net.ErrClosed and the Conn's pipe is
// closed.
func TestWriteSplicedFailures(t *testing.T) {
	before := pipeFDs(t)
	a, b := pair(t, testConfig())
	if err := a.WriteSpliced([]byte("first")); err != nil {
		t.Fatalf("WriteSpliced: %v", err)
	}
	if got := pipeFDs(t) - before; got != 2 {
		t.Fatalf("%d new pipe descriptors after the first WriteSpliced, want 2", got)
	}
	if err := a.SetWriteDeadline(time.Unix(1, 0)); err != nil {
		t.Fatal(err)
	}
	if err := a.WriteSpliced([]byte("stale")); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("WriteSpliced past its deadline: %v, want os.ErrDeadlineExceeded", err)
	}
	if err := a.SetWriteDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	if err := a.WriteSpliced(make([]byte, spliceMax+1)); err == nil || errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("WriteSpliced of %d bytes: %v, want a refusal", spliceMax+1, err)
	}
	if err := a.WriteSpliced([]byte("after")); err != nil {
		t.Fatalf("WriteSpliced after the deadline was lifted: %v", err)
	}
	if _, err := a.Write([]byte("-payload")); err != nil {
		t.Fatalf("Write: %v", err)
	}
	want := "firstafter-payload"
	got := make([]byte, len(want))
	if _, err := io.ReadFull(b, got); err != nil || string(got) != want {
		t.Fatalf("the peer read %q, %v; want %q", got, err, want)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := a.WriteSpliced([]byte("closed")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("WriteSpliced after Close: %v, want net.ErrClosed", err)
	}
	if got := pipeFDs(t); got != before {
		t.Fatalf("%d pipe descriptors after Close, %d before the Conn", got, before)
	}
}

// TestWriteSplicedNoPipe: when no pipe can be made (the process is out of
// descriptors), WriteSpliced writes nothing and says so with
// errors.ErrUnsupported; the connection goes on working. It runs in a
// child process, whose descriptor limit it lowers.
func TestWriteSplicedNoPipe(t *testing.T) {
	if os.Getenv("TCP_SPLICE_NOPIPE_CHILD") != "1" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestWriteSplicedNoPipe$", "-test.v")
		cmd.Env = append(os.Environ(), "TCP_SPLICE_NOPIPE_CHILD=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !bytes.Contains(out, []byte("--- PASS: TestWriteSplicedNoPipe")) {
			t.Fatalf("child: %v\n%s", err, out)
		}
		return
	}
	a, b := pair(t, testConfig())
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	low := lim
	low.Cur = 3 // no new descriptor above stderr
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	err := a.WriteSpliced([]byte("hdr"))
	if rerr := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); rerr != nil {
		t.Fatal(rerr)
	}
	if !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("WriteSpliced without a pipe: %v, want errors.ErrUnsupported", err)
	}
	if _, err := a.Write([]byte("data")); err != nil {
		t.Fatalf("Write: %v", err)
	}
	got := make([]byte, 4)
	if _, err := io.ReadFull(b, got); err != nil || string(got) != "data" {
		t.Fatalf("the peer read %q, %v; want only the Write's \"data\"", got, err)
	}
}

// TestWriteSplicedCloseWhileBlocked: WriteSpliced waiting for room in a
// full socket (the peer reads nothing) returns net.ErrClosed when another
// goroutine closes the Conn, and the pipe goes with the Conn.
func TestWriteSplicedCloseWhileBlocked(t *testing.T) {
	before := pipeFDs(t)
	cfg := testConfig()
	cfg.BufferSize = 16 << 10
	a, _ := pair(t, cfg)
	filler := make([]byte, 64<<10)
	for {
		n, err := a.WriteNow(filler)
		if err != nil {
			t.Fatalf("WriteNow: %v", err)
		}
		if n == 0 {
			break // the send buffer and the peer's receive buffer are full
		}
	}
	done := async(func() error { return a.WriteSpliced([]byte("hdr")) })
	// Close once the pipe exists: WriteSpliced is then waiting in the
	// socket, or about to.
	deadline := time.Now().Add(10 * time.Second)
	for pipeFDs(t) < before+2 {
		if time.Now().After(deadline) {
			t.Fatal("WriteSpliced made no pipe in 10 s")
		}
		runtime.Gosched()
	}
	if err := a.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := await(t, done, "WriteSpliced after Close"); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("WriteSpliced blocked by a full socket, then closed: %v, want net.ErrClosed", err)
	}
	if got := pipeFDs(t); got != before {
		t.Fatalf("%d pipe descriptors after Close, %d before the Conn", got, before)
	}
}
