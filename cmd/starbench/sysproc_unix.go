//go:build unix && !linux

package main

import "syscall"

// sysProcAttr returns the process attributes of a rank: its own process
// group, so it can be killed as a group and does not get the terminal's
// SIGINT directly. Outside Linux there is no parent-death signal, so ranks
// outlive a starbench that is killed with SIGKILL.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
