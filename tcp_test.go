package starcomm_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm"
	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/testkit"
)

// Environment of a conformance child process (the test binary re-run as
// one rank).
const (
	envChild = "STARCOMM_TEST_CONFORMANCE_CHILD"
	envDir   = "STARCOMM_TEST_CONFORMANCE_DIR"
	// envStartOnly: the child stops at its first start-up failure, after
	// printing it (a test of start-up alone).
	envStartOnly = "STARCOMM_TEST_CONFORMANCE_START_ONLY"
	// envPortPerCase set to 1 runs case i on COBRE_TCP_PORT + i, so that
	// a rank that leaves a failing case early (a Breaks case has no
	// closing barrier) cannot reach that case's coordinator, whose
	// listener may close with the connection in its accept queue (the
	// kernel resets it, and the rank fails start-up). Only for a closed
	// world of ports, such as a network namespace.
	envPortPerCase = "STARCOMM_TEST_CONFORMANCE_PORT_PER_CASE"
)

func TestMain(m *testing.M) {
	if os.Getenv(envChild) == "1" {
		os.Exit(conformanceChild())
	}
	if os.Getenv(envLauncherChild) == "1" {
		os.Exit(launcherChild())
	}
	if mode := os.Getenv(envChaosChild); mode != "" {
		os.Exit(chaosChild(mode))
	}
	if os.Getenv(envHangUpCoordinator) == "1" {
		os.Exit(hangUpCoordinator())
	}
	if os.Getenv(envSpecWorkerChild) == "1" {
		os.Exit(specWorkerChild())
	}
	shmChildMain()
	os.Exit(m.Run())
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func errDeadline() error { return os.ErrDeadlineExceeded }

// TestConformanceTCP runs the conformance suite over real TCP on loopback,
// all ranks in this process.
func TestConformanceTCP(t *testing.T) {
	nw := testkit.NewTCPNetwork()
	testkit.RunConformance(t, []int{1, 2, 4, 8}, func(t testing.TB, size int) []comm.Communicator {
		comms, err := testkit.StartStar(context.Background(), nw, size, nil)
		require.NoError(t, err)
		return comms
	})
}

// conformanceChild runs every conformance case for its size as one rank,
// building a fresh communicator from the environment for each case (the
// coordinator re-listens on the same port), and prints one line per case.
func conformanceChild() int {
	size, _ := strconv.Atoi(os.Getenv("COBRE_TCP_SIZE"))
	rank := os.Getenv("COBRE_TCP_RANK")
	failed := 0
	basePort, _ := strconv.Atoi(os.Getenv("COBRE_TCP_PORT"))
	for i, tc := range testkit.Cases() {
		if tc.Sizes != nil && !tc.Sizes(size) {
			continue
		}
		if os.Getenv(envPortPerCase) == "1" {
			if err := os.Setenv("COBRE_TCP_PORT", strconv.Itoa(basePort+i)); err != nil {
				fmt.Printf("FAIL %s: %v\n", tc.Name, err)
				failed++
				continue
			}
		}
		err := func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			c, err := starcomm.FromEnv(ctx)
			if err != nil {
				return fmt.Errorf("start: %w", err)
			}
			defer c.Close()
			if got := fmt.Sprint(c.Rank()); got != rank {
				return fmt.Errorf("communicator says rank %s, environment %s", got, rank)
			}
			if err := tc.Run(ctx, testkit.Env{Comm: c, Dir: os.Getenv(envDir)}); err != nil {
				return err
			}
			if tc.Breaks {
				return nil
			}
			// Every rank has finished start-up and this case before anyone
			// builds the next communicator on the same port.
			return c.Barrier(ctx)
		}()
		if err != nil {
			failed++
			fmt.Printf("FAIL %s: %v\n", tc.Name, strings.ReplaceAll(err.Error(), "\n", " | "))
			if os.Getenv(envStartOnly) == "1" && strings.HasPrefix(err.Error(), "start: ") {
				return 1
			}
		} else {
			fmt.Printf("ok %s\n", tc.Name)
		}
		if err := closedBarrier(os.Getenv(envDir), tc.Name, rank, size); err != nil {
			fmt.Printf("FAIL %s: %v\n", tc.Name, err)
			return 1
		}
	}
	if failed > 0 {
		return 1
	}
	return 0
}

// closedBarrier returns once every rank has closed its communicator of
// the case name: each rank leaves a file in dir and waits for the others'.
// Without it a rank could dial the port for the next case while the
// previous case's coordinator is still inside Close (a case that breaks
// its communicator ends with no barrier), and a worker whose connection
// that coordinator closes before answering fails its start-up instead of
// trying again.
func closedBarrier(dir, name, rank string, size int) error {
	if err := os.WriteFile(filepath.Join(dir, "closed-"+name+"-"+rank), nil, 0o644); err != nil {
		return err
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		n := 0
		for r := range size {
			if _, err := os.Stat(filepath.Join(dir, "closed-"+name+"-"+strconv.Itoa(r))); err == nil {
				n++
			}
		}
		if n == size {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d ranks closed their communicator of %s within 2 minutes", n, size, name)
		}
		time.Sleep(2 * time.Millisecond) // polling other processes' files
	}
}

// TestConformanceMultiProcess runs the conformance suite with every rank a
// separate OS process over real TCP, at R = 2 and 4, and at R = 4 over TLS
// (COBRE_TCP_TLS_CERT, COBRE_TCP_TLS_KEY, COBRE_TCP_TLS_CA: a certificate
// per rank, control sessions on).
func TestConformanceMultiProcess(t *testing.T) {
	for _, size := range []int{2, 4} {
		t.Run(fmt.Sprintf("ranks=%d", size), func(t *testing.T) {
			runConformanceProcesses(t, size, nil)
		})
	}
	t.Run("ranks=4/tls", func(t *testing.T) {
		f, err := testkit.WriteTLSFiles(t.TempDir(), 4)
		require.NoError(t, err)
		runConformanceProcesses(t, 4, f.Env)
	})
}

// TestTLSMultiProcessPlainWorker: separate OS processes, a TLS coordinator
// and a worker without the TLS variables: both fail start-up, the worker
// saying the coordinator requires TLS and the coordinator that the peer
// does not speak TLS. (With the TLS variables ignored, both would start.)
func TestTLSMultiProcessPlainWorker(t *testing.T) {
	f, err := testkit.WriteTLSFiles(t.TempDir(), 2)
	require.NoError(t, err)
	outs, errs := startConformanceProcesses(t, 2, func(r int) []string {
		env := []string{envStartOnly + "=1", "COBRE_TCP_CONNECT_TIMEOUT_MS=3000"}
		if r == 0 {
			env = append(env, f.Env(0)...)
		}
		return env
	})
	for r := range errs {
		assert.Error(t, errs[r], "rank %d must fail:\n%s", r, outs[r])
	}
	assert.Contains(t, outs[1], "this coordinator requires TLS")
	assert.Contains(t, outs[0], "the peer does not speak TLS")
}

// runConformanceProcesses runs every conformance case for size with each
// rank a separate OS process (the test binary), rank r's environment
// extended with env(r), checks that every rank passed every case, and
// returns their outputs.
func runConformanceProcesses(t *testing.T, size int, env func(r int) []string) []string {
	outs, errs := startConformanceProcesses(t, size, env)
	want := 0
	for _, tc := range testkit.Cases() {
		if tc.Sizes == nil || tc.Sizes(size) {
			want++
		}
	}
	for r := range size {
		passed := 0
		sc := bufio.NewScanner(strings.NewReader(outs[r]))
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "ok ") {
				passed++
			}
		}
		if errs[r] != nil || passed != want {
			t.Errorf("rank %d (pid exited: %v) passed %d of %d cases:\n%s", r, errs[r], passed, want, outs[r])
		}
	}
	return outs
}

// startConformanceProcesses runs the conformance child as size OS
// processes and returns their outputs and exit errors.
func startConformanceProcesses(t *testing.T, size int, env func(r int) []string) ([]string, []error) {
	exe, err := os.Executable()
	require.NoError(t, err)
	port, dir := freePort(t), t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	outs := make([]bytes.Buffer, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		cmd := exec.CommandContext(ctx, exe)
		cmd.Env = append(os.Environ(),
			envChild+"=1", envDir+"="+dir,
			"COBRE_COMM_BACKEND=tcp", "COBRE_TCP_COORDINATOR=127.0.0.1", "COBRE_TCP_BIND_ADDR=127.0.0.1",
			"COBRE_TCP_PORT="+strconv.Itoa(port), "COBRE_TCP_RANK="+strconv.Itoa(r), "COBRE_TCP_SIZE="+strconv.Itoa(size),
			"COBRE_TCP_TIMEOUT_SECS=30", "GORACE=atexit_sleep_ms=0")
		if env != nil {
			cmd.Env = append(cmd.Env, env(r)...)
		}
		cmd.Stdout, cmd.Stderr = &outs[r], &outs[r]
		require.NoError(t, cmd.Start())
		wg.Go(func() { errs[r] = cmd.Wait() })
	}
	wg.Wait()
	res := make([]string, size)
	for r := range size {
		res[r] = outs[r].String()
	}
	return res, errs
}

// conformanceProcs runs the conformance suite at size ranks, rank r a
// separate OS process started from command(r) (this test binary, with the
// environment of a TCP job but rank and size, which are added), and checks
// that every rank passed every case.
func conformanceProcs(t *testing.T, size int, command func(r int) *exec.Cmd) {
	t.Helper()
	want := 0
	for _, tc := range testkit.Cases() {
		if tc.Sizes == nil || tc.Sizes(size) {
			want++
		}
	}
	dir := t.TempDir()
	outs := make([]bytes.Buffer, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		cmd := command(r)
		cmd.Env = append(cmd.Env,
			envChild+"=1", envDir+"="+dir,
			"COBRE_TCP_RANK="+strconv.Itoa(r), "COBRE_TCP_SIZE="+strconv.Itoa(size),
			"COBRE_TCP_TIMEOUT_SECS=30", "GORACE=atexit_sleep_ms=0")
		cmd.Stdout, cmd.Stderr = &outs[r], &outs[r]
		require.NoError(t, cmd.Start())
		wg.Go(func() { errs[r] = cmd.Wait() })
	}
	wg.Wait()
	for r := range size {
		passed := 0
		sc := bufio.NewScanner(bytes.NewReader(outs[r].Bytes()))
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "ok ") {
				passed++
			}
		}
		if errs[r] != nil || passed != want {
			t.Errorf("rank %d (pid exited: %v) passed %d of %d cases:\n%s", r, errs[r], passed, want, outs[r].String())
		}
	}
}
