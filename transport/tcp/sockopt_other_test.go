//go:build unix && !linux

package tcp

import "testing"

// checkPlatformOptions has nothing more to check outside Linux.
func checkPlatformOptions(*testing.T, *Conn, Config) {}
