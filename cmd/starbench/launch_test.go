package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// launchTimeout bounds a launcher test; its ranks sleep far longer, so a
// rank that is not killed makes the test fail instead of pass slowly.
const launchTimeout = 30 * time.Second

// shJob runs the launcher with n ranks of `sh -c script` and returns its
// exit code and output. sigs may hold signals delivered to the launcher.
func shJob(t *testing.T, n int, script string, timeout float64, sigs <-chan os.Signal) (code int, stdout, stderr string) {
	t.Helper()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh to run fake ranks with")
	}
	var out, errb bytes.Buffer
	l := &launcher{exe: sh, args: []string{"-c", script}, n: n, timeout: timeout,
		env: os.Environ(), stdout: &out, stderr: &errb, signals: sigs}
	done := make(chan int, 1)
	go func() { done <- l.run() }()
	select {
	case code = <-done:
	case <-time.After(launchTimeout):
		t.Fatalf("launcher still running after %v: a rank was not killed", launchTimeout)
	}
	return code, out.String(), errb.String()
}

func TestLaunchSuccess(t *testing.T) {
	script := `
if [ "$COBRE_TCP_RANK" = 0 ]; then
	echo "results from rank 0 of $COBRE_TCP_SIZE"
	echo "backend=$COBRE_COMM_BACKEND coordinator=$COBRE_TCP_COORDINATOR bind=$COBRE_TCP_BIND_ADDR timeout=$COBRE_TCP_TIMEOUT_SECS port=$COBRE_TCP_PORT"
else
	echo "stdout of rank $COBRE_TCP_RANK"
fi
echo "log line of rank $COBRE_TCP_RANK" >&2
printf "no newline" >&2
`
	code, stdout, stderr := shJob(t, 3, script, 2.5, nil)
	assert.Equal(t, exitOK, code, stderr)
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	require.Len(t, lines, 2, "only rank 0's standard output, unprefixed: %q", stdout)
	assert.Equal(t, "results from rank 0 of 3", lines[0])
	assert.Regexp(t, `^backend=tcp coordinator=127\.0\.0\.1 bind=127\.0\.0\.1 timeout=2\.5 port=[1-9][0-9]*$`, lines[1])
	for _, want := range []string{
		"[0] log line of rank 0\n", "[1] log line of rank 1\n", "[2] log line of rank 2\n",
		"[0] no newline\n", "[2] no newline\n",
		"[1] stdout of rank 1\n", "[2] stdout of rank 2\n",
	} {
		assert.Contains(t, stderr, want)
	}
	assert.NotContains(t, stderr, "starbench:")
}

func TestLaunchSingleRank(t *testing.T) {
	code, stdout, stderr := shJob(t, 1, `echo "rank $COBRE_TCP_RANK of $COBRE_TCP_SIZE"`, 0, nil)
	assert.Equal(t, exitOK, code, stderr)
	assert.Equal(t, "rank 0 of 1\n", stdout)
}

func TestLaunchRankFails(t *testing.T) {
	for _, tc := range []struct {
		name, script, want string
	}{
		{"exit", `if [ "$COBRE_TCP_RANK" = 1 ]; then echo "bad result" >&2; exit 1; fi; exec sleep 120`,
			"starbench: rank 1 failed (exit status 1); killed the other ranks\n"},
		{"signal", `if [ "$COBRE_TCP_RANK" = 2 ]; then kill -SEGV $$; fi; exec sleep 120`,
			"starbench: rank 2 failed (signal: segmentation fault); killed the other ranks\n"},
	} {
		t.Run("failure="+tc.name, func(t *testing.T) {
			start := time.Now()
			code, stdout, stderr := shJob(t, 4, tc.script, 0, nil)
			assert.Equal(t, exitFailure, code)
			assert.Empty(t, stdout)
			assert.True(t, strings.HasSuffix(stderr, tc.want), "stderr: %q", stderr)
			assert.Less(t, time.Since(start), 60*time.Second, "the sleeping ranks were killed")
		})
	}
	t.Run("failure=exit/rank-output", func(t *testing.T) {
		_, _, stderr := shJob(t, 2, `if [ "$COBRE_TCP_RANK" = 1 ]; then echo "bad result" >&2; exit 1; fi; exec sleep 120`, 0, nil)
		assert.Contains(t, stderr, "[1] bad result\n")
	})
}

func TestLaunchSignalKillsAll(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run("signal="+sig.String(), func(t *testing.T) {
			sigs := make(chan os.Signal, 1)
			sigs <- sig // arrives while the ranks run
			code, _, stderr := shJob(t, 3, `exec sleep 120`, 0, sigs)
			assert.Equal(t, 128+int(sig), code)
			assert.Contains(t, stderr, "starbench: received "+sig.String()+"; killing all ranks\n")
			assert.NotContains(t, stderr, "failed")
		})
	}
}

func TestLaunchCannotStart(t *testing.T) {
	var out, errb bytes.Buffer
	l := &launcher{exe: t.TempDir() + "/missing", n: 2, env: os.Environ(), stdout: &out, stderr: &errb}
	assert.Equal(t, exitFailure, l.run())
	assert.Contains(t, errb.String(), "starbench: cannot start rank 0: ")
}

// reaped runs `sh -c script` to its end and returns it as an exit event.
func reaped(t *testing.T, id int, script string, killed bool) exit {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	err := cmd.Run()
	return exit{c: &child{id: id, cmd: cmd, exited: true, killed: killed}, err: err}
}

func TestPrimaryFailure(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	peer := reaped(t, 1, "exit 3", false)         // failed because another rank failed
	own := reaped(t, 2, "exit 1", false)          // failed on its own
	killed := reaped(t, 3, "kill -KILL $$", true) // killed by starbench
	segv := reaped(t, 0, "kill -SEGV $$", false)  // crashed

	for _, tc := range []struct {
		name     string
		failures []exit
		want     int // rank; -1 for none
	}{
		{"own-after-peer", []exit{peer, own}, 2},
		{"own-first", []exit{own, peer}, 2},
		{"only-peer", []exit{peer}, 1},
		{"killed-ignored", []exit{killed, peer}, 1},
		{"only-killed", []exit{killed}, -1},
		{"crash", []exit{killed, segv, own}, 0},
		{"none", nil, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, ok := primaryFailure(tc.failures)
			if tc.want < 0 {
				assert.False(t, ok)
				return
			}
			require.True(t, ok)
			assert.Equal(t, tc.want, f.c.id)
		})
	}
}

func TestRankEnv(t *testing.T) {
	base := []string{"PATH=/bin", "COBRE_TCP_RANK=7", "COBRE_TCP_CONNECT_TIMEOUT_MS=500", "COBRE_TCP_TIMEOUT_SECS=9"}
	env := rankEnv(base, 4, 2, 4242, 0)
	assert.Equal(t, []string{
		"PATH=/bin", "COBRE_TCP_CONNECT_TIMEOUT_MS=500", "COBRE_TCP_TIMEOUT_SECS=9",
		"COBRE_COMM_BACKEND=tcp", "COBRE_TCP_COORDINATOR=127.0.0.1", "COBRE_TCP_BIND_ADDR=127.0.0.1",
		"COBRE_TCP_PORT=4242", "COBRE_TCP_RANK=2", "COBRE_TCP_SIZE=4",
		fmt.Sprintf("GOMAXPROCS=%d", max(1, runtime.NumCPU()/4)),
	}, env, "without --timeout the inherited timeout passes through; GOMAXPROCS shares the CPUs")
	env = rankEnv(append(base, "GOMAXPROCS=3"), 4, 2, 4242, 0)
	assert.Contains(t, env, "GOMAXPROCS=3", "the user's GOMAXPROCS passes through")
	assert.Len(t, env, 10, "and no other GOMAXPROCS is added")
	env = rankEnv(base, 4, 2, 4242, 0.5)
	assert.Contains(t, env, "COBRE_TCP_TIMEOUT_SECS=0.5")
	assert.NotContains(t, env, "COBRE_TCP_TIMEOUT_SECS=9")
}

func TestPrefixWriter(t *testing.T) {
	var dst bytes.Buffer
	p := &prefixWriter{dst: &dst, prefix: "[3] "}
	for _, chunk := range []string{"one\ntw", "o\n", "", "\nthr", "ee"} {
		n, err := p.Write([]byte(chunk))
		require.NoError(t, err)
		assert.Equal(t, len(chunk), n)
	}
	p.flush()
	assert.Equal(t, "[3] one\n[3] two\n[3] \n[3] three\n", dst.String())

	// A line longer than maxLine is split, whether it arrives whole or in
	// pieces.
	long := strings.Repeat("x", maxLine) + "yz"
	want := "[3] " + long[:maxLine] + "\n[3] yz\n"
	for _, chunks := range [][]string{{long + "\n"}, {long[:10], long[10 : maxLine+1], long[maxLine+1:], "\n"}} {
		dst.Reset()
		for _, c := range chunks {
			_, _ = p.Write([]byte(c))
		}
		p.flush()
		assert.True(t, dst.String() == want, "got %d bytes: %.40q...", dst.Len(), dst.String())
	}
}
