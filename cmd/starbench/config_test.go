package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm"
	"github.com/starcomm/starcomm/internal/errfile"
)

// TestRankRecordsConfigError: a starbench rank whose configuration is
// refused (a launcher's rank given COBRE_TCP_PORT=abc) says so and records
// it in its COBRE_ERROR_FILE, blaming itself, so that the launcher names
// it and quotes the reason instead of "no rank left an error record".
func TestRankRecordsConfigError(t *testing.T) {
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "COBRE_") {
			t.Setenv(k, "") // blank: unset for starcomm
		}
	}
	path := filepath.Join(t.TempDir(), "rank-1.json")
	t.Setenv("COBRE_ERROR_FILE", path)
	t.Setenv("COBRE_COMM_BACKEND", "tcp")
	t.Setenv("COBRE_TCP_RANK", "1")
	t.Setenv("COBRE_TCP_SIZE", "2")
	t.Setenv("COBRE_TCP_COORDINATOR", "127.0.0.1")
	t.Setenv("COBRE_TCP_PORT", "abc")
	o, err := parseArgs(nil)
	require.NoError(t, err)
	var stdout, stderr bytes.Buffer
	assert.Equal(t, exitFailure, runRank(context.Background(), o, &stdout, &stderr))
	assert.Contains(t, stderr.String(), `invalid COBRE_TCP_PORT="abc"`)
	rec, err := errfile.Read(path)
	require.NoError(t, err, "no error record")
	assert.Equal(t, 1, rec.Rank)
	assert.Equal(t, 1, rec.Blamed)
	assert.Contains(t, rec.Message, `invalid COBRE_TCP_PORT="abc"`)
}

// TestBackendName: the backend a rank reports is the one the library
// selects, rank 0 of a tcp job (which sets no coordinator) included.
func TestBackendName(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  starcomm.Config
		raw  bool
		want string
	}{
		{"rank 0 of 4, auto", starcomm.Config{Backend: "auto", Rank: 0, Size: 4}, false, "tcp"},
		{"worker, auto", starcomm.Config{Backend: "auto", Rank: 2, Size: 4, Coordinator: "127.0.0.1"}, false, "tcp"},
		{"one rank, auto", starcomm.Config{Backend: "auto", Size: 1}, false, "local"},
		{"shm, auto", starcomm.Config{Backend: "auto", Size: 4, ShmName: "job"}, false, "shm"},
		{"shm named", starcomm.Config{Backend: "SHM", Size: 4}, false, "shm"},
		{"raw", starcomm.Config{Backend: "auto", Size: 4}, true, "raw relay over tcp"},
	} {
		assert.Equal(t, tc.want, backendName(tc.cfg, tc.raw), tc.name)
	}
}
