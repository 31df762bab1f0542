package tcp

import (
	"runtime"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fdOf runs f on c's descriptor.
func fdOf(t *testing.T, c *Conn, f func(fd int)) {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatalf("SyscallConn: %v", err)
	}
	if err := rc.Control(func(fd uintptr) { f(int(fd)) }); err != nil {
		t.Fatalf("Control: %v", err)
	}
}

// readable reports whether poll(2) finds c readable now.
func readable(t *testing.T, c *Conn) bool {
	t.Helper()
	var ev int16
	fdOf(t, c, func(fd int) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, 0); err != nil {
			t.Fatalf("poll: %v", err)
		}
		ev = fds[0].Revents
	})
	return ev&unix.POLLIN != 0
}

// queued waits until c's receive queue holds n bytes (SIOCINQ).
func queued(t *testing.T, c *Conn, n int) {
	t.Helper()
	end := time.Now().Add(5 * time.Second)
	for {
		var inq int
		fdOf(t, c, func(fd int) {
			v, err := unix.IoctlGetInt(fd, unix.SIOCINQ)
			if err != nil {
				t.Fatalf("SIOCINQ: %v", err)
			}
			inq = v
		})
		if inq == n {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("receive queue holds %d bytes, want %d", inq, n)
		}
		runtime.Gosched()
	}
}

// TestSetReadLowWater: the mark is SO_RCVLOWAT. With 10 bytes queued, the
// socket is not readable to a poller under a mark of 1000 (a waiting read
// sleeps), is under a mark of 10 and under the default restored by 1 (and
// by 0); a read under a high mark still returns what is there. The socket's
// own value, read back, agrees with every mark set, the cached ones (a
// value already set is not set again) included.
func TestSetReadLowWater(t *testing.T) {
	d, a := pair(t, DefaultConfig())
	if got := getsockopt(t, a, syscall.SOL_SOCKET, syscall.SO_RCVLOWAT); got > 1 {
		t.Fatalf("SO_RCVLOWAT before any call = %d, want the default (1)", got)
	}
	if err := a.SetReadLowWater(1000); err != nil {
		t.Fatalf("SetReadLowWater(1000): %v", err)
	}
	if got := getsockopt(t, a, syscall.SOL_SOCKET, syscall.SO_RCVLOWAT); got != 1000 {
		t.Fatalf("SO_RCVLOWAT = %d, want 1000", got)
	}
	if _, err := d.Write(make([]byte, 10)); err != nil {
		t.Fatalf("Write: %v", err)
	}
	queued(t, a, 10)
	if readable(t, a) {
		t.Fatal("readable with 10 bytes queued under a mark of 1000")
	}
	for _, mark := range []int{10, 1000, 1, 1000, 0} {
		if err := a.SetReadLowWater(mark); err != nil {
			t.Fatalf("SetReadLowWater(%d): %v", mark, err)
		}
		want := max(mark, 1)
		if got := getsockopt(t, a, syscall.SOL_SOCKET, syscall.SO_RCVLOWAT); got != want {
			t.Fatalf("after SetReadLowWater(%d): SO_RCVLOWAT = %d, want %d", mark, got, want)
		}
		if got := readable(t, a); got != (want <= 10) {
			t.Fatalf("mark %d, 10 bytes queued: readable = %v", mark, got)
		}
	}
	if err := a.SetReadLowWater(1000); err != nil {
		t.Fatalf("SetReadLowWater(1000): %v", err)
	}
	buf := make([]byte, 100)
	_ = a.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := a.Read(buf); n != 10 || err != nil {
		t.Fatalf("Read under a mark of 1000 with 10 bytes queued = %d, %v; want 10, nil", n, err)
	}
	// A read that waits under a mark equal to what is still to come (as
	// star sets it) wakes once it has all come: 990 bytes in two writes.
	if err := a.SetReadLowWater(990); err != nil {
		t.Fatalf("SetReadLowWater(990): %v", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = d.Write(make([]byte, 500))
		_, _ = d.Write(make([]byte, 490))
	}()
	buf = make([]byte, 2000)
	_ = a.SetReadDeadline(time.Now().Add(5 * time.Second))
	for total := 0; total < 990; {
		n, err := a.Read(buf)
		if err != nil {
			t.Fatalf("Read after %d of 990 bytes: %v", total, err)
		}
		total += n
	}
	<-done
	if err := a.SetReadLowWater(1); err != nil {
		t.Fatalf("SetReadLowWater(1): %v", err)
	}
}
