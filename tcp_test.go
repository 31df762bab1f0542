package starcomm_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

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
	for _, tc := range testkit.Cases() {
		if tc.Sizes != nil && !tc.Sizes(size) {
			continue
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
		} else {
			fmt.Printf("ok %s\n", tc.Name)
		}
	}
	if failed > 0 {
		return 1
	}
	return 0
}

// TestConformanceMultiProcess runs the conformance suite with every rank a
// separate OS process over real TCP, at R = 2 and 4.
func TestConformanceMultiProcess(t *testing.T) {
	exe, err := os.Executable()
	require.NoError(t, err)
	for _, size := range []int{2, 4} {
		t.Run(fmt.Sprintf("ranks=%d", size), func(t *testing.T) {
			want := 0
			for _, tc := range testkit.Cases() {
				if tc.Sizes == nil || tc.Sizes(size) {
					want++
				}
			}
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
		})
	}
}
