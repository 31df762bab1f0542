//go:build unix

package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/starcomm/starcomm/internal/launch"
)

// jobTimeout is the watchdog on one in-process starrun job.
const jobTimeout = 15 * time.Second

// testJob is one Launcher.Run over fake ranks, running in the background.
type testJob struct {
	t       *testing.T
	n       int
	dir     string // where the fake ranks write their pid files
	start   time.Time
	done    chan int
	stdout  bytes.Buffer
	stderr  bytes.Buffer
	signals chan os.Signal
}

// startJob runs starrun with flags, -n n and the fake rank plan, in the
// background. extraEnv is added to the ranks' environment.
func startJob(t *testing.T, n int, plan string, flags []string, extraEnv ...string) *testJob {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	j := &testJob{t: t, n: n, dir: t.TempDir(), done: make(chan int, 1), signals: make(chan os.Signal)}
	killLeftovers(t, j.dir)
	env := append(os.Environ(), envPlan+"="+plan, envDir+"="+j.dir, fastRaceExit())
	l := &Launcher{Stdout: &j.stdout, Stderr: &j.stderr, Env: append(env, extraEnv...), Signals: j.signals}
	args := append([]string{"-n", strconv.Itoa(n)}, flags...)
	args = append(args, "--", self)
	j.start = time.Now()
	go func() { j.done <- l.Run(args) }()
	return j
}

// wait returns starrun's exit code, failing the test if it takes longer
// than jobTimeout.
func (j *testJob) wait() int {
	j.t.Helper()
	select {
	case code := <-j.done:
		return code
	case <-time.After(jobTimeout):
		j.t.Fatalf("starrun did not return within %v", jobTimeout)
		return -1
	}
}

// pid waits for the pid file called name (e.g. "rank2") and returns its pid.
func (j *testJob) pid(name string) int {
	j.t.Helper()
	pid, err := waitPidFile(filepath.Join(j.dir, name+".pid"), jobTimeout)
	if err != nil {
		j.t.Fatal(err)
	}
	return pid
}

// rankPids waits for every rank's pid file and returns the pids by rank.
func (j *testJob) rankPids() []int {
	j.t.Helper()
	pids := make([]int, j.n)
	for r := range pids {
		pids[r] = j.pid(fmt.Sprintf("rank%d", r))
	}
	return pids
}

// fastRaceExit returns a GORACE setting that keeps the race detector of a
// fake rank from pausing a second before it exits.
func fastRaceExit() string {
	return "GORACE=" + strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0")
}

// lines splits output into lines, without the final empty one.
func lines(s string) []string {
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

// starrunLines returns starrun's own messages among the lines of stderr.
func starrunLines(stderr string) []string {
	var out []string
	for _, l := range lines(stderr) {
		if strings.HasPrefix(l, "starrun: ") {
			out = append(out, l)
		}
	}
	return out
}

func TestSuccessEnvironment(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		n     int
		flags []string
		// wantPort is the expected port; 0 means "picked": non-zero and
		// the same on every rank.
		wantPort, wantTimeout, wantBind string
	}{
		// Without --bind rank 0 listens on 127.0.0.1 only: nothing from
		// another host can join.
		{name: "ranks=4/flags=none", n: 4, wantTimeout: "<unset>", wantBind: "127.0.0.1"},
		{name: "ranks=1/flags=none", n: 1, wantTimeout: "<unset>", wantBind: "127.0.0.1"},
		{name: "ranks=2/flags=bind-any", n: 2, flags: []string{"--bind", "0.0.0.0"}, wantTimeout: "<unset>", wantBind: "0.0.0.0"},
		{
			name: "ranks=2/flags=all", n: 2,
			flags:    []string{"--port", "23456", "--timeout", "7", "--bind", "127.0.0.1", "--grace", "1s"},
			wantPort: "23456", wantTimeout: "7", wantBind: "127.0.0.1",
		},
		{
			name: "ranks=2/flags=decimal-timeout", n: 2,
			flags:       []string{"--timeout", "1.5"},
			wantTimeout: "1.5", wantBind: "127.0.0.1",
		},
		{
			name: "ranks=1/flags=longest-timeout", n: 1,
			flags:       []string{"--timeout", "31536000"},
			wantTimeout: "31536000", wantBind: "127.0.0.1",
		},
	}
	lineRE := regexp.MustCompile(`^\[(\d+)\] rank=(\S+) port=(\S+) size=(\S+) backend=(\S+) coord=(\S+) timeout=(\S+) bind=(\S+) connect=(\S+) errfile=rank-(\d+)\.json$`)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// Inherited values starrun sets are replaced; others pass through.
			j := startJob(t, tt.n, "*=env", tt.flags, "COBRE_TCP_RANK=99", "COBRE_TCP_SIZE=99", "COBRE_TCP_CONNECT_TIMEOUT_MS=1234")
			if code := j.wait(); code != 0 {
				t.Fatalf("exit code = %d, want 0; stderr:\n%s", code, j.stderr.String())
			}
			out := lines(j.stdout.String())
			if len(out) != tt.n {
				t.Fatalf("got %d stdout lines, want %d:\n%s", len(out), tt.n, j.stdout.String())
			}
			var ranks []int
			port := ""
			for _, l := range out {
				m := lineRE.FindStringSubmatch(l)
				if m == nil {
					t.Fatalf("stdout line %q does not match %v", l, lineRE)
				}
				if m[1] != m[2] || m[2] != m[10] {
					t.Errorf("line %q: prefix [%s] but COBRE_TCP_RANK=%s, COBRE_ERROR_FILE=.../rank-%s.json", l, m[1], m[2], m[10])
				}
				r, _ := strconv.Atoi(m[2])
				ranks = append(ranks, r)
				if port == "" {
					port = m[3]
				} else if m[3] != port {
					t.Errorf("ranks got different ports: %s and %s", port, m[3])
				}
				want := []string{strconv.Itoa(tt.n), "tcp", "127.0.0.1", tt.wantTimeout, tt.wantBind, "1234"}
				if got := m[4:10]; !slices.Equal(got, want) {
					t.Errorf("line %q: size, backend, coord, timeout, bind, connect = %v, want %v", l, got, want)
				}
			}
			slices.Sort(ranks)
			if want := seq(tt.n); !slices.Equal(ranks, want) {
				t.Errorf("ranks = %v, want %v", ranks, want)
			}
			if p, err := strconv.Atoi(port); err != nil || p <= 0 || p > 65535 || (tt.wantPort != "" && port != tt.wantPort) {
				t.Errorf("port = %q, want %q (any valid port if empty)", port, tt.wantPort)
			}
			errLines := lines(j.stderr.String())
			slices.Sort(errLines)
			var wantErr []string
			for r := range tt.n {
				wantErr = append(wantErr, fmt.Sprintf("[%d] stderr of rank %d", r, r))
			}
			if !slices.Equal(errLines, wantErr) {
				t.Errorf("stderr lines = %q, want %q", errLines, wantErr)
			}
		})
	}
}

// seq returns 0, 1, ..., n-1.
func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

func TestFirstFailureStopsEveryRank(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		n        int
		plan     string
		failed   int    // the failing rank
		wantCode int    // starrun's exit code
		wantWhat string // how the failure is described
		grace    string
		// wantKilled: the grace period must run out and SIGKILL the others.
		wantKilled bool
		// grandchildren: every surviving rank started a grandchild.
		grandchildren bool
		// wantGrandchildSignal: what those grandchildren record ("" for
		// nothing to check).
		wantGrandchildSignal string
	}{
		{
			name: "fault=exit3/others=hang-with-grandchild", n: 4, plan: "2=exit3,*=grandchild",
			failed: 2, wantCode: 3, wantWhat: "exited with code 3", grace: "5s", grandchildren: true,
			wantGrandchildSignal: "terminated",
		},
		{
			name: "fault=sigkill/others=hang", n: 3, plan: "1=killself,*=hang",
			failed: 1, wantCode: 128 + 9, wantWhat: "was killed by signal SIGKILL", grace: "5s",
		},
		{
			name: "fault=exit3/others=ignore-sigterm", n: 3, plan: "0=exit3,*=grandchild-ignoreterm",
			failed: 0, wantCode: 3, wantWhat: "exited with code 3", grace: "200ms", wantKilled: true, grandchildren: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			j := startJob(t, tt.n, tt.plan, []string{"--grace", tt.grace})
			pids := j.rankPids()
			var grandchildren []int
			if tt.grandchildren {
				for r := range tt.n {
					if r != tt.failed {
						grandchildren = append(grandchildren, j.pid(fmt.Sprintf("grandchild%d", r)))
					}
				}
			}
			code := j.wait()
			elapsed := time.Since(j.start)
			stderr := j.stderr.String()
			if code != tt.wantCode {
				t.Errorf("exit code = %d, want %d; stderr:\n%s", code, tt.wantCode, stderr)
			}
			msgs := starrunLines(stderr)
			want := fmt.Sprintf("starrun: rank %d (pid %d) %s; stopping the other ranks", tt.failed, pids[tt.failed], tt.wantWhat)
			if len(msgs) == 0 || msgs[0] != want {
				t.Errorf("starrun's first message = %q, want %q; stderr:\n%s", msgs, want, stderr)
			}
			if n := strings.Count(stderr, "; stopping the other ranks"); n != 1 {
				t.Errorf("%d failures reported, want only the first; stderr:\n%s", n, stderr)
			}
			// No rank left an error record: the first failure is the root
			// cause, named again on the last line.
			want = fmt.Sprintf("starrun: rank %d (pid %d) %s: root cause (the first rank to fail; no rank left an error record)", tt.failed, pids[tt.failed], tt.wantWhat)
			if len(msgs) == 0 || msgs[len(msgs)-1] != want {
				t.Errorf("starrun's last message = %q, want %q; stderr:\n%s", msgs, want, stderr)
			}
			killed := strings.Contains(stderr, "grace period of "+tt.grace+" is over")
			if killed != tt.wantKilled {
				t.Errorf("grace period ran out = %v, want %v; stderr:\n%s", killed, tt.wantKilled, stderr)
			}
			if grace, _ := time.ParseDuration(tt.grace); tt.wantKilled && elapsed < grace {
				t.Errorf("starrun returned after %v, before the %v grace period", elapsed, grace)
			}
			for r, pid := range pids {
				requireReaped(t, fmt.Sprintf("rank %d", r), pid)
			}
			for _, pid := range grandchildren {
				requireGone(t, "grandchild", pid)
			}
			// A grandchild that handles SIGTERM got it through the group.
			for r := range tt.n {
				if got := grandchildSignal(j.dir, r); tt.wantGrandchildSignal != "" && r != tt.failed && got != tt.wantGrandchildSignal {
					t.Errorf("grandchild of rank %d recorded signal %q, want %q", r, got, tt.wantGrandchildSignal)
				}
			}
		})
	}
}

func TestExitedRankLeavesNothingBehind(t *testing.T) {
	t.Parallel()
	const n = 2
	j := startJob(t, n, "*=orphan", nil)
	if code := j.wait(); code != 0 {
		t.Fatalf("exit code = %d, want 0; stderr:\n%s", code, j.stderr.String())
	}
	for r := range n {
		requireReaped(t, fmt.Sprintf("rank %d", r), j.pid(fmt.Sprintf("rank%d", r)))
		requireGone(t, fmt.Sprintf("grandchild of rank %d", r), j.pid(fmt.Sprintf("grandchild%d", r)))
	}
}

func TestForwardedSignals(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		plan     string
		signals  []syscall.Signal
		wantCode int
		wantMsg  string
	}{
		{name: "signal=SIGINT/ranks=die", plan: "*=hang", signals: []syscall.Signal{syscall.SIGINT}, wantCode: 130, wantMsg: "starrun: received SIGINT; forwarding it to all ranks"},
		{name: "signal=SIGTERM/ranks=die", plan: "*=grandchild", signals: []syscall.Signal{syscall.SIGTERM}, wantCode: 143, wantMsg: "starrun: received SIGTERM; forwarding it to all ranks"},
		{name: "signal=SIGINT/ranks=exit7", plan: "*=trapint7", signals: []syscall.Signal{syscall.SIGINT}, wantCode: 7, wantMsg: "starrun: received SIGINT; forwarding it to all ranks"},
		{
			name: "signal=SIGTERMx2/ranks=ignore", plan: "*=ignoreterm",
			signals: []syscall.Signal{syscall.SIGTERM, syscall.SIGTERM}, wantCode: 137,
			wantMsg: "starrun: received SIGTERM while stopping; killing all ranks",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			const n = 3
			// A grace far beyond the watchdog: only the second signal can kill.
			j := startJob(t, n, tt.plan, []string{"--grace", "1h"})
			pids := j.rankPids()
			var grandchildren []int
			if strings.Contains(tt.plan, "grandchild") {
				for r := range n {
					grandchildren = append(grandchildren, j.pid(fmt.Sprintf("grandchild%d", r)))
				}
			}
			for _, sig := range tt.signals {
				select {
				case j.signals <- sig:
				case <-time.After(jobTimeout):
					t.Fatalf("starrun did not take signal %v", sig)
				}
			}
			code := j.wait()
			stderr := j.stderr.String()
			if code != tt.wantCode {
				t.Errorf("exit code = %d, want %d; stderr:\n%s", code, tt.wantCode, stderr)
			}
			if !slices.Contains(starrunLines(stderr), tt.wantMsg) {
				t.Errorf("stderr lacks %q:\n%s", tt.wantMsg, stderr)
			}
			if strings.Contains(stderr, "starrun: rank ") {
				t.Errorf("a rank was reported as the first failure after a forwarded signal:\n%s", stderr)
			}
			for r, pid := range pids {
				requireReaped(t, fmt.Sprintf("rank %d", r), pid)
			}
			for r, pid := range grandchildren {
				requireGone(t, "grandchild", pid)
				if got, want := grandchildSignal(j.dir, r), tt.signals[0].String(); got != want {
					t.Errorf("grandchild of rank %d recorded signal %q, want %q", r, got, want)
				}
			}
		})
	}
}

func TestOutputPrefixing(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 200<<10)
	tests := []struct {
		name       string
		plan       string
		wantStdout string
		wantStderr string
	}{
		{name: "output=partial-line", plan: "*=partial", wantStdout: "[0] first\n[0] no newline\n", wantStderr: "[0] err partial\n"},
		{name: "output=200KiB-line", plan: "*=long", wantStdout: "[0] " + long + "\n[0] after\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			j := startJob(t, 1, tt.plan, nil)
			if code := j.wait(); code != 0 {
				t.Fatalf("exit code = %d, want 0; stderr:\n%s", code, j.stderr.String())
			}
			if got := j.stdout.String(); got != tt.wantStdout {
				t.Errorf("stdout = %.200q (%d bytes), want %.200q (%d bytes)", got, len(got), tt.wantStdout, len(tt.wantStdout))
			}
			if got := j.stderr.String(); got != tt.wantStderr {
				t.Errorf("stderr = %q, want %q", got, tt.wantStderr)
			}
		})
	}
}

func TestOutputLinesDoNotInterleave(t *testing.T) {
	t.Parallel()
	const n = 4
	j := startJob(t, n, "*=chatty", nil)
	if code := j.wait(); code != 0 {
		t.Fatalf("exit code = %d, want 0; stderr:\n%s", code, j.stderr.String())
	}
	next := make([]int, n) // the next line expected from each rank
	for _, l := range lines(j.stdout.String()) {
		var r int
		if _, err := fmt.Sscanf(l, "[%d] ", &r); err != nil || r < 0 || r >= n {
			t.Fatalf("malformed line %q", l)
		}
		if want := fmt.Sprintf("[%d] %s", r, chattyLine(r, next[r])); l != want {
			t.Fatalf("line %q, want %q", l, want)
		}
		next[r]++
	}
	for r, got := range next {
		if got != chattyLines {
			t.Errorf("rank %d: %d lines, want %d", r, got, chattyLines)
		}
	}
}

func TestCommandNotFound(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	l := &Launcher{Stdout: &stdout, Stderr: &stderr}
	code := l.Run([]string{"-n", "2", "--", filepath.Join(t.TempDir(), "no-such-program")})
	if code != exitNotFound {
		t.Errorf("exit code = %d, want %d", code, exitNotFound)
	}
	if !strings.Contains(stderr.String(), "starrun: cannot start rank 0:") {
		t.Errorf("stderr = %q, want it to name rank 0", stderr.String())
	}
}

func TestJobConfig(t *testing.T) {
	t.Parallel()
	sigs := make(chan os.Signal)
	var stdout, stderr bytes.Buffer
	l := &Launcher{Stdout: &stdout, Stderr: &stderr, Env: []string{"A=1"}, Signals: sigs}
	cfg, err := parseArgs([]string{"-n", "3", "--port", "4242", "--timeout", "7", "--bind", "0.0.0.0", "--grace", "1s", "--", "prog", "arg"})
	if err != nil {
		t.Fatal(err)
	}
	got := l.jobConfig(cfg)
	if got.Name != "starrun" || !slices.Equal(got.Command, []string{"prog", "arg"}) || got.Ranks != 3 || got.Port != 4242 ||
		got.Timeout != 7 || got.Bind != "0.0.0.0" || got.Grace != time.Second || !slices.Equal(got.Env, l.Env) ||
		got.Stdout != l.Stdout || got.Stderr != l.Stderr || got.Output != launch.PrefixAll || got.Signals != l.Signals || got.PeerFailedCode != 0 {
		t.Errorf("jobConfig = %+v", got)
	}
	cfg, _ = parseArgs([]string{"-n", "2", "--", "prog"})
	if got := l.jobConfig(cfg); got.Port != 0 || got.Timeout != 0 || got.Bind != "" || got.Grace != launch.DefaultGrace {
		t.Errorf("jobConfig without flags = %+v, want a free port, the inherited timeout and bind address, the default grace", got)
	}
}
