package main

import "syscall"

// sysProcAttr returns the process attributes of a rank: its own process
// group (so it can be killed as a group and does not get the terminal's
// SIGINT directly) and SIGKILL when starbench dies.
//
// Linux sends Pdeathsig when the thread that started the child exits; the
// Go runtime only ends threads that a goroutine locked and never unlocked,
// which starbench does not do.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
