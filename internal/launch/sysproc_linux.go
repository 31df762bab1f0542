package launch

import "syscall"

// sysProcAttr returns the process attributes of a rank: its own process
// group (so it and its children can be signalled together and do not get the
// terminal's SIGINT directly), and SIGKILL when the launcher dies.
//
// Linux sends Pdeathsig when the thread that started the child exits; the Go
// runtime only ends threads that a goroutine locked and never unlocked,
// which the launcher does not do.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
