//go:build unix

package launchtest

import (
	"errors"
	"os"
	"syscall"
)

// reaped reports whether pid no longer exists (a zombie still does).
func reaped(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// killSelf sends sig to this process.
func killSelf(sig syscall.Signal) {
	_ = syscall.Kill(os.Getpid(), sig)
}
