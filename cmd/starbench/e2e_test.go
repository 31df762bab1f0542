package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestEndToEnd builds starbench and runs it as real OS processes over real
// TCP: -n 2 with two workloads as JSON, then -n 1 (no socket) as a table,
// then a large (streamed) allreduce, the raw relay and the shm backend at
// -n 3.
func TestEndToEnd(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build starbench with")
	}
	bin := filepath.Join(t.TempDir(), "starbench")
	out, err := exec.Command(goTool, "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	starbench := func(args ...string) (stdout, stderr string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, bin, args...)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		require.NoError(t, cmd.Run(), "starbench %v\nstderr:\n%s", args, e.String())
		return o.String(), e.String()
	}

	stdout, stderr := starbench("-n", "2", "--workloads", "barrier,allreduce-32B", "--json")
	assert.Empty(t, stderr)
	var doc struct {
		Date    string `json:"date"`
		Go      string `json:"go"`
		Ranks   int    `json:"ranks"`
		Backend string `json:"backend"`
		CPUs    int    `json:"cpus"`
		Results []struct {
			Workload     string   `json:"workload"`
			Ranks        int      `json:"ranks"`
			BytesPerRank int64    `json:"bytes_per_rank"`
			Repeats      int      `json:"repeats"`
			MedianNS     int64    `json:"median_ns"`
			MinNS        int64    `json:"min_ns"`
			MaxNS        int64    `json:"max_ns"`
			AlgBW        *float64 `json:"algbw_bytes_per_sec"`
		} `json:"results"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &doc), "stdout:\n%s", stdout)
	_, err = time.Parse(time.RFC3339, doc.Date)
	assert.NoError(t, err)
	assert.NotEmpty(t, doc.Go)
	assert.Equal(t, 2, doc.Ranks)
	assert.Equal(t, "tcp", doc.Backend)
	assert.Positive(t, doc.CPUs)
	require.Len(t, doc.Results, 2)
	for i, name := range []string{"barrier", "allreduce-32B"} {
		r := doc.Results[i]
		assert.Equal(t, name, r.Workload)
		assert.Equal(t, 2, r.Ranks)
		assert.Equal(t, 200, r.Repeats)
		assert.Positive(t, r.MedianNS)
		assert.LessOrEqual(t, r.MinNS, r.MedianNS)
		assert.LessOrEqual(t, r.MedianNS, r.MaxNS)
	}
	assert.Zero(t, doc.Results[0].BytesPerRank)
	assert.Nil(t, doc.Results[0].AlgBW, "barrier has no bandwidth")
	assert.Equal(t, int64(32), doc.Results[1].BytesPerRank)
	if assert.NotNil(t, doc.Results[1].AlgBW) {
		assert.InEpsilon(t, 32/(float64(doc.Results[1].MedianNS)/1e9), *doc.Results[1].AlgBW, 1e-6)
	}

	stdout, stderr = starbench("-n", "1", "--workloads", "broadcast-10KB", "--repeats-scale", "0.05")
	assert.Empty(t, stderr)
	assert.Regexp(t, `(?m)^# starbench \S+Z  go\S+ \S+/\S+  cpus=\d+  backend=tcp  ranks=1  repeats-scale=0\.05\n`+
		`# processor: .+\n`+
		`workload +ranks +bytes/rank +repeats +median +algbw\n`+
		`broadcast-10KB +1 +10 KiB +10 +\S+ \S+s +\S+ \S+/s\n`+
		`# rank 0 \(coordinator\) peak RSS: \d+(\.\d)? \S+\n$`, stdout)

	// A large allreduce, which rank 0 streams ((R-1)·n = 128 MiB), every
	// element of every rank's result verified, in separate processes.
	stdout, stderr = starbench("-n", "3", "--workloads", "allreduce-64MiB", "--repeats-scale", "0.2", "--json")
	assert.Empty(t, stderr)
	doc.Results = nil
	require.NoError(t, json.Unmarshal([]byte(stdout), &doc), "stdout:\n%s", stdout)
	require.Len(t, doc.Results, 1)
	assert.Equal(t, "allreduce-64MiB", doc.Results[0].Workload)
	assert.Equal(t, int64(64<<20), doc.Results[0].BytesPerRank)
	assert.Equal(t, 1, doc.Results[0].Repeats)

	// The raw relay runs every workload, verified as starcomm's are, at
	// R = 3 (a broadcast root that is a worker, a worker that only reads).
	stdout, stderr = starbench("-n", "3", "--raw", "--repeats-scale", "0.05", "--json")
	assert.Empty(t, stderr)
	doc.Results = nil
	require.NoError(t, json.Unmarshal([]byte(stdout), &doc), "stdout:\n%s", stdout)
	assert.Equal(t, "raw relay over tcp", doc.Backend)
	assert.Equal(t, 3, doc.Ranks)
	require.Len(t, doc.Results, len(standardWorkloads()))
	for _, r := range doc.Results {
		assert.Positive(t, r.MedianNS, r.Workload)
	}

	// The shm backend: every workload, verified, at R = 3, same JSON shape.
	stdout, stderr = starbench("-n", "3", "--backend", "shm", "--repeats-scale", "0.05", "--json")
	assert.Empty(t, stderr)
	doc.Results = nil
	require.NoError(t, json.Unmarshal([]byte(stdout), &doc), "stdout:\n%s", stdout)
	assert.Equal(t, "shm", doc.Backend)
	assert.Equal(t, 3, doc.Ranks)
	require.Len(t, doc.Results, len(standardWorkloads()))
	for _, r := range doc.Results {
		assert.Positive(t, r.MedianNS, r.Workload)
		assert.Equal(t, 3, r.Ranks, r.Workload)
	}
}
