package mtls

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm/transport"
)

// TestQueues: over TLS over TCP, Unsent is 0 once the system has sent
// what was written; a Conn does not claim to count unread bytes (crypto/tls
// reads ahead into buffers of its own).
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

	_, ok := a.(transport.UnreadCounter)
	require.False(t, ok, "%T implements transport.UnreadCounter", a)
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
		n, err := us.Unsent()
		return err == nil && n == 0
	}, watchdog, time.Millisecond, "a record of %d bytes, sent", size)
	_, err = io.ReadFull(a, make([]byte, size))
	require.NoError(t, err)
}
