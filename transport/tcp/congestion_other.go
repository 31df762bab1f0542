//go:build !linux

package tcp

import "syscall"

// congestionSettable reports whether this system has TCP_CONGESTION (as
// used here: Linux only).
const congestionSettable = false

func congestion(syscall.RawConn) string { return "" }

func setCongestion(syscall.RawConn, string) bool { return false }
