package tcp

import (
	"syscall"
	"testing"
	"time"
)

// checkPlatformOptions checks the Linux-only options: TCP_USER_TIMEOUT and
// the keep-alive timing.
func checkPlatformOptions(t *testing.T, c *Conn, cfg Config) {
	t.Helper()
	if got, want := getsockopt(t, c, syscall.IPPROTO_TCP, tcpUserTimeout), int(cfg.Timeout/time.Millisecond); got != want {
		t.Errorf("TCP_USER_TIMEOUT = %dms, want %dms", got, want)
	}
	want := int(cfg.KeepAlive / time.Second)
	if got := getsockopt(t, c, syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE); got != want {
		t.Errorf("TCP_KEEPIDLE = %ds, want %ds", got, want)
	}
	if got := getsockopt(t, c, syscall.IPPROTO_TCP, syscall.TCP_KEEPINTVL); got != want {
		t.Errorf("TCP_KEEPINTVL = %ds, want %ds", got, want)
	}
}
