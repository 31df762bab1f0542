//go:build unix

package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/starcomm/starcomm/internal/launch/launchtest"
)

// rootCauseRuns is how many jobs TestRootCauseOfPanic runs.
const rootCauseRuns = 20

// panicSummary is starrun's last line when rank 2 (pid pid2) panicked and
// ranks 0, 1 and 3 blamed it, and rank first failed first.
func panicSummary(pid2, first int) string {
	quote := strconv.Quote(strings.SplitN(launchtest.Message(2), "\n", 2)[0] + " ...")
	s := fmt.Sprintf("starrun: rank 2 (pid %d) exited with code 2: root cause (blamed by ranks 0, 1, 3: %s)", pid2, quote)
	if first != 2 {
		s += fmt.Sprintf("; rank %d failed first", first)
	}
	return s
}

// checkPanicJob checks starrun's exit code and messages after a job of
// launchtest.PanicScenario whose ranks wrote their files in dir, and
// returns the rank starrun saw fail first, which must be wantFirst.
func checkPanicJob(t *testing.T, code int, stderr, dir string, wantFirst int) (first int) {
	t.Helper()
	pids := make([]int, 4)
	for r := range pids {
		b, err := os.ReadFile(launchtest.PidFile(dir, r))
		if err != nil {
			t.Fatal(err)
		}
		pids[r], _ = strconv.Atoi(string(b))
	}
	if code != 2 {
		t.Errorf("exit code = %d, want 2 (rank 2's); stderr:\n%s", code, stderr)
	}
	msgs := starrunLines(stderr)
	if len(msgs) != 2 {
		t.Fatalf("starrun's messages = %q, want the first failure and the root cause; stderr:\n%s", msgs, stderr)
	}
	first = -1
	for r, pid := range pids {
		if strings.HasPrefix(msgs[0], fmt.Sprintf("starrun: rank %d (pid %d) ", r, pid)) && strings.HasSuffix(msgs[0], "; stopping the other ranks") {
			first = r
		}
	}
	if first != wantFirst {
		t.Errorf("first message %q, want it to name rank %d (pid %d)", msgs[0], wantFirst, pids[wantFirst])
	}
	if first < 0 {
		t.Fatalf("first message %q names no rank", msgs[0])
	}
	if want := panicSummary(pids[2], first); msgs[1] != want {
		t.Errorf("last message\n got %s\nwant %s\nstderr:\n%s", msgs[1], want, stderr)
	}
	for r, pid := range pids {
		requireReaped(t, fmt.Sprintf("rank %d", r), pid)
	}
	return first
}

// TestRootCauseOfPanic is the misattribution scenario: rank 2 panics (exit code
// 2, no error record) while ranks 0, 1 and 3 record errors blaming it and
// exit 1 (or, in some runs, rank 3 waits to be stopped), in orders that
// vary from run to run, often with rank 1 ending first. starrun must name
// rank 2 and exit 2 every time.
func TestRootCauseOfPanic(t *testing.T) {
	t.Parallel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var firstWasRank1 atomic.Int32
	t.Run("runs", func(t *testing.T) {
		for i := range rootCauseRuns {
			t.Run(fmt.Sprintf("run=%d", i), func(t *testing.T) {
				t.Parallel()
				script := launchtest.PanicScenario(i)
				dir := t.TempDir()
				var stdout, stderr bytes.Buffer
				env := append(append(os.Environ(), launchtest.Env(script, dir)...), fastRaceExit())
				l := &Launcher{Stdout: &stdout, Stderr: &stderr, Env: env}
				done := make(chan int, 1)
				go func() { done <- l.Run([]string{"-n", "4", "--grace", "10s", "--", self}) }()
				var code int
				select {
				case code = <-done:
				case <-time.After(jobTimeout):
					t.Fatalf("starrun did not return within %v", jobTimeout)
				}
				t.Logf("script %s", launchtest.Encode(script))
				if checkPanicJob(t, code, stderr.String(), dir, launchtest.FirstEnd(script)) == 1 {
					firstWasRank1.Add(1)
				}
			})
		}
	})
	// Half the runs end rank 1 first.
	if n := firstWasRank1.Load(); n == 0 {
		t.Errorf("rank 1 failed first in none of the %d runs: the scenario no longer reproduces the misattribution", rootCauseRuns)
	} else {
		t.Logf("rank 1 failed first in %d of %d runs", n, rootCauseRuns)
	}
}

// TestProcessRootCauseOfPanic runs the misattribution scenario through the
// starrun binary, rank 1 failing first.
func TestProcessRootCauseOfPanic(t *testing.T) {
	t.Parallel()
	bin := starrunBinary(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	script := launchtest.PanicScenario(0)
	dir := t.TempDir()
	cmd := exec.Command(bin, "-n", "4", "--grace", "10s", "--", self)
	cmd.Env = append(append(os.Environ(), launchtest.Env(script, dir)...), fastRaceExit())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	p := &processJob{cmd: cmd, dir: dir}
	state := p.wait(t)
	checkPanicJob(t, state.ExitCode(), stderr.String(), dir, 1)
}
