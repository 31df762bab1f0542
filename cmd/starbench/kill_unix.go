//go:build unix

package main

import (
	"os"
	"syscall"
)

// killGroup sends SIGKILL to p's process group (p leads its own group, see
// ranks.SysProcAttr) and to p itself.
func killGroup(p *os.Process) {
	_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
	_ = p.Kill()
}
