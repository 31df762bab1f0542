package mtls

import (
	"context"
	"errors"
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm/transport"
)

// TestQueues: over TLS over TCP, Unread counts the record bytes of the
// peer's writes that no Read has returned, one record (one write) after
// another, and nothing once all are read, whatever crypto/tls would have
// read ahead; Unsent is 0 once the system has sent what was written.
func TestQueues(t *testing.T) {
	a, b := tlsTCPPair(t)
	var err error

	ur, ok := a.(transport.UnreadCounter)
	require.True(t, ok, "%T implements transport.UnreadCounter", a)
	us, ok := b.(transport.UnsentCounter)
	require.True(t, ok, "%T implements transport.UnsentCounter", b)

	// One byte first, so that the handshake is over on both ends.
	wrote := async(func() error { _, err := b.Write([]byte{1}); return err })
	_, err = io.ReadFull(a, make([]byte, 1))
	require.NoError(t, err)
	require.NoError(t, await(t, wrote, "Write"))

	const size, writes = 100, 3
	for range writes {
		_, err = b.Write(make([]byte, size))
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		n, err := us.Unsent()
		return err == nil && n == 0
	}, watchdog, time.Millisecond, "%d records of %d bytes, sent", writes, size)
	var last int
	require.Eventually(t, func() bool {
		n, err := ur.Unread()
		last = n
		return err == nil && n > writes*size
	}, watchdog, time.Millisecond, "%d records of %d bytes, unread", writes, size)
	// A read deadline that has passed (a link idle since its last read)
	// does not stop the count: it says nothing about what waits.
	require.NoError(t, a.SetReadDeadline(time.Now().Add(-time.Second)))
	n, err := ur.Unread()
	require.NoError(t, err, "read deadline passed")
	require.Equal(t, last, n, "read deadline passed")
	require.NoError(t, a.SetReadDeadline(time.Time{}))
	for i := range writes {
		_, err = io.ReadFull(a, make([]byte, size))
		require.NoError(t, err)
		n, err := ur.Unread()
		require.NoError(t, err)
		if i < writes-1 {
			require.Greater(t, n, (writes-i-2)*size, "after %d of %d records (was %d)", i+1, writes, last)
			require.Less(t, n, last, "after %d of %d records", i+1, writes)
		} else {
			require.Equal(t, 0, n, "all read")
		}
		last = n
	}
}

// TestAcks: over TLS over TCP, Acks is the TCP connection's: once the
// peer has read a record, this end sent data and the peer's host
// acknowledged it moments ago, its window open. Over a pipe, which cannot
// tell, it fails with errors.ErrUnsupported.
func TestAcks(t *testing.T) {
	a, b := tlsTCPPair(t)
	var err error

	wrote := async(func() error { _, err := a.Write([]byte{1}); return err })
	_, err = io.ReadFull(b, make([]byte, 1))
	require.NoError(t, err)
	require.NoError(t, await(t, wrote, "Write"))
	ar, ok := a.(transport.AckReporter)
	require.True(t, ok, "%T implements transport.AckReporter", a)
	ack, err := ar.Acks()
	if errors.Is(err, errors.ErrUnsupported) {
		t.Skipf("this system cannot tell (TCP_INFO's tcpi_snd_wnd is read on Linux 6.2 and later, %s here): %v", runtime.GOOS, err)
	}
	require.NoError(t, err)
	require.True(t, ack.Open, "%+v", ack)
	require.Less(t, ack.SinceSent, time.Second, "%+v", ack)
	require.Less(t, ack.SinceAcked, time.Second, "%+v", ack)

	_, err = (&Conn{inner: nil}).Acks()
	require.True(t, errors.Is(err, errors.ErrUnsupported), "an inner conn that cannot tell: %v", err)
}

// tlsTCPPair returns the two ends of a TLS connection over TCP, closed
// when the test ends.
func tlsTCPPair(t *testing.T) (dialed, accepted transport.Conn) {
	t.Helper()
	p := testPKI(t)
	l := tcpListen(t, p.config(t, p.server))
	type acceptedConn struct {
		c   transport.Conn
		err error
	}
	acc := async(func() acceptedConn { c, err := l.Accept(); return acceptedConn{c, err} })
	ctx, cancel := context.WithTimeout(context.Background(), watchdog)
	defer cancel()
	a, err := tcpDialer(p.config(t, p.client)).Dial(ctx, l.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Close() })
	res := await(t, acc, "Accept")
	require.NoError(t, res.err)
	t.Cleanup(func() { _ = res.c.Close() })
	return a, res.c
}
