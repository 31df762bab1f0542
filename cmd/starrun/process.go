package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"

	"github.com/starcomm/starcomm/internal/ranks"
)

// rank is one started rank process. Its fields are owned by the job's
// supervise loop, apart from the ones set before the waiter starts.
type rank struct {
	id     int
	cmd    *exec.Cmd
	pid    int  // also the rank's process-group id
	exited bool // its exit has been received by the supervise loop
}

// exitEvent reports that a rank's process has ended and been reaped.
type exitEvent struct {
	rank  *rank
	state *os.ProcessState // nil when waiting failed
	err   error            // the error from Wait when state is nil
}

// rankEnv returns the environment of rank r: base without the variables
// starrun sets, followed by those variables. Unless base sets GOMAXPROCS,
// each rank gets GOMAXPROCS = max(1, CPUs / ranks) (see ranks.GoMaxProcs).
func rankEnv(base []string, cfg config, port, r int) []string {
	set := []string{
		"COBRE_COMM_BACKEND=tcp",
		"COBRE_TCP_COORDINATOR=127.0.0.1",
		"COBRE_TCP_PORT=" + strconv.Itoa(port),
		"COBRE_TCP_RANK=" + strconv.Itoa(r),
		"COBRE_TCP_SIZE=" + strconv.Itoa(cfg.n),
	}
	if cfg.timeout > 0 {
		set = append(set, "COBRE_TCP_TIMEOUT_SECS="+strconv.Itoa(cfg.timeout))
	}
	if cfg.bind != "" {
		set = append(set, "COBRE_TCP_BIND_ADDR="+cfg.bind)
	}
	if kv, ok := ranks.GoMaxProcs(base, cfg.n, runtime.NumCPU()); ok {
		set = append(set, kv)
	}
	return ranks.Env(base, set...)
}

// startCode is the exit code starrun uses when a rank cannot be started:
// 127 when the command does not exist, 126 when it cannot be executed, 1
// when something else (a pipe, fork) failed.
func startCode(err error) int {
	var execErr *exec.Error
	switch {
	case errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist):
		return exitNotFound
	case errors.As(err, &execErr) || errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.ENOEXEC):
		return exitCannotExec
	default:
		return exitLaunchError
	}
}

// exitStatus turns a rank's end into starrun's exit code for it (the exit
// code, or 128+signal number when a signal killed it) and a description
// such as "exited with code 3" or "was killed by signal SIGKILL".
func exitStatus(ev exitEvent) (code int, what string) {
	if ev.state == nil {
		return exitLaunchError, fmt.Sprintf("could not be waited for: %v", ev.err)
	}
	if ws, ok := ev.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		what = "was killed by signal " + signalName(ws.Signal())
		if ws.CoreDump() {
			what += " (core dumped)"
		}
		return 128 + int(ws.Signal()), what
	}
	code = ev.state.ExitCode()
	return code, fmt.Sprintf("exited with code %d", code)
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

// signalName returns a signal's conventional name ("SIGKILL"), or
// "signal N" for one not in signalNames.
func signalName(sig syscall.Signal) string {
	if name, ok := signalNames[sig]; ok {
		return name
	}
	return "signal " + strconv.Itoa(int(sig))
}

// signalGroup sends sig to the rank's process group, so everything the rank
// started in its group gets it too. If the group is gone (the rank moved
// itself to another group), the rank itself gets sig.
func (r *rank) signalGroup(sig syscall.Signal) {
	if err := syscall.Kill(-r.pid, sig); err != nil {
		_ = r.cmd.Process.Signal(sig)
	}
}

// kill sends SIGKILL to the rank's process group and to the rank itself.
func (r *rank) kill() {
	_ = syscall.Kill(-r.pid, syscall.SIGKILL)
	_ = r.cmd.Process.Kill()
}
