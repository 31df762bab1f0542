package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/starcomm/starcomm/internal/launch"
)

// Launcher runs starrun jobs through internal/launch: it starts the ranks,
// copies their prefixed output, stops them all when one fails or a signal
// arrives, and names the root cause. The zero value is not usable: Stdout
// and Stderr must be set.
type Launcher struct {
	// Stdout receives the ranks' standard output, each line prefixed.
	Stdout io.Writer
	// Stderr receives the ranks' standard error, each line prefixed, and
	// starrun's own messages.
	Stderr io.Writer
	// Env is the environment every rank starts from; nil means os.Environ().
	Env []string
	// Signals delivers the signals to forward to the ranks (SIGINT and
	// SIGTERM); nil means none.
	Signals <-chan os.Signal
}

// Run runs one job described by args (a command line without the program
// name) and returns starrun's exit code. It returns only after every rank
// has been reaped and its output copied.
func (l *Launcher) Run(args []string) int {
	cfg, err := parseArgs(args)
	if errors.Is(err, flag.ErrHelp) {
		writeHelp(l.Stdout)
		return 0
	}
	if err != nil {
		fmt.Fprintf(l.Stderr, "starrun: %v\n%s\nrun 'starrun -h' for details\n", err, synopsis)
		return exitUsage
	}
	return launch.Run(l.jobConfig(cfg)).Code
}

// jobConfig is the job cfg describes, as internal/launch takes it:
// every output line prefixed, standard output and standard error kept
// apart.
func (l *Launcher) jobConfig(cfg config) launch.Config {
	return launch.Config{
		Name:       "starrun",
		Command:    cfg.command,
		Ranks:      cfg.n,
		Backend:    cfg.backend,
		Port:       cfg.port,
		Timeout:    cfg.timeout,
		Bind:       cfg.bind,
		Grace:      cfg.grace,
		Settle:     cfg.settle,
		WaitNotice: launch.DefaultWaitNotice,
		Env:        l.Env,
		Stdout:     l.Stdout,
		Stderr:     l.Stderr,
		Output:     launch.PrefixAll,
		Signals:    l.Signals,
	}
}
