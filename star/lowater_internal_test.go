package star

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// markConn is a bufConn that is a transport.LowWaterReader: it records
// every low-water mark asked for, and each Read returns at most step
// bytes, as a socket does while a large frame still comes in.
type markConn struct {
	bufConn
	step  int
	marks []int
}

func (c *markConn) SetReadLowWater(n int) error {
	if len(c.marks) == 0 || c.marks[len(c.marks)-1] != n {
		c.marks = append(c.marks, n)
	}
	return nil
}

func (c *markConn) Read(p []byte) (int, error) {
	return c.bufConn.Read(p[:min(len(p), c.step)])
}

// TestLowWaterMarks: a large frame's waiting reads ask for the rest of the
// frame or lowWaterMax (256 KiB) of it, whichever is less, lower the mark
// as the frame comes in, and put it back at 1 after the frame; a frame
// small enough to poll asks for none.
func TestLowWaterMarks(t *testing.T) {
	require.Equal(t, 256<<10, lowWaterMax)
	payload := make([]byte, 800_000) // allgatherv-cuts' reply at R=4
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	c := &markConn{step: 200_000}
	l := newLink(0, c, 0)
	require.NoError(t, l.writeFrame(TagAllgathervRecv, nil, payload))
	got := make([]byte, len(payload))
	require.NoError(t, l.readFrame(TagAllgathervRecv, got[:300_000], got[300_000:]))
	require.Equal(t, payload, got)
	require.Equal(t, []int{256 << 10, 100_000, 1}, c.marks) // the last 100,000 bytes: no more

	c = &markConn{step: 200_000}
	l = newLink(0, c, 0)
	require.NoError(t, l.writeFrame(TagAllgathervRecv, nil, payload[:pollMax]))
	require.NoError(t, l.readFrame(TagAllgathervRecv, got[:pollMax]))
	require.Equal(t, payload[:pollMax], got[:pollMax])
	require.Empty(t, c.marks, "a frame of pollMax bytes asked for a mark")
}
