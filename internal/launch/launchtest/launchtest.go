// Package launchtest is for tests of the launcher (internal/launch,
// cmd/starrun, starbench -n): it turns a test binary into a scripted rank
// that leaves error records the way the library does (through
// internal/errfile), exits, panics or hangs, in an order fixed across all
// ranks of the job. The ranks synchronise through files in a directory,
// never through sleeps, and every wait is bounded, so a broken launcher
// fails a test instead of hanging it.
//
// A test package calls MaybeRank first thing in TestMain, and starts the
// launcher on its own test binary (os.Executable) with Env(script, dir)
// added to the ranks' environment.
package launchtest

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/starcomm/starcomm/internal/errfile"
)

// Environment variables that make a test binary a scripted rank.
const (
	// EnvScript holds the script (see Encode).
	EnvScript = "STARCOMM_LAUNCHTEST_SCRIPT"
	// EnvDir is the directory the ranks synchronise through.
	EnvDir = "STARCOMM_LAUNCHTEST_DIR"
)

// Timeout bounds every wait of a scripted rank.
const Timeout = 10 * time.Second

// Step is one action of one rank. The steps of a script run one after the
// other, whatever rank takes them: a step starts once the previous one is
// done, and, when the previous one ended its rank ("exit", "panic",
// "killself"), once that rank's process has been reaped. Being reaped is not
// being seen by the launcher's supervising loop: to be sure the launcher
// has taken a failure in before the next rank ends, put a "stopped" step
// (which waits for the launcher's SIGTERM) before that end.
type Step struct {
	Rank int
	// Do is the action:
	//   "record B"  write an error record blaming rank B (-1: unknown)
	//   "exit N"    exit with code N
	//   "panic"     panic (exit code 2, no record)
	//   "stopped"   wait until the launcher's SIGTERM or SIGINT has come (and live on)
	//   "hang"      wait until the launcher's SIGTERM or SIGINT, then die of it
	//   "killself"  kill itself with SIGKILL
	Do string
}

// Message is the text of the records scripted ranks write when blaming
// rank b; its first line is what a launcher quotes.
func Message(b int) string {
	return fmt.Sprintf("allreduce failed (rank %d): link to rank %d: connection closed by the peer\n\tat step 7", b, b)
}

// Encode returns the script as one string: "rank:action" items separated
// by commas, e.g. "1:record 2,1:exit 1,2:panic".
func Encode(script []Step) string {
	items := make([]string, len(script))
	for i, s := range script {
		items[i] = strconv.Itoa(s.Rank) + ":" + s.Do
	}
	return strings.Join(items, ",")
}

// decode parses Encode's result.
func decode(s string) ([]Step, error) {
	var script []Step
	for _, item := range strings.Split(s, ",") {
		who, do, ok := strings.Cut(item, ":")
		r, err := strconv.Atoi(who)
		if !ok || err != nil {
			return nil, fmt.Errorf("bad step %q", item)
		}
		script = append(script, Step{Rank: r, Do: do})
	}
	return script, nil
}

// Env returns the variables that make ranks act out script, synchronising
// through dir (a fresh directory).
func Env(script []Step, dir string) []string {
	return []string{EnvScript + "=" + Encode(script), EnvDir + "=" + dir}
}

// PidFile is the file where rank r writes its pid in dir once started.
func PidFile(dir string, r int) string { return filepath.Join(dir, fmt.Sprintf("rank%d.pid", r)) }

// ErrorFileNote is the file where rank r writes the value of
// COBRE_ERROR_FILE it was given.
func ErrorFileNote(dir string, r int) string {
	return filepath.Join(dir, fmt.Sprintf("rank%d.errorfile", r))
}

// marker is the file that says step k is done.
func marker(dir string, k int) string { return filepath.Join(dir, fmt.Sprintf("step%d", k)) }

// MaybeRank acts out the script and exits when the process is a scripted
// rank (EnvScript is set); otherwise it returns at once.
func MaybeRank() {
	s, ok := os.LookupEnv(EnvScript)
	if !ok {
		return
	}
	os.Exit(rank(s))
}

// rank acts out this rank's steps of the script s and returns its exit
// code (when it does not die otherwise).
func rank(s string) int {
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "scripted rank: "+format+"\n", args...)
		return 99
	}
	script, err := decode(s)
	if err != nil {
		return fail("%v", err)
	}
	me, err1 := strconv.Atoi(os.Getenv("COBRE_TCP_RANK"))
	size, err2 := strconv.Atoi(os.Getenv("COBRE_TCP_SIZE"))
	dir := os.Getenv(EnvDir)
	if err1 != nil || err2 != nil || dir == "" {
		return fail("no COBRE_TCP_RANK, COBRE_TCP_SIZE or %s", EnvDir)
	}
	// The launcher's stop signal is noted, not obeyed, until a "hang".
	stops := make(chan os.Signal, 2)
	signal.Notify(stops, syscall.SIGTERM, syscall.SIGINT)
	var stoppedBy os.Signal // the first of them, once received
	waitStop := func() error {
		if stoppedBy != nil {
			return nil
		}
		select {
		case stoppedBy = <-stops:
			return nil
		case <-time.After(Timeout):
			return fmt.Errorf("the launcher sent no SIGTERM or SIGINT within %v", Timeout)
		}
	}

	path := os.Getenv(errfile.Env)
	if err := writeAtomic(ErrorFileNote(dir, me), path); err != nil {
		return fail("%v", err)
	}
	if err := writeAtomic(PidFile(dir, me), strconv.Itoa(os.Getpid())); err != nil {
		return fail("%v", err)
	}
	for r := range size {
		if _, err := waitFile(PidFile(dir, r)); err != nil {
			return fail("%v", err)
		}
	}

	for k, step := range script {
		if step.Rank != me {
			continue
		}
		if k > 0 {
			if _, err := waitFile(marker(dir, k-1)); err != nil {
				return fail("step %d: %v", k, err)
			}
			if prev := script[k-1]; prev.Rank != me && endsRank(prev.Do) {
				if err := waitReaped(dir, prev.Rank); err != nil {
					return fail("step %d: %v", k, err)
				}
			}
		}
		done := func() {
			if err := writeAtomic(marker(dir, k), ""); err != nil {
				panic(err)
			}
		}
		verb, arg, _ := strings.Cut(step.Do, " ")
		switch verb {
		case "record":
			b, err := strconv.Atoi(arg)
			if err != nil {
				return fail("bad step %q", step.Do)
			}
			rec := errfile.Record{Time: time.Now(), Rank: me, Size: size, Blamed: b, Op: "allreduce", Message: Message(b), PID: os.Getpid()}
			if b < 0 || b == me {
				rec.Message = fmt.Sprintf("allreduce failed (rank %d): verification failed", me)
			}
			if err := errfile.Write(path, rec); err != nil {
				return fail("%v", err)
			}
			done()
		case "exit":
			code, err := strconv.Atoi(arg)
			if err != nil {
				return fail("bad step %q", step.Do)
			}
			done()
			fmt.Fprintf(os.Stderr, "rank %d exits with code %d\n", me, code)
			return code
		case "panic":
			done()
			panic(fmt.Sprintf("rank %d is broken", me))
		case "killself":
			done()
			killSelf(syscall.SIGKILL)
			time.Sleep(Timeout)
			return fail("SIGKILL did not kill me")
		case "stopped":
			if err := waitStop(); err != nil {
				return fail("%v", err)
			}
			done()
		case "hang":
			done()
			if err := waitStop(); err != nil {
				return fail("%v", err)
			}
			signal.Reset(stoppedBy)
			killSelf(stoppedBy.(syscall.Signal))
			time.Sleep(Timeout)
			return fail("%v did not kill me", stoppedBy)
		default:
			return fail("unknown action %q", step.Do)
		}
	}
	return 0
}

// endsRank reports whether the action do ends its rank by itself.
func endsRank(do string) bool {
	verb, _, _ := strings.Cut(do, " ")
	return verb == "exit" || verb == "panic" || verb == "killself"
}

// waitReaped waits until rank r's process no longer exists (the launcher
// reaped it).
func waitReaped(dir string, r int) error {
	b, err := os.ReadFile(PidFile(dir, r))
	if err != nil {
		return err
	}
	pid, err := strconv.Atoi(string(b))
	if err != nil {
		return err
	}
	deadline := time.Now().Add(Timeout)
	for !reaped(pid) {
		if time.Now().After(deadline) {
			return fmt.Errorf("rank %d (pid %d) was not reaped within %v", r, pid, Timeout)
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

// waitFile polls for the file at path for at most Timeout and returns its
// content.
func waitFile(path string) ([]byte, error) {
	deadline := time.Now().Add(Timeout)
	for {
		b, err := os.ReadFile(path)
		if err == nil {
			return b, nil
		}
		if !errors.Is(err, os.ErrNotExist) || time.Now().After(deadline) {
			return nil, fmt.Errorf("%s did not appear within %v: %w", path, Timeout, err)
		}
		time.Sleep(time.Millisecond)
	}
}

// WaitFile waits, at most Timeout, for the file at path and returns its
// content: for tests waiting on the ranks' files.
func WaitFile(path string) (string, error) {
	b, err := waitFile(path)
	return string(b), err
}

// writeAtomic writes content to path through a temporary file and a
// rename, so a reader never sees it partly written.
func writeAtomic(path, content string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
