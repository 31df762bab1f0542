package main

import (
	"io"
	"os"

	joblaunch "github.com/starcomm/starcomm/internal/launch"
)

// launchConfig is the job starbench -n runs through internal/launch
// (imported as joblaunch: launch is starbench's function): o.n ranks of
// command over TCP on 127.0.0.1 (rank 0 bound to 127.0.0.1), or through a
// shared-memory segment with o.backend shm, starting from
// the environment env. Rank 0's standard output (the
// results) goes to stdout unchanged, every other line to stderr prefixed
// with "[r] ". A rank exiting with exitPeerFailed says another rank failed
// first, which the blame rule uses when no error record decides.
func launchConfig(o options, command, env []string, stdout, stderr io.Writer, signals <-chan os.Signal) joblaunch.Config {
	return joblaunch.Config{
		Name:           "starbench",
		Command:        command,
		Ranks:          o.n,
		Backend:        o.backend,
		Timeout:        o.timeout,
		Bind:           joblaunch.Coordinator,
		Grace:          joblaunch.DefaultGrace,
		Settle:         joblaunch.DefaultSettle,
		Env:            env,
		Stdout:         stdout,
		Stderr:         stderr,
		Output:         joblaunch.Rank0Stdout,
		Signals:        signals,
		PeerFailedCode: exitPeerFailed,
	}
}

// exitCode is starbench's exit code for a job's result: 0 when every rank
// exited 0, 128+n when signal n stopped the job, exitFailure when a rank
// failed or could not start (the launcher's last line names the root
// cause).
func exitCode(res joblaunch.Result) int {
	switch {
	case res.Interrupted != 0:
		return 128 + int(res.Interrupted)
	case res.Code == 0:
		return exitOK
	default:
		return exitFailure
	}
}
