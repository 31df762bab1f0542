package tcp

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm/transport"
)

// TestAcks: after the peer has read a write, this end sent data and the
// peer's host acknowledged it moments ago, its window open; on an idle
// connection the ages grow, and the peer's age of the data it received
// starts again with the next write; while the peer reads nothing and a writer
// blocks on a full socket, its window closes (though its host still
// answers); once it has read everything the window is open again; after
// Close, Acks fails with net.ErrClosed.
func TestAcks(t *testing.T) {
	a, b := pair(t, testConfig())
	_, err := a.Write([]byte("ping"))
	require.NoError(t, err)
	_, err = io.ReadFull(b, make([]byte, 4))
	require.NoError(t, err)
	ack, err := a.Acks()
	require.NoError(t, err)
	assert.True(t, ack.Open, "the window of a peer that read what came: %+v", ack)
	assert.Less(t, ack.SinceSent, time.Second, "%+v", ack)
	assert.Less(t, ack.SinceAcked, time.Second, "%+v", ack)

	const idle = 100 * time.Millisecond
	require.Eventually(t, func() bool {
		ack, err := a.Acks()
		return err == nil && ack.SinceSent >= idle && ack.SinceAcked >= idle
	}, watchdog, time.Millisecond, "an idle connection's ages grow")
	ack, err = b.Acks()
	require.NoError(t, err)
	assert.GreaterOrEqual(t, ack.SinceSent, idle, "the end that sent no data: %+v", ack)
	assert.GreaterOrEqual(t, ack.SinceReceived, idle, "the ping came before: %+v", ack)
	_, err = a.Write([]byte("pong"))
	require.NoError(t, err)
	_, err = io.ReadFull(b, make([]byte, 4))
	require.NoError(t, err)
	ack, err = b.Acks()
	require.NoError(t, err)
	assert.Less(t, ack.SinceReceived, idle, "the pong just came: %+v", ack)

	const total = 32 << 20
	wrote := async(func() error {
		_, err := a.Write(make([]byte, total))
		return err
	})
	require.Eventually(t, func() bool {
		ack, err := a.Acks()
		return err == nil && !ack.Open && ack.SinceAcked < time.Second
	}, watchdog, time.Millisecond, "a peer that reads nothing closes its window, and its host answers")

	got := async(func() int64 {
		n, _ := io.Copy(io.Discard, io.LimitReader(b, total))
		return n
	})
	require.NoError(t, await(t, wrote, "Write"))
	require.Equal(t, int64(total), await(t, got, "the peer's reads"))
	require.Eventually(t, func() bool {
		ack, err := a.Acks()
		return err == nil && ack.Open
	}, watchdog, time.Millisecond, "the window once the peer has read everything")

	require.NoError(t, a.Close())
	_, err = a.Acks()
	assert.True(t, errors.Is(err, net.ErrClosed), "after Close: %v", err)
	var _ transport.AckReporter = a
}

// TestReleaseAtLeast: kernel releases as uname gives them.
func TestReleaseAtLeast(t *testing.T) {
	for _, c := range []struct {
		release string
		want    bool
	}{
		{"6.2.0", true},
		{"6.18.5-cloud-amd64", true},
		{"7.0", true},
		{"6.1.0-37-amd64", false},
		{"5.15.0-91-generic", false},
		{"6", false},
		{"", false},
		{"x.y", false},
		{"6.2-rc1", true},
	} {
		assert.Equal(t, c.want, releaseAtLeast(c.release, 6, 2), "%q", c.release)
	}
}
