//go:build !unix

package launch

import (
	"os"
	"strconv"
	"syscall"
)

// sysProcAttr returns nil: outside Unix a rank gets no process group of its
// own.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// signalGroup kills p: outside Unix there are no process groups and no
// signal but the kill to send. It returns SIGKILL, what p was sent.
func signalGroup(p *os.Process, _ syscall.Signal) syscall.Signal {
	_ = p.Kill()
	return syscall.SIGKILL
}

// killGroup kills p (there are no process groups to kill here).
func killGroup(p *os.Process) { _ = p.Kill() }

// killLeftovers does nothing: without process groups there is no way to
// find what a rank left behind.
func killLeftovers(int) {}

// decodeStatus returns a reaped process's exit code; outside Unix no
// process is reported as killed by a signal.
func decodeStatus(ps *os.ProcessState) (code int, sig syscall.Signal, signaled, core bool) {
	return ps.ExitCode(), 0, false, false
}

// SignalName returns a signal's conventional name ("SIGKILL"), or
// "signal N" for one it does not know.
func SignalName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return "signal " + strconv.Itoa(int(sig))
}

// StopSignals are the signals a launcher subscribes to (signal.Notify)
// before it starts the ranks and passes in Config.Signals. Outside Unix:
// os.Interrupt and SIGTERM.
//
// NotifyStops subscribes to them, leaving out those the launcher was
// started with ignored.
var StopSignals = []os.Signal{os.Interrupt, syscall.SIGTERM}

// isSigPipe is false: no SIGPIPE outside Unix.
func isSigPipe(syscall.Signal) bool { return false }
