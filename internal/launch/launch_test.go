package launch

import (
	"bytes"
	"cmp"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/starcomm/starcomm/internal/launch/launchtest"
	"github.com/starcomm/starcomm/shm"
	"github.com/starcomm/starcomm/star"
)

// TestMain runs the tests, or acts as a scripted rank.
func TestMain(m *testing.M) {
	launchtest.MaybeRank()
	os.Exit(m.Run())
}

// jobTimeout is the watchdog on one job.
const jobTimeout = 30 * time.Second

// runJob runs cfg to its end, failing the test if it takes longer than
// jobTimeout, and returns the result and the output.
func runJob(t *testing.T, cfg Config) (res Result, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	cfg.Stdout, cfg.Stderr = &out, &errb
	if cfg.Name == "" {
		cfg.Name = "test"
	}
	done := make(chan Result, 1)
	go func() { done <- Run(cfg) }()
	select {
	case res = <-done:
	case <-time.After(jobTimeout):
		t.Fatalf("the job did not end within %v", jobTimeout)
	}
	return res, out.String(), errb.String()
}

// scripted is a job of this test binary acting out a launchtest script.
type scripted struct {
	dir    string
	res    Result
	stdout string
	stderr string
}

// runScript runs n scripted ranks of this test binary.
func runScript(t *testing.T, n int, script []launchtest.Step, cfg Config) *scripted {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	s := &scripted{dir: t.TempDir()}
	cfg.Command, cfg.Ranks = []string{self}, n
	cfg.Env = append(append(os.Environ(), launchtest.Env(script, s.dir)...), "GORACE=atexit_sleep_ms=0")
	if cfg.Grace == 0 {
		cfg.Grace = 10 * time.Second
	}
	s.res, s.stdout, s.stderr = runJob(t, cfg)
	return s
}

// pid returns the pid rank r wrote.
func (s *scripted) pid(t *testing.T, r int) int {
	t.Helper()
	b, err := os.ReadFile(launchtest.PidFile(s.dir, r))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(string(b))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// messages returns the launcher's lines (starting with "test: ").
func messages(stderr string) []string {
	var out []string
	for _, l := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(l, "test: ") {
			out = append(out, l)
		}
	}
	return out
}

func TestRunNamesRootCause(t *testing.T) {
	t.Parallel()
	quote := strconv.Quote(strings.SplitN(launchtest.Message(2), "\n", 2)[0] + " ...")
	tests := []struct {
		name      string
		n         int
		script    []launchtest.Step
		wantFirst int    // the first rank to fail
		wantCode  int    // the job's exit code
		wantRoot  int    // the root cause
		wantLast  string // the summary, %[1]d standing for the root's pid and %[2]d for the first's
	}{
		{
			// The issue: rank 1 exits first, blaming rank 2, which panics.
			name: "root=panic/first=rank1", n: 4,
			script:    launchtest.PanicScenario(0),
			wantFirst: 1, wantCode: 2, wantRoot: 2,
			wantLast: "test: rank 2 (pid %[1]d) exited with code 2: root cause (blamed by ranks 0, 1, 3: " + quote + "); rank 1 failed first",
		},
		{
			// Rank 2 hangs; rank 0 times out blaming it and exits first. The
			// launcher stops rank 2, so the code is rank 0's.
			name: "root=hung/first=rank0", n: 4,
			script: []launchtest.Step{
				{Rank: 0, Do: "record 2"}, {Rank: 1, Do: "record 2"}, {Rank: 3, Do: "record 2"}, {Rank: 2, Do: "hang"},
				{Rank: 0, Do: "exit 1"}, {Rank: 1, Do: "stopped"}, {Rank: 1, Do: "exit 1"}, {Rank: 3, Do: "exit 1"},
			},
			wantFirst: 0, wantCode: 1, wantRoot: 2,
			wantLast: "test: rank 2 (pid %[1]d) was stopped by test (killed by signal SIGTERM): root cause (blamed by ranks 0, 1, 3: " + quote + "); rank 0 failed first; exit code 1 is rank 0's",
		},
		{
			name: "root=sigkill/first=rank0", n: 3,
			script: []launchtest.Step{
				{Rank: 0, Do: "record 2"}, {Rank: 0, Do: "exit 1"}, {Rank: 2, Do: "stopped"}, {Rank: 2, Do: "killself"}, {Rank: 1, Do: "hang"},
			},
			wantFirst: 0, wantCode: 137, wantRoot: 2,
			wantLast: "test: rank 2 (pid %[1]d) was killed by signal SIGKILL: root cause (blamed by rank 0: " + quote + "); rank 0 failed first",
		},
		{
			name: "root=self-blame", n: 2,
			script: []launchtest.Step{
				{Rank: 1, Do: "record 0"}, {Rank: 0, Do: "record 0"}, {Rank: 1, Do: "exit 1"}, {Rank: 0, Do: "stopped"}, {Rank: 0, Do: "exit 5"},
			},
			wantFirst: 1, wantCode: 5, wantRoot: 0,
			// Rank 1's record is the earliest and blames 0, whose own record
			// blames itself.
			wantLast: `test: rank 0 (pid %[1]d) exited with code 5: root cause (its error: "allreduce failed (rank 0): verification failed"; blamed by rank 1); rank 1 failed first`,
		},
		{
			name: "no-records", n: 3,
			script:    []launchtest.Step{{Rank: 0, Do: "hang"}, {Rank: 2, Do: "hang"}, {Rank: 1, Do: "exit 3"}},
			wantFirst: 1, wantCode: 3, wantRoot: 1,
			wantLast: "test: rank 1 (pid %[1]d) exited with code 3: root cause (the first rank to fail; no rank left an error record)",
		},
		{
			// Records written after the launcher signalled their ranks
			// decide nothing (rank 1's blames itself): the first failure is
			// the root cause, and the late accusations are listed.
			name: "records-after-stop", n: 4,
			script: []launchtest.Step{
				{Rank: 2, Do: "exit 4"},
				{Rank: 1, Do: "stopped"}, {Rank: 1, Do: "record -1"},
				{Rank: 0, Do: "stopped"}, {Rank: 0, Do: "record 2"},
				{Rank: 3, Do: "stopped"}, {Rank: 3, Do: "record 2"},
				{Rank: 0, Do: "exit 1"}, {Rank: 1, Do: "exit 1"}, {Rank: 3, Do: "exit 1"},
			},
			wantFirst: 2, wantCode: 4, wantRoot: 2,
			wantLast: "test: rank 2 (pid %[1]d) exited with code 4: root cause (blamed by ranks 0, 3: " + quote + ")",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := runScript(t, tt.n, tt.script, Config{})
			if s.res.Code != tt.wantCode {
				t.Errorf("exit code %d, want %d; stderr:\n%s", s.res.Code, tt.wantCode, s.stderr)
			}
			if v := s.res.Verdict; v == nil || v.Root != tt.wantRoot || v.First != tt.wantFirst {
				t.Errorf("verdict %+v, want root %d, first %d", v, tt.wantRoot, tt.wantFirst)
			}
			msgs := messages(s.stderr)
			if len(msgs) != 2 {
				t.Fatalf("launcher messages %q, want the first failure and the summary; stderr:\n%s", msgs, s.stderr)
			}
			if want := fmt.Sprintf("test: rank %d (pid %d) ", tt.wantFirst, s.pid(t, tt.wantFirst)); !strings.HasPrefix(msgs[0], want) || !strings.HasSuffix(msgs[0], "; stopping the other ranks") {
				t.Errorf("first message %q, want %q...; stopping the other ranks", msgs[0], want)
			}
			if want := fmt.Sprintf(tt.wantLast, s.pid(t, tt.wantRoot), s.pid(t, tt.wantFirst)); msgs[1] != want {
				t.Errorf("summary\n got %s\nwant %s", msgs[1], want)
			}
			lines := strings.Split(strings.TrimSuffix(s.stderr, "\n"), "\n")
			if last := lines[len(lines)-1]; last != msgs[1] {
				t.Errorf("the summary is not the last line: %q", last)
			}
			for r := range tt.n {
				requireReaped(t, r, s.pid(t, r))
			}
			requireJobDirRemoved(t, s.dir, tt.n)
		})
	}
}

// requireReaped fails unless pid is gone for good.
func requireReaped(t *testing.T, r, pid int) {
	t.Helper()
	if p, err := os.FindProcess(pid); err == nil {
		if err := p.Signal(syscall.Signal(0)); err == nil {
			t.Errorf("rank %d (pid %d) still exists after Run returned", r, pid)
		}
	}
}

// requireJobDirRemoved checks that the ranks were given files in one
// directory of the job, named rank-<r>.json, and that it is gone.
func requireJobDirRemoved(t *testing.T, dir string, n int) {
	t.Helper()
	jobDir := ""
	for r := range n {
		b, err := os.ReadFile(launchtest.ErrorFileNote(dir, r))
		if err != nil {
			t.Fatal(err)
		}
		path := string(b)
		if filepath.Base(path) != fmt.Sprintf("rank-%d.json", r) {
			t.Errorf("rank %d got COBRE_ERROR_FILE=%q", r, path)
		}
		if jobDir == "" {
			jobDir = filepath.Dir(path)
		} else if filepath.Dir(path) != jobDir {
			t.Errorf("ranks got error files in %s and %s", jobDir, filepath.Dir(path))
		}
	}
	if _, err := os.Stat(jobDir); !os.IsNotExist(err) {
		t.Errorf("the job's directory %s is still there: %v", jobDir, err)
	}
}

// shJob runs n ranks of `sh -c script`.
func shJob(t *testing.T, cfg Config, n int, script string) (Result, string, string) {
	t.Helper()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh to run fake ranks with")
	}
	cfg.Command, cfg.Ranks = []string{sh, "-c", script}, n
	return runJob(t, cfg)
}

func TestRunOutput(t *testing.T) {
	t.Parallel()
	const script = `
echo "out of $COBRE_TCP_RANK"
echo "err of $COBRE_TCP_RANK" >&2
printf "tail of $COBRE_TCP_RANK"
`
	t.Run("output=prefix-all", func(t *testing.T) {
		t.Parallel()
		res, stdout, stderr := shJob(t, Config{}, 2, script)
		if res.Code != 0 || res.Verdict != nil {
			t.Fatalf("result %+v; stderr:\n%s", res, stderr)
		}
		for _, want := range []string{"[0] out of 0\n", "[1] out of 1\n", "[0] tail of 0\n", "[1] tail of 1\n"} {
			if !strings.Contains(stdout, want) {
				t.Errorf("stdout lacks %q:\n%s", want, stdout)
			}
		}
		for _, want := range []string{"[0] err of 0\n", "[1] err of 1\n"} {
			if !strings.Contains(stderr, want) {
				t.Errorf("stderr lacks %q:\n%s", want, stderr)
			}
		}
	})
	t.Run("output=rank0-stdout", func(t *testing.T) {
		t.Parallel()
		res, stdout, stderr := shJob(t, Config{Output: Rank0Stdout}, 3, script)
		if res.Code != 0 {
			t.Fatalf("result %+v; stderr:\n%s", res, stderr)
		}
		if stdout != "out of 0\ntail of 0" {
			t.Errorf("stdout = %q, want rank 0's standard output unchanged", stdout)
		}
		for _, want := range []string{"[0] err of 0\n", "[1] out of 1\n", "[1] err of 1\n", "[1] tail of 1\n", "[2] out of 2\n"} {
			if !strings.Contains(stderr, want) {
				t.Errorf("stderr lacks %q:\n%s", want, stderr)
			}
		}
	})
}

func TestRunEnvironment(t *testing.T) {
	t.Parallel()
	const script = `d=$(dirname "$COBRE_ERROR_FILE"); echo "rank=$COBRE_TCP_RANK size=$COBRE_TCP_SIZE port=$COBRE_TCP_PORT bind=$COBRE_TCP_BIND_ADDR timeout=$COBRE_TCP_TIMEOUT_SECS file=$(basename "$COBRE_ERROR_FILE") mode=$(stat -c %a "$d") empty=$(ls -A "$d" | wc -l)"`
	res, stdout, stderr := shJob(t, Config{Bind: "127.0.0.1", Timeout: 0.5, Env: append(os.Environ(), "COBRE_ERROR_FILE=/nowhere")}, 2, script)
	if res.Code != 0 {
		t.Fatalf("result %+v; stderr:\n%s", res, stderr)
	}
	re := regexp.MustCompile(`^\[(\d)\] rank=(\d) size=2 port=([1-9]\d*) bind=127\.0\.0\.1 timeout=0\.5 file=rank-(\d)\.json mode=700 empty=0$`)
	port := ""
	for _, l := range strings.Split(strings.TrimSuffix(stdout, "\n"), "\n") {
		m := re.FindStringSubmatch(l)
		if m == nil || m[1] != m[2] || m[2] != m[4] {
			t.Errorf("line %q does not match %v", l, re)
			continue
		}
		if port != "" && m[3] != port {
			t.Errorf("ranks got ports %s and %s", port, m[3])
		}
		port = m[3]
	}
}

func TestRunSetupFailures(t *testing.T) {
	t.Parallel()
	res, _, stderr0 := runJob(t, Config{Command: []string{filepath.Join(t.TempDir(), "missing")}, Ranks: 2})
	if res.Code != ExitNotFound || !res.SetupFailed || res.Verdict != nil {
		t.Errorf("missing command: result %+v, want code %d", res, ExitNotFound)
	}
	if !strings.Contains(stderr0, "test: cannot start rank 0: ") {
		t.Errorf("stderr = %q, want it to name rank 0", stderr0)
	}
	res, stdout, stderr := runJob(t, Config{Command: []string{"true"}})
	if res.Code != ExitLaunchError || !strings.Contains(stderr, "test: no ranks to start") {
		t.Errorf("no ranks: result %+v, stderr %q", res, stderr)
	}
	// Beyond the backend's largest Size: refused before any process starts
	// (the command would print to its output if it ran).
	res, stdout, stderr = runJob(t, Config{Command: []string{"echo", "started"}, Ranks: MaxRanks(BackendShm) + 1, Backend: BackendShm})
	if res.Code != ExitLaunchError || !res.SetupFailed || stdout != "" ||
		!strings.Contains(stderr, fmt.Sprintf("test: %d ranks is more than the shm backend's %d", shm.MaxSize+1, shm.MaxSize)) {
		t.Errorf("too many ranks: result %+v, stdout %q, stderr %q", res, stdout, stderr)
	}
	if MaxRanks("") != star.MaxSize || MaxRanks(BackendTCP) != star.MaxSize || MaxRanks(BackendShm) != shm.MaxSize || MaxRanks("udp") != 0 {
		t.Errorf("MaxRanks: tcp %d, shm %d, udp %d", MaxRanks(BackendTCP), MaxRanks(BackendShm), MaxRanks("udp"))
	}
}

// TestRunPortInUse: an explicit port that something on the bind address
// already listens on (another job's rank 0) stops the job before any rank
// starts, naming the port; a port free again (its listener closed) is
// used.
func TestRunPortInUse(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	marker := filepath.Join(t.TempDir(), "started")
	cfg := Config{Command: []string{"sh", "-c", "touch " + marker}, Ranks: 2, Port: port}
	for _, bind := range []string{"", "127.0.0.1", "0.0.0.0"} {
		cfg.Bind = bind
		res, _, stderr := runJob(t, cfg)
		want := fmt.Sprintf("test: port %d on %s is in use (another job's rank 0, or another program, listens on it): choose another --port, or leave it out for a free one", port, cmp.Or(bind, "127.0.0.1"))
		if res.Code != ExitLaunchError || !res.SetupFailed || !strings.Contains(stderr, want) {
			t.Errorf("bind %q: result %+v, stderr %q; want code %d and %q", bind, res, stderr, ExitLaunchError, want)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatalf("bind %q: a rank started on a port in use", bind)
		}
	}
	ln.Close()
	cfg.Bind = ""
	res, _, stderr := runJob(t, cfg)
	for try := 0; res.Code != 0 && strings.Contains(stderr, "is in use") && try < 3; try++ {
		// Another process on this host took the freed port first (tests
		// in parallel bind ports of their own): try with another one.
		cfg.Port = freePortForTest(t)
		res, _, stderr = runJob(t, cfg)
	}
	if res.Code != 0 {
		t.Fatalf("port free again: result %+v, stderr %q", res, stderr)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("port free again: the ranks did not run: %v", err)
	}
}

// freePortForTest returns a port nothing listens on at the moment.
func freePortForTest(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func TestRunForwardedSignal(t *testing.T) {
	t.Parallel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	sigs := make(chan os.Signal)
	// The ranks record errors once stopped: after a forwarded signal that
	// names no root cause.
	script := []launchtest.Step{
		{Rank: 0, Do: "stopped"}, {Rank: 0, Do: "record -1"}, {Rank: 1, Do: "stopped"}, {Rank: 1, Do: "record 0"},
		{Rank: 0, Do: "hang"}, {Rank: 1, Do: "exit 9"},
	}
	go func() {
		for r := range 2 {
			if _, err := launchtest.WaitFile(launchtest.PidFile(dir, r)); err != nil {
				return // the job fails without the signal
			}
		}
		sigs <- syscall.SIGINT
	}()
	env := append(append(os.Environ(), launchtest.Env(script, dir)...), "GORACE=atexit_sleep_ms=0")
	res, _, stderr := runJob(t, Config{Command: []string{self}, Ranks: 2, Env: env, Signals: sigs, Grace: 10 * time.Second})
	// Rank 0 dies of the forwarded SIGINT (130) or rank 1 exits 9 first.
	if (res.Code != 130 && res.Code != 9) || res.Interrupted != syscall.SIGINT || res.Verdict != nil {
		t.Errorf("result %+v, want code 130 or 9 after SIGINT and no verdict; stderr:\n%s", res, stderr)
	}
	if msgs := messages(stderr); len(msgs) != 1 || msgs[0] != "test: received SIGINT; forwarding it to all ranks" {
		t.Errorf("launcher messages %q", msgs)
	}
}

// TestRunSettle: after the first failure, the other ranks get Settle to
// end on their own before the launcher stops them: a rank that only ends
// when stopped is stopped no sooner than Settle after the first failure
// (so a rank still finishing its own failure, such as printing a panic's
// stack trace, ends as itself and keeps its exit code).
func TestRunSettle(t *testing.T) {
	t.Parallel()
	const settle = 400 * time.Millisecond
	script := []launchtest.Step{{Rank: 1, Do: "record 1"}, {Rank: 1, Do: "exit 3"}, {Rank: 0, Do: "hang"}}
	begin := time.Now()
	s := runScript(t, 2, script, Config{Settle: settle})
	took := time.Since(begin)
	if s.res.Code != 3 {
		t.Errorf("exit code %d, want 3; stderr:\n%s", s.res.Code, s.stderr)
	}
	if took < settle {
		t.Errorf("the job ended after %v: the hanging rank was stopped before the settle period of %v", took, settle)
	}
	end := s.res.Ends[0]
	if !end.Stopped {
		t.Errorf("rank 0's end %+v: want stopped by the launcher", end)
	}
	if d := end.Signalled.Sub(begin); d < settle {
		t.Errorf("rank 0 was signalled %v after the job began, before the settle period of %v was over", d, settle)
	}
}

// noticeWriter is a job's stderr that sends SIGTERM on sigs once a line
// containing want was written.
type noticeWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	sigs chan<- os.Signal
	sent bool
}

func (w *noticeWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.sent && bytes.Contains(p, []byte(w.want)) {
		w.sent = true
		go func() { w.sigs <- syscall.SIGTERM }()
	}
	return w.buf.Write(p)
}

func (w *noticeWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// TestRunWaitNotice: a rank still running WaitNotice after another exited
// 0 is named, with its pid, once; the test then stops the job with a
// forwarded SIGTERM (without the notice the job never ends).
func TestRunWaitNotice(t *testing.T) {
	t.Parallel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	script := []launchtest.Step{{Rank: 1, Do: "exit 0"}, {Rank: 2, Do: "exit 0"}, {Rank: 0, Do: "hang"}}
	sigs := make(chan os.Signal)
	errw := &noticeWriter{want: "still waiting for", sigs: sigs}
	var out bytes.Buffer
	cfg := Config{
		Name: "test", Command: []string{self}, Ranks: 3, Grace: 10 * time.Second, WaitNotice: 150 * time.Millisecond,
		Env:    append(append(os.Environ(), launchtest.Env(script, dir)...), "GORACE=atexit_sleep_ms=0"),
		Stdout: &out, Stderr: errw, Signals: sigs,
	}
	done := make(chan Result, 1)
	go func() { done <- Run(cfg) }()
	var res Result
	select {
	case res = <-done:
	case <-time.After(jobTimeout):
		t.Fatalf("the job did not end within %v: no notice; stderr:\n%s", jobTimeout, errw.String())
	}
	if res.Code != 143 || res.Interrupted != syscall.SIGTERM {
		t.Errorf("result %+v, want 143 after the forwarded SIGTERM; stderr:\n%s", res, errw.String())
	}
	pid, err := os.ReadFile(launchtest.PidFile(dir, 0))
	if err != nil {
		t.Fatal(err)
	}
	// Rank 2 may exit before or after the notice is due (only rank 1's
	// exit orders it).
	msgs := messages(errw.String())
	want := regexp.MustCompile(`^test: (rank 1|ranks 1, 2) exited 0 \(the first 150ms ago\); still waiting for rank 0 \(pid ` + string(pid) + `\) to exit \(Ctrl-C stops the job\)$`)
	if len(msgs) != 2 || !want.MatchString(msgs[0]) || msgs[1] != "test: received SIGTERM; forwarding it to the ranks still running, rank 0" {
		t.Errorf("launcher messages %q, want the notice then the forwarded SIGTERM", msgs)
	}
}
