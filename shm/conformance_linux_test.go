package shm_test

import (
	"fmt"
	"testing"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/shm"
	"github.com/starcomm/starcomm/testkit"
)

// TestConformanceInProcess runs the conformance suite over the shm backend
// with every rank a goroutine of this process (each mapping the segment
// itself), at R = 1, 2, 4, 8, with the default chunk and with 64-byte
// chunks (every message then moves in many steps through both halves).
func TestConformanceInProcess(t *testing.T) {
	for _, chunk := range []int{0, 1024} {
		t.Run(fmt.Sprintf("chunk=%d", chunk), func(t *testing.T) {
			testkit.RunConformance(t, []int{1, 2, 4, 8}, func(t testing.TB, size int) []comm.Communicator {
				return asComms(startRanks(t, size, func(c *shm.CommConfig) { c.ChunkBytes = chunk }))
			})
		})
	}
}
