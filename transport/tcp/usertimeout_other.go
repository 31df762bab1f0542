//go:build !linux

package tcp

import (
	"syscall"
	"time"
)

// setUserTimeout does nothing: TCP_USER_TIMEOUT is Linux-only. Elsewhere a
// dead peer is found by keep-alive and by the caller's deadlines.
func setUserTimeout(syscall.RawConn, time.Duration) error { return nil }
