package shm_test

import (
	"context"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm/shm"
	"github.com/starcomm/starcomm/testkit"
)

// TestFullDirLeavesNoFile: a segment that does not fit in its directory's
// tmpfs (a full /dev/shm) fails every rank's New with the system's "no
// space left on device", and leaves no file behind, neither an empty one
// nor one of a partial size. The directory is a 64 KiB tmpfs mounted for
// the test, which needs root.
func TestFullDirLeavesNoFile(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root")
	}
	testkit.CheckGoroutines(t)
	dir := t.TempDir()
	require.NoError(t, syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=64k"))
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })

	name := uniqueName(t)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		cfg := shm.CommConfig{Name: name, Dir: dir, Rank: r, Size: 2, ChunkBytes: 1 << 20, ConnectTimeout: 2 * time.Second, Timeout: 5 * time.Second}
		wg.Go(func() {
			c, err := shm.New(context.Background(), cfg)
			if c != nil {
				c.Close()
			}
			errs[r] = err
		})
	}
	wg.Wait()
	for r, err := range errs {
		require.Error(t, err, "rank %d", r)
		assert.ErrorIs(t, err, syscall.ENOSPC, "rank %d", r)
		assert.Contains(t, err.Error(), "no space left on device", "rank %d", r)
	}
	left, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range left {
		t.Errorf("left in the full directory: %s", e.Name())
	}
}
