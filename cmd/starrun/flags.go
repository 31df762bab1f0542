package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/starcomm/starcomm/internal/launch"
	"github.com/starcomm/starcomm/transport/tcp"
)

// Exit codes of starrun's own failures; see the package documentation for the
// codes that come from the ranks.
const (
	exitLaunchError = launch.ExitLaunchError // the job could not be set up (free port, directory, pipes)
	exitUsage       = 2                      // bad command line
	exitCannotExec  = launch.ExitCannotExec  // the command exists but could not be started
	exitNotFound    = launch.ExitNotFound    // the command was not found
)

// defaultGrace is how long ranks get between SIGTERM and SIGKILL unless
// --grace says otherwise.
const defaultGrace = launch.DefaultGrace

// synopsis is the one-line usage shown with every usage error.
const synopsis = "usage: starrun -n N [--backend tcp|shm] [--port P] [--timeout S] [--bind ADDR] [--grace D] [--settle D] -- CMD [ARGS...]"

// config is one validated starrun command line.
type config struct {
	n           int           // number of ranks, at least 1
	backend     string        // tcp or shm
	port        int           // coordinator port; 0 means pick a free one
	timeout     float64       // COBRE_TCP_TIMEOUT_SECS, in seconds; 0 means not given
	timeoutText string        // --timeout as given, for messages
	bind        string        // COBRE_TCP_BIND_ADDR; "" means not given
	grace       time.Duration // time between SIGTERM and SIGKILL when stopping
	settle      time.Duration // time the others get to end on their own after the first failure
	command     []string      // the program and its arguments, never empty
}

// newFlagSet returns starrun's flag set, silent so the caller decides where
// errors and help go, with its values stored in cfg.
func newFlagSet(cfg *config) *flag.FlagSet {
	fs := flag.NewFlagSet("starrun", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.IntVar(&cfg.n, "n", 0, "number of ranks to start (required, at least 1; at most 1048576, or 32768 with shm)")
	fs.StringVar(&cfg.backend, "backend", launch.BackendTCP, "how the ranks talk: tcp (a coordinator on 127.0.0.1) or shm (a shared-memory segment named for the job, COBRE_SHM_NAME)")
	fs.IntVar(&cfg.port, "port", 0, "coordinator TCP port passed as COBRE_TCP_PORT, 0..65535; 0 picks a free port")
	fs.Var(&floatText{&cfg.timeout, &cfg.timeoutText}, "timeout", "collective timeout in `seconds`, decimals allowed, "+launch.TimeoutRange+", passed as COBRE_TCP_TIMEOUT_SECS (COBRE_SHM_TIMEOUT_SECS with --backend shm); unset if not given")
	fs.StringVar(&cfg.bind, "bind", "", "address the coordinator listens on, passed as COBRE_TCP_BIND_ADDR, which workers dial (0.0.0.0: 127.0.0.1; ::: ::1); default: an inherited COBRE_TCP_BIND_ADDR, else 127.0.0.1")
	cfg.grace, cfg.settle = defaultGrace, launch.DefaultSettle
	fs.Var((*durationFlag)(&cfg.grace), "grace", "time ranks get between SIGTERM and SIGKILL when the job is stopped, with its unit (a `duration` such as 5s, 500ms or 1m)")
	fs.Var((*durationFlag)(&cfg.settle), "settle", "time the other ranks get to end on their own after the first one fails, before they are stopped, with its unit (a `duration` such as 5s or 500ms)")
	return fs
}

// parseArgs parses and validates a command line (without the program name).
// It returns flag.ErrHelp when help was asked for, and otherwise an error
// naming the offending flag.
func parseArgs(args []string) (config, error) {
	var cfg config
	fs := newFlagSet(&cfg)
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })

	switch {
	case !given["n"]:
		return config{}, errors.New("-n is required: give the number of ranks, e.g. -n 4")
	case cfg.n < 1:
		return config{}, fmt.Errorf("-n must be at least 1, got %d", cfg.n)
	case cfg.backend != launch.BackendTCP && cfg.backend != launch.BackendShm:
		return config{}, fmt.Errorf("--backend must be tcp or shm, got %q", cfg.backend)
	case cfg.n > launch.MaxRanks(cfg.backend):
		return config{}, fmt.Errorf("-n is %d; the %s backend takes at most %d ranks", cfg.n, cfg.backend, launch.MaxRanks(cfg.backend))
	case cfg.backend == launch.BackendShm && (given["port"] || given["bind"]):
		return config{}, errors.New("--port and --bind are for --backend tcp; shm ranks use no socket")
	case cfg.port < 0 || cfg.port > 65535:
		return config{}, fmt.Errorf("--port must be in 0..65535 (0 picks a free port), got %d", cfg.port)
	case given["timeout"] && !launch.TimeoutOK(cfg.timeout):
		return config{}, fmt.Errorf("--timeout must be a number of seconds in %s, got %s", launch.TimeoutRange, cfg.timeoutText)
	case given["bind"] && cfg.bind == "":
		return config{}, errors.New("--bind must not be empty")
	case given["bind"] && checkBind(cfg.bind) != nil:
		return config{}, checkBind(cfg.bind)
	case cfg.grace < 0:
		return config{}, fmt.Errorf("--grace must not be negative, got %v", cfg.grace)
	case cfg.settle < 0:
		return config{}, fmt.Errorf("--settle must not be negative, got %v", cfg.settle)
	case fs.NArg() == 0:
		return config{}, errors.New("no command given: put the program to run after --, e.g. starrun -n 2 -- ./prog")
	}
	cfg.command = fs.Args()
	return cfg, nil
}

// checkBind refuses a --bind value that rank 0 could never listen on: one
// with a port (that is --port), or one that is neither an IP address (an
// IPv6 one with or without brackets) nor a well-formed host name.
func checkBind(bind string) error {
	if _, port, err := net.SplitHostPort(bind); err == nil {
		return fmt.Errorf("--bind takes an address without a port (give the port with --port %s), got %q", port, bind)
	}
	host := bind
	if inner, ok := strings.CutPrefix(bind, "["); ok {
		inner, closed := strings.CutSuffix(inner, "]")
		if a, err := netip.ParseAddr(inner); !closed || err != nil || !a.Is6() {
			return fmt.Errorf("--bind: brackets must enclose an IPv6 address, such as [::1], got %q", bind)
		}
		host = inner
	}
	if err := tcp.CheckHost(host); err != nil {
		return fmt.Errorf("--bind must be an IP address or host name of this host: %v", err)
	}
	return nil
}

// floatText is a flag holding a float64 (any form strconv.ParseFloat
// takes: 7, 1.5, 1e-3) that keeps the text it was given, so that a
// message quotes the value as the user wrote it.
type floatText struct {
	v    *float64
	text *string
}

// String returns the text given, "" when none was.
func (f *floatText) String() string {
	if f == nil || f.text == nil {
		return ""
	}
	return *f.text
}

// Set parses s, refusing what is not a number and saying what the flag
// takes (a duration with a unit, such as 5s, is the usual slip).
func (f *floatText) Set(s string) error {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		if _, derr := time.ParseDuration(s); derr == nil {
			return errors.New("takes a number of seconds without a unit (5, 1.5)")
		}
		return errors.New("not a number of seconds (5, 1.5)")
	}
	*f.v, *f.text = v, s
	return nil
}

// durationFlag is a time.Duration flag (the forms time.ParseDuration
// takes: 5s, 500ms, 1m30s) whose parse error says what it takes, where
// the flag package's own says "parse error".
type durationFlag time.Duration

// String returns the duration, as time.Duration prints it.
func (d *durationFlag) String() string {
	if d == nil {
		return "0s"
	}
	return time.Duration(*d).String()
}

// Set parses s.
func (d *durationFlag) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		if _, ferr := strconv.ParseFloat(s, 64); ferr == nil {
			return errors.New("takes a duration with its unit (5s, 500ms), not a bare number")
		}
		return errors.New("not a duration (5s, 500ms, 1m)")
	}
	*d = durationFlag(v)
	return nil
}

// writeHelp writes the full usage text, with every flag and its default, to w.
func writeHelp(w io.Writer) {
	var cfg config
	fs := newFlagSet(&cfg)
	fmt.Fprintln(w, synopsis)
	fmt.Fprintln(w, "\nStarts N local ranks of CMD wired to a TCP coordinator on 127.0.0.1 (or, with --backend shm, to a")
	fmt.Fprintln(w, "shared-memory segment unique to the job) through COBRE_* variables.")
	fmt.Fprintln(w, "When a rank fails, stops the others and, once all have exited, names the root cause from the")
	fmt.Fprintln(w, "ranks' error records (COBRE_ERROR_FILE) and exits with its code.")
	fmt.Fprintln(w, "\nFlags (- and -- are equivalent):")
	fs.SetOutput(w)
	fs.PrintDefaults()
}
