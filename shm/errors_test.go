package shm_test

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/starcomm/starcomm/shm"
)

// TestMissingRanksMessage: the error of a start-up that 32767 ranks never
// joined is one short line, its runs written as ranges; the ranks stay
// whole in the field, and the cause unwraps.
func TestMissingRanksMessage(t *testing.T) {
	ranks := make([]int, 0, shm.MaxSize-1)
	for r := 1; r < shm.MaxSize; r++ {
		ranks = append(ranks, r)
	}
	err := &shm.MissingRanksError{Ranks: ranks, Err: os.ErrDeadlineExceeded}
	assert.Equal(t, "missing ranks [1-32767]: i/o timeout", err.Error())
	assert.Len(t, err.Ranks, 32767)
	assert.True(t, errors.Is(err, os.ErrDeadlineExceeded))
	assert.Equal(t, "missing ranks [1 3]: i/o timeout", (&shm.MissingRanksError{Ranks: []int{1, 3}, Err: os.ErrDeadlineExceeded}).Error())
	// After the connect timeout: how many joined, within what, and the
	// setting that bounds it.
	assert.Equal(t, "2 of 4 ranks joined the segment within 2s (the connect timeout, COBRE_TCP_CONNECT_TIMEOUT_MS); missing ranks [1 3]: i/o timeout",
		(&shm.MissingRanksError{Ranks: []int{1, 3}, Err: os.ErrDeadlineExceeded, Size: 4, Within: 2 * time.Second}).Error())
}
