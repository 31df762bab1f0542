//go:build unix

package launch

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/starcomm/starcomm/internal/launch/launchtest"
)

// stuckWriter is the launcher's output when nobody reads it: every Write
// blocks until release is closed. started is closed at the first Write.
type stuckWriter struct {
	once    sync.Once
	started chan struct{}
	release chan struct{}
}

func newStuckWriter() *stuckWriter {
	return &stuckWriter{started: make(chan struct{}), release: make(chan struct{})}
}

func (w *stuckWriter) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.started) })
	<-w.release
	return len(p), nil
}

// TestRunStuckOutput: with the launcher's output not read (every write
// blocks), a forwarded SIGINT still reaches the ranks at once (they print
// without end and die of it), and Run returns (130) once they are gone,
// within the drain bound, instead of waiting for its reader. Before, the
// launcher's own message about the signal waited for the output, and the
// signal with it.
func TestRunStuckOutput(t *testing.T) {
	t.Parallel()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh to run fake ranks with")
	}
	out := newStuckWriter()
	defer close(out.release)
	sigs := make(chan os.Signal, 1)
	cfg := Config{
		Name: "test", Command: []string{sh, "-c", `while :; do echo "rank $COBRE_TCP_RANK says a lot"; done`},
		Ranks: 2, Grace: time.Minute, Stdout: out, Stderr: out, Signals: sigs,
	}
	done := make(chan Result, 1)
	go func() { done <- Run(cfg) }()
	<-out.started
	sigs <- syscall.SIGINT
	select {
	case res := <-done:
		if res.Code != 130 || res.Interrupted != syscall.SIGINT {
			t.Errorf("result %+v, want 130 after the forwarded SIGINT", res)
		}
		for r, e := range res.Ends {
			if e.How != "was killed by signal SIGINT" {
				t.Errorf("rank %d %s, want killed by the forwarded SIGINT (not SIGKILL after the grace period)", r, e.How)
			}
		}
	case <-time.After(jobTimeout):
		t.Fatalf("the job did not end within %v with its output stuck", jobTimeout)
	}
}

// TestRunExitLineAfterRankOutput: the launcher's line saying that a rank
// failed comes after that rank's last lines (its panic, its error), not in
// the middle of them. The reviewer saw it inside them in 7 of 30 runs.
func TestRunExitLineAfterRankOutput(t *testing.T) {
	t.Parallel()
	const script = `if [ "$COBRE_TCP_RANK" = 1 ]; then
  i=0; while [ $i -lt 300 ]; do echo "detail $i" >&2; i=$((i+1)); done
  echo "FATAL: the real reason" >&2; exit 4
fi
exec sleep 60`
	for run := range 20 {
		res, _, stderr := shJob(t, Config{}, 2, script)
		if res.Code != 4 {
			t.Fatalf("run %d: result %+v, want 4; stderr:\n%s", run, res, stderr)
		}
		fatal := strings.Index(stderr, "[1] FATAL: the real reason\n")
		exited := strings.Index(stderr, fmt.Sprintf("test: rank 1 (pid %d) exited with code 4", res.Ends[1].PID))
		if fatal < 0 || exited < fatal {
			t.Fatalf("run %d: the exit line (at %d) is not after the rank's last line (at %d):\n%s", run, exited, fatal, stderr)
		}
	}
}

// TestRunStoppedRank: a rank stopped with SIGSTOP when the job is stopped
// gets the SIGTERM at once (the launcher sends SIGCONT after it), instead
// of holding it pending until SIGKILL ends the grace period. (A signal
// whose default action kills ends even a stopped process; one the rank
// handles, as every Go rank handling SIGTERM does, waits for SIGCONT.)
func TestRunStoppedRank(t *testing.T) {
	t.Parallel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	sigs := make(chan os.Signal)
	script := []launchtest.Step{{Rank: 0, Do: "stopped"}, {Rank: 0, Do: "exit 7"}}
	go func() {
		pid, err := launchtest.WaitFile(launchtest.PidFile(dir, 0))
		if err != nil {
			return // the job fails without the signal
		}
		n, err := strconv.Atoi(pid)
		if err != nil {
			return
		}
		_ = syscall.Kill(n, syscall.SIGSTOP)
		sigs <- syscall.SIGTERM
	}()
	env := append(append(os.Environ(), launchtest.Env(script, dir)...), "GORACE=atexit_sleep_ms=0")
	res, _, stderr := runJob(t, Config{Command: []string{self}, Ranks: 1, Env: env, Signals: sigs, Grace: 10 * time.Second})
	if e := res.Ends[0]; e.Code != 7 {
		t.Errorf("the stopped rank %s, want exit 7 once it handled the forwarded SIGTERM (not SIGKILL after the grace period); stderr:\n%s", e.How, stderr)
	}
}
