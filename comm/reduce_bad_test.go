package comm_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/starcomm/starcomm/comm"
)

// TestReduceBadLengths: Reduce with acc and in of different lengths, or a
// ragged number of bytes, panics with a message naming the lengths (a
// programming error, as its doc says), never a slice bounds panic or a
// silent reduce of a prefix.
func TestReduceBadLengths(t *testing.T) {
	for _, tc := range []struct {
		name    string
		acc, in int
		want    string
	}{
		{"acc longer", 16, 8, "comm.Reduce: acc has 16 bytes and in 8: want the same whole number of float64 elements"},
		{"acc shorter", 8, 16, "comm.Reduce: acc has 8 bytes and in 16: want the same whole number of float64 elements"},
		{"ragged", 9, 9, "comm.Reduce: acc has 9 bytes and in 9: want the same whole number of float64 elements"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.PanicsWithValue(t, tc.want, func() {
				comm.Reduce(comm.Float64, comm.Sum, make([]byte, tc.acc), make([]byte, tc.in))
			})
		})
	}
	acc, in := make([]byte, 16), make([]byte, 16)
	acc[0], in[0] = 1, 2
	assert.NotPanics(t, func() { comm.Reduce(comm.Uint8, comm.Sum, acc, in) })
	assert.Equal(t, byte(3), acc[0])
}
