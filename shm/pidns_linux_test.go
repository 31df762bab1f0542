package shm_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm/shm"
	"github.com/starcomm/starcomm/testkit"
)

// TestOtherPidNamespace: a rank in another pid namespace than the rank
// that created the segment (another container sharing /dev/shm) fails the
// job's start-up at once on every rank, naming it, instead of its pid
// being taken for another process's (here the child is pid 1 of its own
// namespace: the others would have found "rank 1 exited", or watched an
// unrelated process). The new namespace needs root.
func TestOtherPidNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a new pid namespace needs root")
	}
	name := testkit.ShmName(t)
	coord := testkit.Async(func() error {
		_, err := shm.New(context.Background(), shm.CommConfig{Name: name, Rank: 0, Size: 3, ConnectTimeout: time.Minute})
		return err
	})
	// Rank 0 creates the segment before rank 1 comes: wait for its file.
	for {
		if _, err := os.Stat(shm.SegmentPath("", name)); err == nil {
			break
		}
		time.Sleep(time.Millisecond)
	}
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), envStartChild+"=close", "COBRE_SHM_NAME="+name,
		"COBRE_TCP_RANK=1", "COBRE_TCP_SIZE=3", "COBRE_TCP_CONNECT_TIMEOUT_MS=60000", "GORACE=atexit_sleep_ms=0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	started := time.Now()
	runErr := cmd.Run()
	var exit *exec.ExitError
	require.ErrorAs(t, runErr, &exit, "rank 1 must fail; stderr: %s", stderr.String())
	assert.Contains(t, stderr.String(), "rank 1 (pid namespace pid:[")

	err = <-coord
	took := time.Since(started)
	require.ErrorIs(t, err, shm.ErrPidNamespace)
	var ae *shm.AbortError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, 1, ae.Rank)
	assert.Contains(t, err.Error(), "rank 1 (pid namespace pid:[")
	assert.Contains(t, err.Error(), "run in different pid namespaces")
	assert.Less(t, took, 20*time.Second, "rank 0 failed %v after rank 1 started, not at its connect timeout", took)
}
