//go:build !unix

package main

import (
	"os"
	"syscall"
)

// sysProcAttr returns nil: outside Unix a rank gets no process group of
// its own.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// killGroup kills p (there are no process groups to kill here).
func killGroup(p *os.Process) { _ = p.Kill() }
