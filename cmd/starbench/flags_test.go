package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseArgsDefaults(t *testing.T) {
	o, err := parseArgs(nil)
	require.NoError(t, err)
	assert.Equal(t, 0, o.n, "without -n starbench is one rank")
	assert.Equal(t, 1.0, o.scale)
	assert.False(t, o.json)
	assert.Zero(t, o.timeout)
	var names []string
	for _, w := range o.workloads {
		names = append(names, w.name)
	}
	assert.Equal(t, []string{"allgatherv-cuts", "allgatherv-2MiB", "allgatherv-16MiB", "allreduce-32B",
		"barrier", "broadcast-10KB", "sddp-iteration"}, names)
}

func TestParseArgs(t *testing.T) {
	o, err := parseArgs([]string{"-n", "4", "--workloads", " barrier , allreduce-32B", "--repeats-scale=0.25", "--json", "-timeout", "2.5"})
	require.NoError(t, err)
	assert.Equal(t, 4, o.n)
	require.Len(t, o.workloads, 2)
	assert.Equal(t, "barrier", o.workloads[0].name, "the order given is kept")
	assert.Equal(t, "allreduce-32B", o.workloads[1].name)
	assert.Equal(t, 0.25, o.scale)
	assert.True(t, o.json)
	assert.Equal(t, 2.5, o.timeout)

	// What a started rank gets parses back to the same run, without -n.
	args := rankArgs(o)
	assert.Equal(t, []string{"--workloads", "barrier,allreduce-32B", "--repeats-scale", "0.25", "--json"}, args)
	back, err := parseArgs(args)
	require.NoError(t, err)
	assert.Equal(t, 0, back.n)
	assert.Equal(t, o.scale, back.scale)
	assert.Equal(t, o.json, back.json)
	require.Len(t, back.workloads, 2)
	assert.Equal(t, "barrier", back.workloads[0].name)
	assert.False(t, back.raw)

	// --raw reaches the ranks.
	o, err = parseArgs([]string{"-n", "2", "--raw"})
	require.NoError(t, err)
	assert.True(t, o.raw)
	back, err = parseArgs(rankArgs(o))
	require.NoError(t, err)
	assert.True(t, back.raw)

	// --profile and --trace reach the ranks, as absolute paths.
	dir := t.TempDir()
	o, err = parseArgs([]string{"-n", "2", "--profile", dir, "--trace", dir})
	require.NoError(t, err)
	back, err = parseArgs(rankArgs(o))
	require.NoError(t, err)
	assert.Equal(t, dir, back.profile)
	assert.Equal(t, dir, back.trace)

	// --backend shm is the launcher's: the ranks get COBRE_* variables.
	o, err = parseArgs([]string{"-n", "4", "--backend", "shm"})
	require.NoError(t, err)
	assert.Equal(t, "shm", o.backend)
	assert.Equal(t, "shm", launchConfig(o, []string{"x"}, nil, nil, nil, nil).Backend)
	assert.NotContains(t, rankArgs(o), "--backend")
}

func TestParseArgsUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string // part of the message, naming the flag
	}{
		{"n=zero", []string{"-n", "0"}, "-n must be at least 1"},
		{"n=negative", []string{"-n=-3"}, "-n must be at least 1"},
		{"n=word", []string{"-n", "four"}, "-n"},
		{"n=beyond-shm", []string{"-n", "32769", "--backend", "shm"}, "-n is 32769; the shm backend takes at most 32768 ranks"},
		{"n=beyond-tcp", []string{"-n", "1048577"}, "-n is 1048577; the tcp backend takes at most 1048576 ranks"},
		{"n=missing-value", []string{"-n"}, "flag needs an argument: -n"},
		{"workloads=unknown", []string{"--workloads", "barrier,allreduce"}, `--workloads: unknown workload "allreduce"`},
		{"workloads=empty-name", []string{"--workloads", "barrier,,broadcast-10KB"}, "--workloads"},
		{"workloads=twice", []string{"--workloads", "barrier,barrier"}, `--workloads names "barrier" twice`},
		{"scale=zero", []string{"--repeats-scale", "0"}, "--repeats-scale must be"},
		{"scale=negative", []string{"--repeats-scale", "-1"}, "--repeats-scale must be"},
		{"scale=huge", []string{"--repeats-scale", "1e9"}, "--repeats-scale must be"},
		{"scale=nan", []string{"--repeats-scale", "NaN"}, "--repeats-scale must be"},
		{"scale=word", []string{"--repeats-scale", "fast"}, "-repeats-scale"},
		{"timeout=zero", []string{"--timeout", "0"}, "--timeout must be a number of seconds in 0.001..31536000"},
		{"timeout=inf", []string{"--timeout", "+Inf"}, "--timeout must be a number of seconds in 0.001..31536000"},
		{"timeout=below-1ms", []string{"--timeout", "0.0005"}, "--timeout must be a number of seconds in 0.001..31536000"},
		{"timeout=over-a-year", []string{"--timeout", "31536001"}, "--timeout must be a number of seconds in 0.001..31536000"},
		{"timeout=huge", []string{"--timeout", "1e9"}, "got 1000000000"},
		{"timeout=zero/tcp", []string{"--timeout", "0"}, "as COBRE_TCP_TIMEOUT_SECS, got 0"},
		{"timeout=zero/shm", []string{"-n", "2", "--backend", "shm", "--timeout", "0"}, "as COBRE_SHM_TIMEOUT_SECS, got 0"},
		{"workloads=empty", []string{"--workloads="}, "--workloads is empty"},
		{"workloads=blank", []string{"--workloads", " "}, "--workloads is empty"},
		{"timeout=nan", []string{"--timeout", "NaN"}, "--timeout must be a number of seconds in 0.001..31536000"},
		{"backend=unknown", []string{"-n", "2", "--backend", "mpi"}, `--backend must be tcp or shm, got "mpi"`},
		{"backend=without-n", []string{"--backend", "shm"}, "--backend needs -n"},
		{"backend=shm-raw", []string{"-n", "2", "--backend", "shm", "--raw"}, "--raw is the relay over tcp"},
		{"flag=unknown", []string{"--ranks", "2,4"}, "flag provided but not defined: -ranks"},
		{"args=positional", []string{"-n", "2", "extra"}, `unexpected argument "extra"`},
		{"profile=missing-dir", []string{"--profile", "/nonexistent/starbench"}, `--profile must name an existing directory, got "/nonexistent/starbench"`},
		{"trace=a-file", []string{"--trace", "flags_test.go"}, `--trace must name an existing directory, got "flags_test.go"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseArgs(tc.args)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)

			var stdout, stderr bytes.Buffer
			code := run(tc.args, &stdout, &stderr)
			assert.Equal(t, exitUsage, code)
			assert.Empty(t, stdout.String())
			assert.True(t, strings.HasPrefix(stderr.String(), "starbench: "+err.Error()+"\n"), stderr.String())
			assert.Contains(t, stderr.String(), synopsis)
		})
	}
}

func TestHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	assert.Equal(t, exitOK, run([]string{"-h"}, &stdout, &stderr))
	assert.Empty(t, stderr.String())
	for _, want := range append([]string{synopsis, "-backend", "-repeats-scale", "-workloads", "-json", "-timeout", "-profile", "-trace", "allreduce-64MiB", "late-1ms", "late-10ms", "late-1s"}, workloadNames()...) {
		assert.Contains(t, stdout.String(), want)
	}
}
