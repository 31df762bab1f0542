package star

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/starcomm/starcomm/comm"
)

// TestFrameLimit: a payload of 2^32-2 bytes, LEN 2^32-1, is the largest a
// frame carries, and a byte more is refused naming the limit. (The check
// used to refuse the largest one too.) On a 32-bit system no slice is that
// long.
func TestFrameLimit(t *testing.T) {
	if strconv.IntSize < 64 {
		t.Skip("an int of this system cannot hold a payload of 2^32-2 bytes")
	}
	largest := uint64(MaxFrameLen - 1)
	n := int(largest)
	assert.NoError(t, frameLimit(comm.OpBroadcast, n))
	var h [HeaderSize]byte
	PutHeader(h[:], TagBroadcast, n)
	got, tag, err := ParseHeader(h[:])
	assert.NoError(t, err)
	assert.Equal(t, n, got, "the largest payload's header reads back")
	assert.Equal(t, byte(TagBroadcast), tag)

	err = frameLimit(comm.OpBroadcast, n+1)
	var ia *comm.InvalidArgumentError
	if assert.ErrorAs(t, err, &ia) {
		assert.Contains(t, err.Error(), "payload of 4294967295 bytes exceeds the wire limit of 4294967294 bytes per frame")
	}
}
