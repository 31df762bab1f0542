package star_test

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm/star"
	"github.com/starcomm/starcomm/testkit"
	"github.com/starcomm/starcomm/transport"
)

// keptDialer dials with d and keeps every connection it made.
type keptDialer struct {
	d     transport.Dialer
	mu    sync.Mutex
	conns []transport.Conn
}

func (k *keptDialer) Dial(ctx context.Context, addr string) (transport.Conn, error) {
	conn, err := k.d.Dial(ctx, addr)
	if err == nil {
		k.mu.Lock()
		k.conns = append(k.conns, conn)
		k.mu.Unlock()
	}
	return conn, err
}

// TestSessionTimeoutIsLost: a control connection whose reads fail with a
// timeout of the connection itself (as a socket's do with ETIMEDOUT once
// the system gave up on it; here a deadline in the past) ends the session:
// the worker's heartbeat reader stops, and at the liveness timeout rank 0
// is declared unresponsive with the lost connection as the reason. (The
// reader used to take that error for its own deadline, returned at once by
// every read, and spun on it: 23,000 to 37,000 turns in 500 ms, until
// the liveness timeout, and then named no lost connection.)
func TestSessionTimeoutIsLost(t *testing.T) {
	testkit.CheckGoroutines(t)
	nw := testkit.NewPipeNetwork()
	kept := &keptDialer{d: nw.Dialer()}
	attached := make(chan struct{})
	var once sync.Once
	var cut atomic.Bool
	var turns atomic.Int64 // the worker's heartbeat reader's turns after the cut
	restore := star.SetTestHook(func(rank int, point string) {
		// The worker's heartbeat reader (its peer is rank 0) runs once
		// the worker's session is up. Cutting as soon as rank 0 attached
		// the session could land while the worker was still opening its
		// second stream, which then fails on the read error: the worker
		// goes on without a session and closes it, and rank 0 takes that
		// for its process's end (seen 1 in about 120 runs under load).
		switch {
		case point == star.HookHeartbeat && rank == 0 && cut.Load():
			turns.Add(1)
		case point == star.HookHeartbeat && rank == 0:
			once.Do(func() { close(attached) })
		}
	})
	defer restore()
	comms, err := testkit.StartStar(context.Background(), nw, 2, func(c *star.Config) {
		c.Timeout, c.Liveness = 5*time.Second, time.Second
		if c.Rank == 1 {
			c.Dialer = kept
		}
	})
	require.NoError(t, err)
	defer testkit.CloseAll(comms)
	<-attached
	kept.mu.Lock()
	require.Len(t, kept.conns, 2, "the worker's data link and control connection")
	ctl := kept.conns[1]
	kept.mu.Unlock()
	cut.Store(true)
	require.NoError(t, ctl.SetReadDeadline(time.Unix(1, 0)))

	w := comms[1].(*star.Comm)
	until := time.Now().Add(10 * time.Second)
	for star.Pending(w) == nil && time.Now().Before(until) {
		time.Sleep(5 * time.Millisecond)
	}
	pending := star.Pending(w)
	var ur *star.UnresponsiveError
	require.ErrorAs(t, pending, &ur, "the worker's verdict on rank 0")
	assert.Equal(t, 0, ur.Rank)
	assert.ErrorIs(t, ur.Lost, os.ErrDeadlineExceeded, "the reason names the lost connection")
	assert.LessOrEqual(t, turns.Load(), int64(3), "the heartbeat reader's turns after its connection failed")
}
