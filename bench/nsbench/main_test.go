package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestValidList(t *testing.T) {
	for _, s := range []string{"barrier", "allgatherv-16MiB,allreduce-64MiB", "a-b,c"} {
		assert.True(t, validList(s), s)
	}
	for _, s := range []string{"", ",", "barrier,", ",barrier", "a b", "barrier;ls", "all_reduce", "a,,b"} {
		assert.False(t, validList(s), s)
	}
}

func TestStarBound(t *testing.T) {
	// An allgatherv: rank 0 sends each of the R-1 workers the assembled
	// buffer of R·D bytes.
	assert.Equal(t, float64(3*4*bigBytes), starBound("allgatherv-16MiB", 4))
	// An allreduce: ·n each way.
	assert.Equal(t, float64(3*reduceBytes), starBound("allreduce-64MiB", 4))
	assert.Equal(t, float64(7*reduceBytes), starBound("allreduce-64MiB", 8))
	assert.Zero(t, starBound("barrier", 4))
}

func TestParseRate(t *testing.T) {
	bps, err := parseRate("1gbit")
	assert.NoError(t, err)
	assert.Equal(t, 125e6, bps)
	bps, err = parseRate("none")
	assert.NoError(t, err)
	assert.Zero(t, bps)
	_, err = parseRate("fast")
	assert.ErrorContains(t, err, `"fast"`)
}
