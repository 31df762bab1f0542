//go:build unix

package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/starcomm/starcomm/internal/errfile"
	"github.com/starcomm/starcomm/internal/launch/launchtest"
)

// The test binary doubles as the fake rank: starrun is pointed at it with
// envPlan set, and TestMain then acts out the plan instead of running tests.
const (
	// envPlan holds the fake ranks' plan: comma-separated rank=action pairs,
	// with "*" for every rank not named, e.g. "2=exit3,*=hang".
	envPlan = "STARRUN_TEST_CHILD"
	// envDir is the directory the fake ranks write their pid files to.
	envDir = "STARRUN_TEST_DIR"
	// envGrandchild makes the process a grandchild that writes its pid to the
	// file named by the value and sleeps.
	envGrandchild = "STARRUN_TEST_GRANDCHILD"
	// envGrandchildIgnoreTerm makes that grandchild ignore SIGTERM.
	envGrandchildIgnoreTerm = "STARRUN_TEST_GRANDCHILD_IGNORE_TERM"
)

// fakeTimeout bounds every wait inside a fake rank, so a broken test ends.
const fakeTimeout = 10 * time.Second

// TestMain runs the tests, or acts as a fake rank or grandchild, or as a
// scripted rank of internal/launch/launchtest.
func TestMain(m *testing.M) {
	launchtest.MaybeRank()
	if path := os.Getenv(envGrandchild); path != "" {
		os.Exit(fakeGrandchild(path))
	}
	if plan := os.Getenv(envPlan); plan != "" {
		os.Exit(fakeRank(plan))
	}
	// Under nohup, or as a script's background job, this process starts
	// with SIGHUP or SIGINT ignored, and every child would inherit that
	// (starrun then keeps them ignored, as it should), so the tests of a
	// starrun that catches them would fail. A caught signal is reset to
	// its default in a child: catching them here (and dropping them, as
	// they were ignored) starts every child as from a terminal.
	for _, sig := range []os.Signal{syscall.SIGHUP, syscall.SIGINT} {
		if signal.Ignored(sig) {
			signal.Notify(make(chan os.Signal, 1), sig)
		}
	}
	code := m.Run()
	if built.path != "" {
		os.RemoveAll(filepath.Dir(built.path))
	}
	os.Exit(code)
}

// fakeRank acts out this rank's action from plan and returns its exit code.
//
// Actions: env (print the COBRE_* variables and exit 0), exitN (exit N once
// every rank is ready), killself (SIGKILL itself once every rank is ready),
// hang, ignoreterm (ignore SIGTERM and hang), grandchild and
// grandchild-ignoreterm (start a grandchild, optionally both ignoring
// SIGTERM, and hang), trapint7 (exit 7 on SIGINT), partial (write lines
// without a final newline), long (write a 200 KiB line), chatty (write many
// lines quickly), spam (write a line every millisecond until killed). A
// rank is ready once its pid file exists.
func fakeRank(plan string) int {
	rank, _ := strconv.Atoi(os.Getenv("COBRE_TCP_RANK"))
	size, _ := strconv.Atoi(os.Getenv("COBRE_TCP_SIZE"))
	dir := os.Getenv(envDir)
	action := planAction(plan, rank)
	ready := func() {
		if dir != "" {
			writePidFile(filepath.Join(dir, fmt.Sprintf("rank%d.pid", rank)), os.Getpid())
		}
	}
	waitAllReady := func() {
		for r := 0; r < size && dir != ""; r++ {
			if _, err := waitPidFile(filepath.Join(dir, fmt.Sprintf("rank%d.pid", r)), fakeTimeout); err != nil {
				fmt.Fprintln(os.Stderr, "fake rank:", err)
				os.Exit(99)
			}
		}
	}

	switch {
	case action == "env":
		fmt.Printf("rank=%s port=%s size=%s backend=%s coord=%s timeout=%s bind=%s connect=%s errfile=%s\n",
			envOr("COBRE_TCP_RANK"), envOr("COBRE_TCP_PORT"), envOr("COBRE_TCP_SIZE"),
			envOr("COBRE_COMM_BACKEND"), envOr("COBRE_TCP_COORDINATOR"), envOr("COBRE_TCP_TIMEOUT_SECS"),
			envOr("COBRE_TCP_BIND_ADDR"), envOr("COBRE_TCP_CONNECT_TIMEOUT_MS"), filepath.Base(envOr(errfile.Env)))
		fmt.Fprintf(os.Stderr, "stderr of rank %d\n", rank)
		return 0
	case strings.HasPrefix(action, "exit"):
		code, err := strconv.Atoi(strings.TrimPrefix(action, "exit"))
		if err != nil {
			return 98
		}
		ready()
		waitAllReady()
		return code
	case action == "killself":
		ready()
		waitAllReady()
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		time.Sleep(fakeTimeout)
		return 97
	case action == "hang":
		ready()
	case action == "ignoreterm":
		signal.Ignore(syscall.SIGTERM)
		ready()
	case action == "orphan":
		path := filepath.Join(dir, fmt.Sprintf("grandchild%d.pid", rank))
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), envGrandchild+"="+path)
		if err := cmd.Start(); err != nil {
			fmt.Fprintln(os.Stderr, "fake rank:", err)
			return 96
		}
		if _, err := waitPidFile(path, fakeTimeout); err != nil {
			fmt.Fprintln(os.Stderr, "fake rank:", err)
			return 95
		}
		ready()
		return 0
	case strings.HasPrefix(action, "grandchild"):
		ignore := action == "grandchild-ignoreterm"
		sigs := make(chan os.Signal, 1)
		if ignore {
			signal.Ignore(syscall.SIGTERM)
		} else {
			signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
		}
		path := filepath.Join(dir, fmt.Sprintf("grandchild%d.pid", rank))
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), envGrandchild+"="+path)
		if ignore {
			cmd.Env = append(cmd.Env, envGrandchildIgnoreTerm+"=1")
		}
		if err := cmd.Start(); err != nil {
			fmt.Fprintln(os.Stderr, "fake rank:", err)
			return 96
		}
		if _, err := waitPidFile(path, fakeTimeout); err != nil {
			fmt.Fprintln(os.Stderr, "fake rank:", err)
			return 95
		}
		ready()
		if !ignore {
			// Like a well-behaved wrapper: let the grandchild finish, then
			// die from the signal.
			select {
			case sig := <-sigs:
				_ = cmd.Wait()
				signal.Reset(sig)
				_ = syscall.Kill(os.Getpid(), sig.(syscall.Signal))
			case <-time.After(fakeTimeout):
			}
		}
	case action == "trapint7":
		ints := make(chan os.Signal, 1)
		signal.Notify(ints, os.Interrupt)
		ready()
		select {
		case <-ints:
			return 7
		case <-time.After(fakeTimeout):
			return 94
		}
	case action == "partial":
		os.Stdout.WriteString("first\nno newline")
		os.Stderr.WriteString("err partial")
		return 0
	case action == "long":
		os.Stdout.WriteString(strings.Repeat("x", 200<<10) + "\nafter\n")
		return 0
	case action == "chatty":
		for i := range chattyLines {
			fmt.Println(chattyLine(rank, i))
		}
		return 0
	case action == "spam":
		ready()
		deadline := time.Now().Add(fakeTimeout)
		for i := 0; time.Now().Before(deadline); i++ {
			fmt.Println(chattyLine(rank, i))
			time.Sleep(time.Millisecond)
		}
		return 90
	default:
		fmt.Fprintf(os.Stderr, "fake rank: unknown action %q\n", action)
		return 93
	}
	// Hang until killed; the bound only matters when the test is broken.
	time.Sleep(fakeTimeout)
	return 92
}

// fakeGrandchild is a process a fake rank started: it writes its pid to
// path and waits. Unless told to ignore SIGTERM, it records the first SIGINT
// or SIGTERM it gets in path+".signal" and exits 0.
func fakeGrandchild(path string) int {
	sigs := make(chan os.Signal, 1)
	if os.Getenv(envGrandchildIgnoreTerm) != "" {
		signal.Ignore(syscall.SIGTERM)
	} else {
		signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	}
	writePidFile(path, os.Getpid())
	select {
	case sig := <-sigs:
		writeFileAtomic(path+".signal", sig.String())
		return 0
	case <-time.After(fakeTimeout):
		return 91
	}
}

// chattyLines is how many lines a chatty fake rank writes.
const chattyLines = 500

// chattyLine is line i of chatty rank r: about 100 bytes that name both.
func chattyLine(r, i int) string {
	s := fmt.Sprintf("rank %d line %d ", r, i)
	return s + strings.Repeat(strconv.Itoa(r), 100-len(s))
}

// planAction returns rank's action in plan.
func planAction(plan string, rank int) string {
	def := ""
	for _, item := range strings.Split(plan, ",") {
		who, action, _ := strings.Cut(item, "=")
		if who == "*" {
			def = action
		} else if r, err := strconv.Atoi(who); err == nil && r == rank {
			return action
		}
	}
	return def
}

// envOr returns the value of key, or "<unset>".
func envOr(key string) string {
	if v, ok := os.LookupEnv(key); ok {
		return v
	}
	return "<unset>"
}

// writePidFile writes pid to path atomically (write, then rename), so a
// reader never sees a partial file.
func writePidFile(path string, pid int) {
	writeFileAtomic(path, strconv.Itoa(pid))
}

// writeFileAtomic writes content to path through a temporary file and a
// rename.
func writeFileAtomic(path, content string) {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		panic(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		panic(err)
	}
}

// waitPidFile polls for the pid file at path for at most timeout.
func waitPidFile(path string, timeout time.Duration) (int, error) {
	deadline := time.Now().Add(timeout)
	for {
		b, err := os.ReadFile(path)
		if err == nil {
			return strconv.Atoi(string(b))
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%s did not appear within %v", path, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// gone reports whether pid no longer runs: it does not exist, or it is a
// zombie its new parent (init in a container) has not reaped.
func gone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	// The state follows the command name, which is in parentheses.
	fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return len(fields) > 0 && fields[0] == "Z"
}

// requireReaped fails unless pid does not exist at all: a process starrun
// started must have been reaped, not left as a zombie.
func requireReaped(t *testing.T, what string, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("%s (pid %d) still exists after starrun returned: kill(pid, 0) = %v", what, pid, err)
	}
}

// requireGone fails unless pid stops running within a few seconds; it is for
// processes starrun signals but does not reap (grandchildren, ranks of a
// killed starrun), whose death is asynchronous.
func requireGone(t *testing.T, what string, pid int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for !gone(pid) {
		if time.Now().After(deadline) {
			t.Errorf("%s (pid %d) is still running", what, pid)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// killLeftovers registers a cleanup that, if the test failed, SIGKILLs every
// process whose pid file is in dir, so one broken test does not leave
// processes behind.
func killLeftovers(t *testing.T, dir string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		files, _ := filepath.Glob(filepath.Join(dir, "*.pid"))
		for _, f := range files {
			if b, err := os.ReadFile(f); err == nil {
				if pid, err := strconv.Atoi(string(b)); err == nil && pid > 0 {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
	})
}

// grandchildSignal returns what the grandchild of rank r recorded about the
// signal it got (e.g. "terminated"), or "" if it recorded nothing.
func grandchildSignal(dir string, r int) string {
	b, _ := os.ReadFile(filepath.Join(dir, fmt.Sprintf("grandchild%d.pid.signal", r)))
	return string(b)
}
