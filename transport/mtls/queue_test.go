package mtls

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm/transport"
)

// TestQueues: over TLS over TCP, Unread counts the record bytes the peer
// sent that no Read has returned (more than the plaintext: each record
// adds its overhead), and nothing once they are read; Unsent is 0 once
// the system has sent what was written.
func TestQueues(t *testing.T) {
	p := testPKI(t)
	l := tcpListen(t, p.config(t, p.server))
	type accepted struct {
		c   transport.Conn
		err error
	}
	acc := async(func() accepted { c, err := l.Accept(); return accepted{c, err} })
	ctx, cancel := context.WithTimeout(context.Background(), watchdog)
	defer cancel()
	a, err := tcpDialer(p.config(t, p.client)).Dial(ctx, l.Addr())
	require.NoError(t, err)
	defer a.Close()
	res := await(t, acc, "Accept")
	require.NoError(t, res.err)
	b := res.c
	defer b.Close()

	ur, ok := a.(transport.UnreadCounter)
	require.True(t, ok, "%T implements transport.UnreadCounter", a)
	us, ok := b.(transport.UnsentCounter)
	require.True(t, ok, "%T implements transport.UnsentCounter", b)

	// One byte first, so that the handshake is over on both ends.
	wrote := async(func() error { _, err := b.Write([]byte{1}); return err })
	_, err = io.ReadFull(a, make([]byte, 1))
	require.NoError(t, err)
	require.NoError(t, await(t, wrote, "Write"))

	const size = 100
	_, err = b.Write(make([]byte, size))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		n, err := ur.Unread()
		return err == nil && n > size
	}, watchdog, time.Millisecond, "a record of %d bytes, unread", size)
	n, err := us.Unsent()
	require.NoError(t, err)
	assert.Equal(t, 0, n, "sent")
	_, err = io.ReadFull(a, make([]byte, size))
	require.NoError(t, err)
	n, err = ur.Unread()
	require.NoError(t, err)
	assert.Equal(t, 0, n, "all read")
}
