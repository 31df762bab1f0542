package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	joblaunch "github.com/starcomm/starcomm/internal/launch"
	"github.com/starcomm/starcomm/internal/launch/launchtest"
)

// TestMain runs the tests, or acts as a scripted rank of
// internal/launch/launchtest.
func TestMain(m *testing.M) {
	launchtest.MaybeRank()
	os.Exit(m.Run())
}

// launchTimeout bounds a launcher test; its ranks sleep far longer, so a
// rank that is not killed makes the test fail instead of pass slowly.
const launchTimeout = 30 * time.Second

// job runs starbench's launcher with n ranks of command, env added to the
// ranks' environment, and returns starbench's exit code and output. sigs
// may hold signals delivered to the launcher.
func job(t *testing.T, n int, command []string, env []string, timeout float64, sigs <-chan os.Signal) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	o := options{n: n, timeout: timeout}
	cfg := launchConfig(o, command, append(os.Environ(), env...), &out, &errb, sigs)
	done := make(chan int, 1)
	go func() { done <- exitCode(joblaunch.Run(cfg)) }()
	select {
	case code = <-done:
	case <-time.After(launchTimeout):
		t.Fatalf("launcher still running after %v: a rank was not stopped", launchTimeout)
	}
	return code, out.String(), errb.String()
}

// shJob runs the launcher with n ranks of `sh -c script`.
func shJob(t *testing.T, n int, script string, timeout float64, sigs <-chan os.Signal) (code int, stdout, stderr string) {
	t.Helper()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh to run fake ranks with")
	}
	return job(t, n, []string{sh, "-c", script}, nil, timeout, sigs)
}

func TestLaunchSuccess(t *testing.T) {
	script := `
if [ "$COBRE_TCP_RANK" = 0 ]; then
	echo "results from rank 0 of $COBRE_TCP_SIZE"
	echo "backend=$COBRE_COMM_BACKEND coordinator=$COBRE_TCP_COORDINATOR bind=$COBRE_TCP_BIND_ADDR timeout=$COBRE_TCP_TIMEOUT_SECS port=$COBRE_TCP_PORT errfile=$(basename $COBRE_ERROR_FILE)"
else
	echo "stdout of rank $COBRE_TCP_RANK"
fi
echo "log line of rank $COBRE_TCP_RANK" >&2
printf "no newline" >&2
`
	code, stdout, stderr := shJob(t, 3, script, 2.5, nil)
	if code != exitOK {
		t.Fatalf("exit code %d, want %d; stderr:\n%s", code, exitOK, stderr)
	}
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("only rank 0's standard output, unprefixed: %q", stdout)
	}
	if lines[0] != "results from rank 0 of 3" {
		t.Errorf("stdout line 1 = %q", lines[0])
	}
	re := regexp.MustCompile(`^backend=tcp coordinator=127\.0\.0\.1 bind=127\.0\.0\.1 timeout=2\.5 port=[1-9][0-9]* errfile=rank-0\.json$`)
	if !re.MatchString(lines[1]) {
		t.Errorf("stdout line 2 = %q, want it to match %v", lines[1], re)
	}
	for _, want := range []string{
		"[0] log line of rank 0\n", "[1] log line of rank 1\n", "[2] log line of rank 2\n",
		"[0] no newline\n", "[2] no newline\n",
		"[1] stdout of rank 1\n", "[2] stdout of rank 2\n",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if strings.Contains(stderr, "starbench:") {
		t.Errorf("starbench spoke on success:\n%s", stderr)
	}
}

func TestLaunchSingleRank(t *testing.T) {
	code, stdout, stderr := shJob(t, 1, `echo "rank $COBRE_TCP_RANK of $COBRE_TCP_SIZE"`, 0, nil)
	if code != exitOK || stdout != "rank 0 of 1\n" {
		t.Errorf("exit code %d, stdout %q; stderr:\n%s", code, stdout, stderr)
	}
}

// starbenchLines returns starbench's own messages among the lines of stderr.
func starbenchLines(stderr string) []string {
	var out []string
	for _, l := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(l, "starbench: ") {
			out = append(out, l)
		}
	}
	return out
}

func TestLaunchRankFails(t *testing.T) {
	for _, tc := range []struct {
		name, script string
		rank         int
		how          string // a regular expression
	}{
		{"exit", `if [ "$COBRE_TCP_RANK" = 1 ]; then echo "bad result" >&2; exit 1; fi; exec sleep 120`,
			1, `exited with code 1`},
		{"signal", `if [ "$COBRE_TCP_RANK" = 2 ]; then kill -SEGV $$; fi; exec sleep 120`,
			2, `was killed by signal SIGSEGV( \(core dumped\))?`},
	} {
		t.Run("failure="+tc.name, func(t *testing.T) {
			start := time.Now()
			code, stdout, stderr := shJob(t, 4, tc.script, 0, nil)
			if code != exitFailure || stdout != "" {
				t.Errorf("exit code %d, stdout %q; want %d and nothing", code, stdout, exitFailure)
			}
			msgs := starbenchLines(stderr)
			first := regexp.MustCompile(fmt.Sprintf(`^starbench: rank %d \(pid \d+\) %s; stopping the other ranks$`, tc.rank, tc.how))
			last := regexp.MustCompile(fmt.Sprintf(`^starbench: rank %d \(pid \d+\) %s: root cause \(the first rank to fail; no rank left an error record\)$`, tc.rank, tc.how))
			if len(msgs) != 2 || !first.MatchString(msgs[0]) || !last.MatchString(msgs[1]) {
				t.Errorf("starbench's messages %q, want them to match\n%v\n%v", msgs, first, last)
			}
			if !strings.HasSuffix(stderr, msgs[len(msgs)-1]+"\n") {
				t.Errorf("the root cause is not the last line:\n%s", stderr)
			}
			if elapsed := time.Since(start); elapsed > 60*time.Second {
				t.Errorf("took %v: the sleeping ranks were not stopped", elapsed)
			}
		})
	}
	t.Run("failure=exit/rank-output", func(t *testing.T) {
		_, _, stderr := shJob(t, 2, `if [ "$COBRE_TCP_RANK" = 1 ]; then echo "bad result" >&2; exit 1; fi; exec sleep 120`, 0, nil)
		if !strings.Contains(stderr, "[1] bad result\n") {
			t.Errorf("stderr lacks the rank's line:\n%s", stderr)
		}
	})
}

// TestLaunchNamesRootCause runs scripted ranks (this test binary, see
// internal/launch/launchtest) that leave error records as starcomm does.
func TestLaunchNamesRootCause(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	quote := strconv.Quote(strings.SplitN(launchtest.Message(2), "\n", 2)[0] + " ...")
	for _, tc := range []struct {
		name   string
		script []launchtest.Step
		want   string // the last line; %d stands for rank 2's pid
	}{
		{
			// The issue: rank 1 exits first blaming rank 2, which panics.
			name:   "root=panic/first=rank1",
			script: launchtest.PanicScenario(0),
			want:   `starbench: rank 2 (pid %d) exited with code 2: root cause (blamed by ranks 0, 1, 3: ` + quote + `); rank 1 failed first`,
		},
		{
			name:   "root=panic/records-late",
			script: launchtest.PanicScenario(3),
			want:   `starbench: rank 2 (pid %d) exited with code 2: root cause (blamed by ranks 0, 1, 3: ` + quote + `)`,
		},
		{
			// No records: rank 1 exits with exitPeerFailed ("another rank
			// failed") first, so rank 2, which exits 1, is the root cause.
			name: "no-records/peer-failed-hint",
			script: []launchtest.Step{
				{Rank: 0, Do: "hang"}, {Rank: 3, Do: "hang"}, {Rank: 1, Do: "exit 3"}, {Rank: 2, Do: "stopped"}, {Rank: 2, Do: "exit 1"},
			},
			want: `starbench: rank 2 (pid %d) exited with code 1: root cause (the first rank to fail; no rank left an error record); rank 1 failed first`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			code, stdout, stderr := job(t, 4, []string{self}, append(launchtest.Env(tc.script, dir), "GORACE=atexit_sleep_ms=0"), 0, nil)
			if code != exitFailure {
				t.Errorf("exit code %d, want %d", code, exitFailure)
			}
			if stdout != "" {
				t.Errorf("stdout = %q, want nothing", stdout)
			}
			pid, err := os.ReadFile(launchtest.PidFile(dir, 2))
			if err != nil {
				t.Fatal(err)
			}
			want := strings.Replace(tc.want, "%d", string(pid), 1)
			if msgs := starbenchLines(stderr); len(msgs) == 0 || msgs[len(msgs)-1] != want {
				t.Errorf("last message\n got %q\nwant %q\nstderr:\n%s", msgs, want, stderr)
			}
		})
	}
}

func TestLaunchSignalStopsAll(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run("signal="+sig.String(), func(t *testing.T) {
			sigs := make(chan os.Signal, 1)
			sigs <- sig // arrives while the ranks run
			code, _, stderr := shJob(t, 3, `exec sleep 120`, 0, sigs)
			if code != 128+int(sig) {
				t.Errorf("exit code %d, want %d", code, 128+int(sig))
			}
			want := "starbench: received " + joblaunch.SignalName(sig) + "; forwarding it to all ranks"
			if msgs := starbenchLines(stderr); !slices.Equal(msgs, []string{want}) {
				t.Errorf("starbench's messages %q, want only %q", msgs, want)
			}
		})
	}
}

func TestLaunchCannotStart(t *testing.T) {
	code, _, stderr := job(t, 2, []string{t.TempDir() + "/missing"}, nil, 0, nil)
	if code != exitFailure || !strings.Contains(stderr, "starbench: cannot start rank 0: ") {
		t.Errorf("exit code %d, stderr %q", code, stderr)
	}
}

func TestLaunchConfig(t *testing.T) {
	var out, errb bytes.Buffer
	sigs := make(chan os.Signal)
	o := options{n: 4, timeout: 0.5}
	cfg := launchConfig(o, []string{"bench", "--json"}, []string{"A=1"}, &out, &errb, sigs)
	if cfg.Name != "starbench" || !slices.Equal(cfg.Command, []string{"bench", "--json"}) || cfg.Ranks != 4 || cfg.Port != 0 ||
		cfg.Timeout != 0.5 || cfg.Bind != "127.0.0.1" || cfg.Grace != joblaunch.DefaultGrace || !slices.Equal(cfg.Env, []string{"A=1"}) ||
		cfg.Stdout != &out || cfg.Stderr != &errb || cfg.Output != joblaunch.Rank0Stdout || cfg.Signals != sigs || cfg.PeerFailedCode != exitPeerFailed {
		t.Errorf("launchConfig = %+v", cfg)
	}
	for _, tc := range []struct {
		res  joblaunch.Result
		want int
	}{
		{joblaunch.Result{}, exitOK},
		{joblaunch.Result{Code: 2}, exitFailure},
		{joblaunch.Result{Code: 127, SetupFailed: true}, exitFailure},
		{joblaunch.Result{Code: 0, Interrupted: syscall.SIGINT}, 130},
		{joblaunch.Result{Code: 7, Interrupted: syscall.SIGTERM}, 143},
	} {
		if got := exitCode(tc.res); got != tc.want {
			t.Errorf("exitCode(%+v) = %d, want %d", tc.res, got, tc.want)
		}
	}
}
