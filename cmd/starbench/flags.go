package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	joblaunch "github.com/starcomm/starcomm/internal/launch"
)

// Exit codes of starbench.
const (
	exitOK      = 0
	exitFailure = 1 // a rank failed (collective error, verification) or could not start
	exitUsage   = 2 // bad command line
	// exitPeerFailed is a rank's exit code when its collective failed
	// because another rank failed first (crashed, hung, exited). starbench
	// -n names the root cause from the ranks' error records
	// (COBRE_ERROR_FILE); this code is only a hint for when no record
	// decides.
	exitPeerFailed = 3
)

// maxRepeatsScale bounds --repeats-scale so repetitions stay countable.
const maxRepeatsScale = 1000

// synopsis is the one-line usage shown with every usage error.
const synopsis = "usage: starbench [-n N] [--backend tcp|shm] [--workloads NAME,...] [--repeats-scale F] [--json] [--timeout S] [--raw] [--profile DIR] [--trace DIR]"

// options is one validated starbench command line.
type options struct {
	n         int        // ranks to start; 0: run as one rank of an existing job
	backend   string     // with -n: tcp or shm
	workloads []workload // never empty
	scale     float64    // repeats multiplier, > 0
	json      bool       // print JSON instead of the table
	timeout   float64    // collective timeout in seconds; 0: not given
	raw       bool       // run over the raw relay (rawComm), not starcomm
	profile   string     // directory for each rank's CPU profile; "": none
	trace     string     // directory for each rank's execution trace; "": none
}

// flagValues are the raw flag values before validation.
type flagValues struct {
	n         int
	backend   string
	workloads string
	scale     float64
	json      bool
	timeout   float64
	raw       bool
	profile   string
	trace     string
}

// newFlagSet returns starbench's flag set, silent so the caller decides
// where errors and help go, storing into v.
func newFlagSet(v *flagValues) *flag.FlagSet {
	fs := flag.NewFlagSet("starbench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.IntVar(&v.n, "n", 0, "start N ranks as child processes over TCP on 127.0.0.1 (at least 1); without -n, run as one rank configured by COBRE_* variables")
	fs.StringVar(&v.backend, "backend", "tcp", "with -n: the ranks' backend, tcp (a coordinator on 127.0.0.1) or shm (a shared-memory segment); without -n the COBRE_* variables choose")
	fs.StringVar(&v.workloads, "workloads", "", "comma-separated workloads to run (default: all the standard ones): "+strings.Join(workloadNames(), ",")+"; also allreduce-64MiB, late-1ms, late-10ms, late-1s (only when named)")
	fs.Float64Var(&v.scale, "repeats-scale", 1, "multiply every workload's repetitions by F (> 0, at most 1000; at least 1 repetition runs)")
	fs.BoolVar(&v.json, "json", false, "print one JSON document instead of the table")
	fs.Float64Var(&v.timeout, "timeout", 0, "collective timeout in seconds ("+joblaunch.TimeoutRange+", decimals allowed), passed to the ranks as COBRE_TCP_TIMEOUT_SECS or COBRE_SHM_TIMEOUT_SECS (default: the library's 60 s)")
	fs.BoolVar(&v.raw, "raw", false, "run the workloads over a minimal relay instead of starcomm: the same bytes through the same TCP sockets via rank 0, with no framing, checks, timeouts or polling (the lower bound of a star; a baseline, not for use)")
	fs.StringVar(&v.profile, "profile", "", "write each rank's CPU profile of the timed workloads to DIR/cpu-rank<R>.pprof (for go tool pprof); DIR must exist")
	fs.StringVar(&v.trace, "trace", "", "write each rank's execution trace of the timed workloads to DIR/trace-rank<R>.out (for go tool trace); DIR must exist")
	return fs
}

// workloadNames lists the standard workloads' names in their default order.
func workloadNames() []string {
	var names []string
	for _, w := range standardWorkloads() {
		names = append(names, w.name)
	}
	return names
}

// parseArgs parses and validates a command line (without the program
// name). It returns flag.ErrHelp when help was asked for, and otherwise an
// error naming the offending flag.
func parseArgs(args []string) (options, error) {
	var v flagValues
	fs := newFlagSet(&v)
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })

	switch {
	case fs.NArg() > 0:
		return options{}, fmt.Errorf("unexpected argument %q: starbench takes only flags", fs.Arg(0))
	case given["n"] && v.n < 1:
		return options{}, fmt.Errorf("-n must be at least 1, got %d", v.n)
	case v.backend != "tcp" && v.backend != "shm":
		return options{}, fmt.Errorf("--backend must be tcp or shm, got %q", v.backend)
	case given["n"] && v.n > joblaunch.MaxRanks(v.backend):
		return options{}, fmt.Errorf("-n is %d; the %s backend takes at most %d ranks", v.n, v.backend, joblaunch.MaxRanks(v.backend))
	case given["backend"] && !given["n"]:
		return options{}, errors.New("--backend needs -n: one rank of an existing job takes its backend from the COBRE_* variables")
	case v.backend == "shm" && v.raw:
		return options{}, errors.New("--raw is the relay over tcp; it does not combine with --backend shm")
	case math.IsNaN(v.scale) || v.scale <= 0 || v.scale > maxRepeatsScale:
		return options{}, fmt.Errorf("--repeats-scale must be a number > 0 and at most %d, got %v", maxRepeatsScale, v.scale)
	case given["timeout"] && !joblaunch.TimeoutOK(v.timeout):
		limit := "COBRE_TCP_TIMEOUT_SECS"
		if v.backend == "shm" {
			limit = "COBRE_SHM_TIMEOUT_SECS"
		}
		return options{}, fmt.Errorf("--timeout must be a number of seconds in %s, as %s, got %s", joblaunch.TimeoutRange, limit, strconv.FormatFloat(v.timeout, 'f', -1, 64))
	case given["workloads"] && strings.TrimSpace(v.workloads) == "":
		return options{}, errors.New("--workloads is empty: name at least one workload, or leave the flag out for all")
	}
	for _, d := range []struct{ flag, dir string }{{"profile", v.profile}, {"trace", v.trace}} {
		if d.dir == "" {
			continue
		}
		if fi, err := os.Stat(d.dir); err != nil || !fi.IsDir() {
			return options{}, fmt.Errorf("--%s must name an existing directory, got %q", d.flag, d.dir)
		}
	}
	ws, err := selectWorkloads(v.workloads)
	if err != nil {
		return options{}, err
	}
	return options{n: v.n, backend: v.backend, workloads: ws, scale: v.scale, json: v.json, timeout: v.timeout, raw: v.raw, profile: absPath(v.profile), trace: absPath(v.trace)}, nil
}

// rankArgs returns the command line a rank started by starbench -n gets:
// the same workloads, scale and output format, without -n and --backend
// (the backend and the timeout travel as COBRE_* variables).
func rankArgs(o options) []string {
	names := make([]string, len(o.workloads))
	for i, w := range o.workloads {
		names[i] = w.name
	}
	args := []string{"--workloads", strings.Join(names, ","), "--repeats-scale", strconv.FormatFloat(o.scale, 'g', -1, 64)}
	if o.json {
		args = append(args, "--json")
	}
	if o.raw {
		args = append(args, "--raw")
	}
	if o.profile != "" {
		args = append(args, "--profile", o.profile)
	}
	if o.trace != "" {
		args = append(args, "--trace", o.trace)
	}
	return args
}

// absPath makes dir absolute ("" stays ""), so that ranks started in
// another directory write where the user asked.
func absPath(dir string) string {
	if dir == "" {
		return ""
	}
	if abs, err := filepath.Abs(dir); err == nil {
		return abs
	}
	return dir
}

// writeHelp writes the full usage text to w.
func writeHelp(w io.Writer) {
	var v flagValues
	fs := newFlagSet(&v)
	fmt.Fprintln(w, synopsis)
	fmt.Fprintln(w, "\nBenchmarks starcomm's collectives on the standard workloads.")
	fmt.Fprintln(w, "With -n N it starts N ranks of itself over TCP on 127.0.0.1 (--backend shm: through a shared-memory")
	fmt.Fprintln(w, "segment); without -n it is one rank")
	fmt.Fprintln(w, "of a job started by starrun (or any launcher setting COBRE_* variables).")
	fmt.Fprintln(w, "\nFlags (- and -- are equivalent):")
	fs.SetOutput(w)
	fs.PrintDefaults()
	fmt.Fprintln(w, "\nWorkloads:")
	for _, wl := range standardWorkloads() {
		fmt.Fprintf(w, "  %-17s %3d repeats  %s\n", wl.name, wl.repeats, wl.about)
	}
	fmt.Fprintln(w, "\nRun only when --workloads names them:")
	for _, wl := range lateWorkloads() {
		fmt.Fprintf(w, "  %-17s %3d repeats  %s\n", wl.name, wl.repeats, wl.about)
	}
}
