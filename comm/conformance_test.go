package comm_test

import (
	"testing"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/testkit"
)

// TestConformanceLocal runs the shared conformance suite on the single-rank
// local backend.
func TestConformanceLocal(t *testing.T) {
	testkit.RunConformance(t, []int{1}, func(t testing.TB, size int) []comm.Communicator {
		return []comm.Communicator{comm.NewLocal()}
	})
}
