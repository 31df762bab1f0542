//go:build !unix

package ranks

import "syscall"

// SysProcAttr returns nil: outside Unix a rank gets no process group of its
// own.
func SysProcAttr() *syscall.SysProcAttr { return nil }
