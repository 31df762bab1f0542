package tcp

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestUnsent: none on a fresh connection; while the peer reads nothing,
// the bytes a writer blocked on a full socket has handed over are counted
// as unsent; once the peer has read everything, none are; after Close,
// Unsent fails with net.ErrClosed.
func TestUnsent(t *testing.T) {
	a, b := pair(t, testConfig())
	n, err := a.Unsent()
	require.NoError(t, err)
	assert.Equal(t, 0, n, "a fresh connection")

	const total = 16 << 20
	wrote := async(func() error {
		_, err := a.Write(make([]byte, total))
		return err
	})
	require.Eventually(t, func() bool {
		n, err := a.Unsent()
		return err == nil && n > 0
	}, watchdog, time.Millisecond, "bytes written to a peer that does not read are unsent")

	got := async(func() int64 {
		n, _ := io.Copy(io.Discard, io.LimitReader(b, total))
		return n
	})
	require.NoError(t, await(t, wrote, "Write"))
	require.Equal(t, int64(total), await(t, got, "the peer's reads"))
	require.Eventually(t, func() bool {
		n, err := a.Unsent()
		return err == nil && n == 0
	}, watchdog, time.Millisecond, "everything the peer read was sent")

	require.NoError(t, a.Close())
	_, err = a.Unsent()
	assert.True(t, errors.Is(err, net.ErrClosed), "after Close: %v", err)
}

// TestUnread: none on a fresh connection; the bytes the peer wrote count
// until they are read; bytes sent before the peer closed still count
// after its close, and are read before io.EOF; after Close, Unread fails
// with net.ErrClosed.
func TestUnread(t *testing.T) {
	a, b := pair(t, testConfig())
	n, err := a.Unread()
	require.NoError(t, err)
	assert.Equal(t, 0, n, "a fresh connection")

	_, err = b.Write(make([]byte, 1000))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		n, err := a.Unread()
		return err == nil && n == 1000
	}, watchdog, time.Millisecond, "the peer's 1000 bytes, unread")
	_, err = io.ReadFull(a, make([]byte, 600))
	require.NoError(t, err)
	n, err = a.Unread()
	require.NoError(t, err)
	assert.Equal(t, 400, n, "after reading 600 of them")

	require.NoError(t, b.Close())
	n, err = a.Unread()
	require.NoError(t, err)
	assert.Equal(t, 400, n, "after the peer closed")
	rest, err := io.ReadAll(a)
	require.NoError(t, err)
	assert.Len(t, rest, 400, "read before io.EOF")

	require.NoError(t, a.Close())
	_, err = a.Unread()
	assert.True(t, errors.Is(err, net.ErrClosed), "after Close: %v", err)
}
