package tcp

import (
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// sockInt reads an int socket option of c.
func sockInt(t *testing.T, c *Conn, level, opt int) int {
	t.Helper()
	var v int
	var gerr error
	if err := c.rc.Control(func(fd uintptr) { v, gerr = syscall.GetsockoptInt(int(fd), level, opt) }); err != nil {
		t.Fatal(err)
	}
	if gerr != nil {
		t.Fatal(gerr)
	}
	return v
}

// TestSetPeerTimeout: SetPeerTimeout(d) sets TCP_USER_TIMEOUT to d and
// keep-alive probes from d/2, every d/10 (whole seconds, at least 1);
// SetPeerTimeout(0) restores the Config's settings.
func TestSetPeerTimeout(t *testing.T) {
	cfg := DefaultConfig()
	cfg.BindAddr = "127.0.0.1"
	cfg.Timeout, cfg.KeepAlive = 90*time.Second, 15*time.Second
	ln, err := Listen(cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			c.Close()
		}
		done <- err
	}()
	dc, err := NewDialer(cfg).Dial(t.Context(), net.JoinHostPort("127.0.0.1", strconv.Itoa(ln.Port())))
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	c := dc.(*Conn)
	const keepIdle, keepIntvl = 0x4, 0x5 // TCP_KEEPIDLE, TCP_KEEPINTVL
	check := func(user time.Duration, idle, intvl int) {
		t.Helper()
		if got := sockInt(t, c, syscall.IPPROTO_TCP, tcpUserTimeout); got != int(user/time.Millisecond) {
			t.Errorf("TCP_USER_TIMEOUT %d ms, want %v", got, user)
		}
		if got := sockInt(t, c, syscall.IPPROTO_TCP, keepIdle); got != idle {
			t.Errorf("TCP_KEEPIDLE %d s, want %d", got, idle)
		}
		if got := sockInt(t, c, syscall.IPPROTO_TCP, keepIntvl); got != intvl {
			t.Errorf("TCP_KEEPINTVL %d s, want %d", got, intvl)
		}
		if got := sockInt(t, c, syscall.SOL_SOCKET, syscall.SO_KEEPALIVE); got != 1 {
			t.Errorf("SO_KEEPALIVE %d, want on", got)
		}
	}
	check(90*time.Second, 15, 15)
	for _, tc := range []struct {
		d           time.Duration
		idle, intvl int
	}{{10 * time.Second, 5, 1}, {2 * time.Second, 1, 1}, {100 * time.Second, 50, 10}, {100 * time.Hour, 32767, 32767}} {
		if err := c.SetPeerTimeout(tc.d); err != nil {
			t.Fatalf("SetPeerTimeout(%v): %v", tc.d, err)
		}
		check(min(tc.d, MaxUserTimeout), tc.idle, tc.intvl)
	}
	if err := c.SetPeerTimeout(0); err != nil {
		t.Fatal(err)
	}
	check(90*time.Second, 15, 15)
}
