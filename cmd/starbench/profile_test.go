package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStartProfiles: --profile and --trace write the rank's CPU profile and
// execution trace into their directories, named by rank; an unwritable
// directory is an error naming the flag.
func TestStartProfiles(t *testing.T) {
	dir := t.TempDir()
	stop, err := startProfiles(options{profile: dir, trace: dir}, 3)
	require.NoError(t, err)
	x := 0
	for i := range 1_000_000 {
		x += i
	}
	require.NoError(t, stop())
	for _, name := range []string{"cpu-rank3.pprof", "trace-rank3.out"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		require.NoError(t, err, name)
		assert.Positive(t, fi.Size(), name)
	}
	_, err = startProfiles(options{trace: filepath.Join(dir, "missing")}, 0)
	assert.ErrorContains(t, err, "--trace")
}
