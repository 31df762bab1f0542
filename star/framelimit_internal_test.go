package star

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/starcomm/starcomm/comm"
)

// TestFrameLimit: a payload of 2^32-2 bytes, LEN 2^32-1, is the largest a
// frame carries, and a byte more is refused naming the limit. (The check
// used to refuse the largest one too.)
func TestFrameLimit(t *testing.T) {
	assert.NoError(t, frameLimit(comm.OpBroadcast, 1<<32-2))
	var h [HeaderSize]byte
	PutHeader(h[:], TagBroadcast, 1<<32-2)
	n, tag, err := ParseHeader(h[:])
	assert.NoError(t, err)
	assert.Equal(t, 1<<32-2, n, "the largest payload's header reads back")
	assert.Equal(t, byte(TagBroadcast), tag)

	err = frameLimit(comm.OpBroadcast, 1<<32-1)
	var ia *comm.InvalidArgumentError
	if assert.ErrorAs(t, err, &ia) {
		assert.Contains(t, err.Error(), "payload of 4294967295 bytes exceeds the wire limit of 4294967294 bytes per frame")
	}
}
