//go:build !unix

package launchtest

import (
	"os"
	"syscall"
)

// reaped reports true: outside Unix the scripts do not order ends.
func reaped(int) bool { return true }

// killSelf ends this process as if sig had killed it (exit code 128+sig).
func killSelf(sig syscall.Signal) {
	os.Exit(128 + int(sig))
}
