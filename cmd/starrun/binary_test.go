//go:build unix

package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// built caches the starrun binary built for the tests that run it as a real
// process, to exercise main's signal wiring and the parent-death signal.
var built struct {
	once sync.Once
	path string
	err  error
}

// starrunBinary builds starrun once into a temporary directory (removed by
// TestMain) and returns its path, skipping the test when no go command is
// available.
func starrunBinary(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build starrun with")
	}
	built.once.Do(func() {
		dir, err := os.MkdirTemp("", "starrun-test-")
		if err != nil {
			built.err = err
			return
		}
		built.path = filepath.Join(dir, "starrun")
		out, err := exec.Command(goTool, "build", "-o", built.path, ".").CombinedOutput()
		if err != nil {
			built.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.path
}

// processJob is starrun running as a real process over fake ranks.
type processJob struct {
	cmd            *exec.Cmd
	dir            string
	stdout, stderr bytes.Buffer
}

// startProcess starts the starrun binary with n fake ranks following plan.
func startProcess(t *testing.T, n int, plan string) *processJob {
	t.Helper()
	bin := starrunBinary(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := &processJob{dir: t.TempDir()}
	killLeftovers(t, p.dir)
	p.cmd = exec.Command(bin, "-n", fmt.Sprint(n), "--grace", "10s", "--", self)
	p.cmd.Env = append(os.Environ(), envPlan+"="+plan, envDir+"="+p.dir, fastRaceExit())
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.cmd.Process.Kill() })
	return p
}

// rankPids waits for the pid files of n ranks and returns their pids.
func (p *processJob) rankPids(t *testing.T, n int) []int {
	t.Helper()
	pids := make([]int, n)
	for r := range pids {
		pid, err := waitPidFile(filepath.Join(p.dir, fmt.Sprintf("rank%d.pid", r)), jobTimeout)
		if err != nil {
			t.Fatal(err)
		}
		pids[r] = pid
	}
	return pids
}

// wait waits for starrun to exit, at most jobTimeout, and returns its exit
// status.
func (p *processJob) wait(t *testing.T) *os.ProcessState {
	t.Helper()
	done := make(chan struct{})
	go func() {
		_ = p.cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
		return p.cmd.ProcessState
	case <-time.After(jobTimeout):
		t.Fatalf("starrun did not exit within %v", jobTimeout)
		return nil
	}
}

// TestProcessForwardsSignals: SIGINT, SIGHUP (the terminal closed) and
// SIGQUIT (Ctrl-\) sent to the starrun process reach every rank and the
// processes the ranks started; starrun reaps them and exits as the first
// rank to end did (128 + the signal's number, 2 for a Go rank's SIGQUIT).
func TestProcessForwardsSignals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		sig  syscall.Signal
		name string // as starrun writes it
		code int
	}{
		{syscall.SIGINT, "SIGINT", 130},
		{syscall.SIGHUP, "SIGHUP", 129},
		// A Go program left to SIGQUIT's default prints its goroutines'
		// stacks and exits 2 (the fake ranks are Go).
		{syscall.SIGQUIT, "SIGQUIT", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const n = 3
			p := startProcess(t, n, "*=grandchild")
			pids := p.rankPids(t, n)
			var grandchildren []int
			for r := range n {
				pid, err := waitPidFile(filepath.Join(p.dir, fmt.Sprintf("grandchild%d.pid", r)), jobTimeout)
				if err != nil {
					t.Fatal(err)
				}
				grandchildren = append(grandchildren, pid)
			}
			if err := p.cmd.Process.Signal(tc.sig); err != nil {
				t.Fatal(err)
			}
			state := p.wait(t)
			if got := state.ExitCode(); got != tc.code {
				t.Errorf("exit code = %d (%v), want %d; stderr:\n%s", got, state, tc.code, p.stderr.String())
			}
			if want := "starrun: received " + tc.name + "; forwarding it to all ranks\n"; !strings.Contains(p.stderr.String(), want) {
				t.Errorf("stderr lacks %q:\n%s", want, p.stderr.String())
			}
			// starrun reaped its ranks before exiting, so they are gone for good.
			for r, pid := range pids {
				requireReaped(t, fmt.Sprintf("rank %d", r), pid)
			}
			for r, pid := range grandchildren {
				requireGone(t, "grandchild", pid)
				if got := grandchildSignal(p.dir, r); got != tc.sig.String() {
					t.Errorf("grandchild of rank %d recorded signal %q, want %q", r, got, tc.sig.String())
				}
			}
		})
	}
}

// TestProcessOutputClosed: starrun whose standard output is a pipe that
// its reader closed (starrun ... | head) is not killed by SIGPIPE: it says
// so, stops the ranks with SIGTERM, reaps them, removes the job's
// directory and exits 143.
func TestProcessOutputClosed(t *testing.T) {
	t.Parallel()
	bin := starrunBinary(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, tmp := t.TempDir(), t.TempDir()
	killLeftovers(t, dir)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-n", "2", "--grace", "10s", "--", self)
	cmd.Env = append(os.Environ(), envPlan+"=*=spam", envDir+"="+dir, fastRaceExit(), "TMPDIR="+tmp)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = w, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	_ = w.Close()
	p := &processJob{cmd: cmd, dir: dir}
	pids := p.rankPids(t, 2)
	line := make([]byte, 10)
	if _, err := r.Read(line); err != nil { // the output flows
		t.Fatal(err)
	}
	_ = r.Close() // | head has what it wanted
	state := p.wait(t)
	if state.Sys().(syscall.WaitStatus).Signaled() {
		t.Fatalf("starrun was killed by %v; stderr:\n%s", state, stderr.String())
	}
	if got := state.ExitCode(); got != 143 {
		t.Errorf("exit code = %d, want 143 (the ranks' SIGTERM); stderr:\n%s", got, stderr.String())
	}
	if want := "starrun: its output is a closed pipe (SIGPIPE); stopping ranks 0, 1 with SIGTERM\n"; !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
	}
	for r, pid := range pids {
		requireReaped(t, fmt.Sprintf("rank %d", r), pid)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("starrun left %d entries in its temporary directory (%s, ...)", len(left), left[0].Name())
	}
}

func TestProcessKilledTakesRanksAlong(t *testing.T) {
	t.Parallel()
	const n = 3
	p := startProcess(t, n, "*=hang")
	pids := p.rankPids(t, n)
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if state := p.wait(t); state.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("starrun ended with %v, want killed by SIGKILL", state)
	}
	// The parent-death signal kills the orphaned ranks.
	for r, pid := range pids {
		requireGone(t, fmt.Sprintf("rank %d", r), pid)
	}
}
