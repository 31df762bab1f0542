package shm_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm/testkit"
)

// TestConformanceProcesses runs the conformance suite with every rank a
// separate OS process mapping the segment, at R = 1, 2, 4, 8.
func TestConformanceProcesses(t *testing.T) {
	exe, err := os.Executable()
	require.NoError(t, err)
	for _, size := range []int{1, 2, 4, 8} {
		t.Run(fmt.Sprintf("ranks=%d", size), func(t *testing.T) {
			want := 0
			for _, tc := range testkit.Cases() {
				if tc.Sizes == nil || tc.Sizes(size) {
					want++
				}
			}
			name, dir := testkit.ShmName(t), t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			outs := make([]bytes.Buffer, size)
			errs := make([]error, size)
			var wg sync.WaitGroup
			for r := range size {
				cmd := exec.CommandContext(ctx, exe)
				cmd.Env = append(os.Environ(), envConformanceDir+"="+dir,
					"COBRE_SHM_NAME="+name, "COBRE_TCP_RANK="+strconv.Itoa(r), "COBRE_TCP_SIZE="+strconv.Itoa(size),
					"COBRE_SHM_TIMEOUT_SECS=30", "GORACE=atexit_sleep_ms=0")
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
					t.Errorf("rank %d (exit: %v) passed %d of %d cases:\n%s", r, errs[r], passed, want, outs[r].String())
				}
			}
			entries, _ := os.ReadDir("/dev/shm")
			for _, e := range entries {
				if strings.Contains(e.Name(), name) {
					t.Errorf("left in /dev/shm after the job: %s", e.Name())
				}
			}
		})
	}
}

// TestMatrix runs the shm rows of the failure matrix with real processes.
func TestMatrix(t *testing.T) {
	testkit.RunShmMatrix(t, testkit.ShmMatrix())
}
