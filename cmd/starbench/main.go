package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/starcomm/starcomm"
	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/internal/cpuinfo"
	joblaunch "github.com/starcomm/starcomm/internal/launch"
)

// main wires the process's arguments, streams and signals to run.
func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes one starbench invocation with args (without the program
// name) and returns the process exit code: with -n it launches the ranks,
// without it it is one rank.
func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseArgs(args)
	if errors.Is(err, flag.ErrHelp) {
		writeHelp(stdout)
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "starbench: %v\n%s\nrun 'starbench -h' for details\n", err, synopsis)
		return exitUsage
	}
	if o.n > 0 {
		return launch(o, stdout, stderr)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return runRank(ctx, o, stdout, stderr)
}

// launch starts o.n ranks of this executable and supervises them through
// internal/launch (see launchConfig), returning starbench's exit code.
func launch(o options, stdout, stderr io.Writer) int {
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "starbench: cannot find my own executable to start the ranks: %v\n", err)
		return exitFailure
	}
	// Subscribe before any rank starts, so no signal can kill starbench
	// without the ranks being stopped too.
	sigs := make(chan os.Signal, 4)
	joblaunch.NotifyStops(sigs)
	defer signal.Stop(sigs)
	command := append([]string{exe}, rankArgs(o)...)
	return exitCode(joblaunch.Run(launchConfig(o, command, os.Environ(), stdout, stderr, sigs)))
}

// runRank is one rank: it builds the communicator from the COBRE_*
// variables, runs the workloads and, on rank 0, prints the results.
func runRank(ctx context.Context, o options, stdout, stderr io.Writer) int {
	cfg, err := starcomm.ConfigFromEnv()
	if err != nil {
		starcomm.RecordConfigError(cfg, err) // for the launcher: this rank's configuration
		fmt.Fprintf(stderr, "starbench: %v\n", err)
		return exitFailure
	}
	if o.timeout > 0 {
		cfg.Timeout = time.Duration(o.timeout * float64(time.Second))
		cfg.ShmTimeout = cfg.Timeout
	}
	var c comm.Communicator
	if o.raw {
		c, err = newRaw(ctx, cfg)
	} else {
		c, err = starcomm.New(ctx, cfg)
	}
	if err != nil {
		fmt.Fprintf(stderr, "starbench: rank %d: %v\n", cfg.Rank, err)
		return exitFailure
	}
	stopProfiles, err := startProfiles(o, c.Rank())
	if err != nil {
		fmt.Fprintf(stderr, "starbench: rank %d: %v\n", c.Rank(), err)
		return exitFailure
	}
	results, err := runWorkloads(ctx, c, o.workloads, o.scale)
	if perr := stopProfiles(); perr != nil {
		fmt.Fprintf(stderr, "starbench: rank %d: %v\n", c.Rank(), perr)
	}
	if err != nil {
		// No graceful Close: exiting closes the connections, so this rank
		// is gone before the others notice and fail in turn.
		fmt.Fprintf(stderr, "starbench: rank %d: %v\n", c.Rank(), err)
		return failureCode(c.Rank(), err)
	}
	if err := c.Close(); err != nil {
		fmt.Fprintf(stderr, "starbench: rank %d: close: %v\n", c.Rank(), err)
		return exitFailure
	}
	if c.Rank() != 0 {
		return exitOK
	}
	info := runInfo{
		Date:         time.Now(),
		GoVersion:    runtime.Version(),
		GOOS:         runtime.GOOS,
		GOARCH:       runtime.GOARCH,
		CPUs:         runtime.NumCPU(),
		CPUModel:     cpuinfo.Model(),
		Backend:      backendName(cfg, o.raw),
		Ranks:        c.Size(),
		RepeatsScale: o.scale,
		PeakRSS:      peakRSS(),
	}
	write := writeTable
	if o.json {
		write = writeJSON
	}
	if err := write(stdout, info, results); err != nil {
		fmt.Fprintf(stderr, "starbench: writing the results: %v\n", err)
		return exitFailure
	}
	return exitOK
}

// failureCode is the exit code of a rank whose run failed with err:
// exitPeerFailed when a collective failed because of another rank,
// exitFailure otherwise (its own verification, its own context, ...).
func failureCode(rank int, err error) int {
	var cfe *comm.CollectiveFailedError
	if errors.As(err, &cfe) && cfe.Rank >= 0 && cfe.Rank != rank {
		return exitPeerFailed
	}
	return exitFailure
}

// backendName is the backend cfg selects (what "auto" resolves to).
func backendName(cfg starcomm.Config, raw bool) string {
	if raw {
		return "raw relay over tcp"
	}
	return cfg.SelectedBackend()
}
