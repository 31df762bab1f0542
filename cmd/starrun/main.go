package main

import (
	"io"
	"os"

	"github.com/starcomm/starcomm/internal/launch"
)

// main wires the process's arguments, streams and signals to run.
func main() {
	// Subscribe before any rank starts, so no signal can kill starrun
	// without being forwarded.
	sigs := make(chan os.Signal, 4)
	launch.NotifyStops(sigs)
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, sigs))
}

// run executes one starrun invocation with args (without the program name)
// and returns the process exit code. Ranks inherit the current process
// environment; signals received on sigs (which may be nil) are forwarded to
// them.
func run(args []string, stdout, stderr io.Writer, sigs <-chan os.Signal) int {
	l := &Launcher{Stdout: stdout, Stderr: stderr, Env: os.Environ(), Signals: sigs}
	return l.Run(args)
}
