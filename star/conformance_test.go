package star_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/testkit"
)

// TestConformancePipe runs the shared conformance suite over in-memory
// pipes, whose unbuffered writes expose any reliance on socket buffers.
func TestConformancePipe(t *testing.T) {
	nw := testkit.NewPipeNetwork()
	testkit.RunConformance(t, []int{1, 2, 4, 8}, func(t testing.TB, size int) []comm.Communicator {
		comms, err := testkit.StartStar(context.Background(), nw, size, nil)
		require.NoError(t, err)
		return comms
	})
}
