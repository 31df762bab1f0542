//go:build unix && !linux

package launch

import "syscall"

// sysProcAttr returns the process attributes of a rank: its own process
// group, so it and its children can be signalled together and do not get
// the terminal's SIGINT directly. Outside Linux there is no parent-death
// signal, so ranks outlive a launcher that is killed with SIGKILL.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
