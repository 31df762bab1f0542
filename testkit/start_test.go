package testkit_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm/testkit"
)

// TestStartStarSize: a size below 1 is an error naming it, not a panic (a
// negative size) or no communicator and no error (size 0).
func TestStartStarSize(t *testing.T) {
	for _, size := range []int{0, -1} {
		comms, err := testkit.StartStar(context.Background(), testkit.NewPipeNetwork(), size, nil)
		require.ErrorContains(t, err, "size is")
		require.Nil(t, comms)
	}
	comms, err := testkit.StartStar(context.Background(), testkit.NewPipeNetwork(), 1, nil)
	require.NoError(t, err)
	require.Len(t, comms, 1)
	require.NoError(t, testkit.CloseAll(comms))
}
