package shm_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm/shm"
)

// TestSegmentNotRegular: a segment path that holds something other than a
// regular file (a named pipe, a directory, a symbolic link) fails New at
// once with an error naming the path and what is there, and leaves it
// alone. Before, a named pipe failed with "truncating the segment: invalid
// argument" (no path, no reason) and was then removed, and a symbolic link
// with "too many levels of symbolic links".
func TestSegmentNotRegular(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	require.NoError(t, os.WriteFile(target, []byte("keep me"), 0o600))
	for _, tc := range []struct {
		name, says string
		make       func(path string) error
	}{
		{"named-pipe", "is a named pipe, not a segment", func(p string) error { return syscall.Mkfifo(p, 0o600) }},
		{"directory", "is a directory, not a segment", func(p string) error { return os.Mkdir(p, 0o700) }},
		{"symlink", "is a symbolic link, not a segment", func(p string) error { return os.Symlink(target, p) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "notregular-" + tc.name
			path := shm.SegmentPath(dir, name)
			require.NoError(t, tc.make(path))
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err := shm.New(ctx, shm.CommConfig{Name: name, Rank: 0, Size: 1, Dir: dir})
			require.Error(t, err)
			assert.ErrorContains(t, err, path)
			assert.ErrorContains(t, err, tc.says)
			_, lerr := os.Lstat(path)
			assert.NoError(t, lerr, "what was at the path is left alone")
		})
	}
	b, err := os.ReadFile(target)
	require.NoError(t, err)
	assert.Equal(t, "keep me", string(b))
}
