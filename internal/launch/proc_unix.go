//go:build unix

package launch

import (
	"os"
	"strconv"
	"syscall"
)

// signalGroup sends sig to the process group that p leads (see
// sysProcAttr), so everything the rank started in its group gets it too,
// and returns the signal sent. If the group is gone (the rank moved itself
// to another group), the rank itself gets sig. SIGCONT follows, so that a
// stopped process (kill -STOP, Ctrl-Z) gets sig now instead of holding it
// pending until SIGKILL; a running one ignores SIGCONT.
func signalGroup(p *os.Process, sig syscall.Signal) syscall.Signal {
	if err := syscall.Kill(-p.Pid, sig); err != nil {
		_ = p.Signal(sig)
		_ = p.Signal(syscall.SIGCONT)
	} else {
		_ = syscall.Kill(-p.Pid, syscall.SIGCONT)
	}
	return sig
}

// killGroup sends SIGKILL to the process group p leads and to p itself.
func killGroup(p *os.Process) {
	_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
	_ = p.Kill()
}

// killLeftovers kills whatever a reaped rank left running in its process
// group. The group id cannot have been reused: this runs right after the
// reap, and a group with members keeps its id.
func killLeftovers(pid int) {
	_ = syscall.Kill(-pid, syscall.SIGKILL)
}

// decodeStatus says how a reaped process ended: its exit code, or the
// signal that killed it (signaled) and whether it dumped core.
func decodeStatus(ps *os.ProcessState) (code int, sig syscall.Signal, signaled, core bool) {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), ws.Signal(), true, ws.CoreDump()
	}
	return ps.ExitCode(), 0, false, false
}

// signalNames maps the signals a rank commonly dies from to their names.
var signalNames = map[syscall.Signal]string{
	syscall.SIGABRT: "SIGABRT",
	syscall.SIGALRM: "SIGALRM",
	syscall.SIGBUS:  "SIGBUS",
	syscall.SIGFPE:  "SIGFPE",
	syscall.SIGHUP:  "SIGHUP",
	syscall.SIGILL:  "SIGILL",
	syscall.SIGINT:  "SIGINT",
	syscall.SIGKILL: "SIGKILL",
	syscall.SIGPIPE: "SIGPIPE",
	syscall.SIGQUIT: "SIGQUIT",
	syscall.SIGSEGV: "SIGSEGV",
	syscall.SIGSYS:  "SIGSYS",
	syscall.SIGTERM: "SIGTERM",
	syscall.SIGTRAP: "SIGTRAP",
	syscall.SIGUSR1: "SIGUSR1",
	syscall.SIGUSR2: "SIGUSR2",
	syscall.SIGXCPU: "SIGXCPU",
	syscall.SIGXFSZ: "SIGXFSZ",
}

// SignalName returns a signal's conventional name ("SIGKILL"), or
// "signal N" for one it does not know.
func SignalName(sig syscall.Signal) string {
	if name, ok := signalNames[sig]; ok {
		return name
	}
	return "signal " + strconv.Itoa(int(sig))
}

// StopSignals are the signals a launcher subscribes to (signal.Notify)
// before it starts the ranks and passes in Config.Signals: SIGINT (Ctrl-C),
// SIGTERM, SIGHUP (the terminal or ssh session closed), SIGQUIT (Ctrl-\,
// which makes Go ranks print their goroutines' stacks) and SIGPIPE. Left to
// their default action, each would end the launcher at once, leaving the
// ranks' children, the job's directory and a shared-memory segment
// behind.
//
// NotifyStops subscribes to them, leaving out those the launcher was
// started with ignored.
var StopSignals = []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGPIPE}

// isSigPipe reports whether s is SIGPIPE.
func isSigPipe(s syscall.Signal) bool { return s == syscall.SIGPIPE }
