//go:build unix

package tcp

import (
	"syscall"
	"testing"
	"time"
)

// getsockopt reads an integer socket option of c through its raw descriptor.
func getsockopt(t *testing.T, c *Conn, level, opt int) int {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatalf("SyscallConn: %v", err)
	}
	var v int
	var gerr error
	if err := rc.Control(func(fd uintptr) { v, gerr = syscall.GetsockoptInt(int(fd), level, opt) }); err != nil {
		t.Fatalf("Control: %v", err)
	}
	if gerr != nil {
		t.Fatalf("getsockopt(%d, %d): %v", level, opt, gerr)
	}
	return v
}

// TestSocketOptions reads back the options on both ends of a connection.
// The buffer size asked for is small enough to stay under Linux's default
// net.core.wmem_max and rmem_max (about 208 KiB), which would otherwise cap
// it; Linux reports twice the size set, so the check is "at least".
func TestSocketOptions(t *testing.T) {
	cfg := testConfig()
	cfg.BufferSize = 128 << 10
	cfg.KeepAlive = 7 * time.Second
	cfg.Timeout = 3 * time.Second
	dialed, accepted := pair(t, cfg)
	for _, side := range []struct {
		name string
		c    *Conn
	}{{"dialed", dialed}, {"accepted", accepted}} {
		t.Run("side="+side.name, func(t *testing.T) {
			if got := getsockopt(t, side.c, syscall.IPPROTO_TCP, syscall.TCP_NODELAY); got == 0 {
				t.Error("TCP_NODELAY is off")
			}
			if got := getsockopt(t, side.c, syscall.SOL_SOCKET, syscall.SO_KEEPALIVE); got == 0 {
				t.Error("SO_KEEPALIVE is off")
			}
			if got := getsockopt(t, side.c, syscall.SOL_SOCKET, syscall.SO_SNDBUF); got < cfg.BufferSize {
				t.Errorf("SO_SNDBUF = %d, want at least %d", got, cfg.BufferSize)
			}
			if got := getsockopt(t, side.c, syscall.SOL_SOCKET, syscall.SO_RCVBUF); got < cfg.BufferSize {
				t.Errorf("SO_RCVBUF = %d, want at least %d", got, cfg.BufferSize)
			}
			checkPlatformOptions(t, side.c, cfg)
		})
	}
}

func TestKeepAliveOff(t *testing.T) {
	cfg := testConfig()
	cfg.KeepAlive = -1
	dialed, accepted := pair(t, cfg)
	for _, c := range []*Conn{dialed, accepted} {
		if got := getsockopt(t, c, syscall.SOL_SOCKET, syscall.SO_KEEPALIVE); got != 0 {
			t.Errorf("SO_KEEPALIVE = %d with KeepAlive < 0, want 0", got)
		}
	}
}
