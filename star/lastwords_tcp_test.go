package star_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/star"
	"github.com/starcomm/starcomm/testkit"
	"github.com/starcomm/starcomm/transport"
	"github.com/starcomm/starcomm/transport/tcp"
)

// liarHolds stages TestRelayLastWordsAfterRead on rank 0's connections to
// the liar (found by the liar's local addresses, which its dialer records).
type liarHolds struct {
	t         *testing.T
	mu        sync.Mutex
	liarAddrs map[string]bool
	liarConns []*tcp.Conn
	armed     atomic.Bool
	readHeld  atomic.Bool
	bigWrites atomic.Int64
	writeHeld atomic.Bool
	release   chan struct{} // closed: rank 0's reader of the liar's link goes on
	exited    chan struct{} // closed: the liar's connections are closed
}

func (h *liarHolds) isLiar(c *tcp.Conn) bool {
	if !h.armed.Load() {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.liarAddrs[c.RemoteAddr().String()]
}

// await waits for ch, or fails the test after a watchdog (the hold is then
// lifted, so that a wrong program ends instead of hanging).
func (h *liarHolds) await(ch <-chan struct{}, what string) {
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		h.t.Errorf("watchdog: %s did not come within 10 s", what)
	}
}

// heldConn is rank 0's end of a connection.
type heldConn struct {
	*tcp.Conn
	h *liarHolds
}

// Read holds the relay's reader of the liar's region after its first read
// (it is then in the middle of the region) until release.
func (c *heldConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if len(p) >= 64<<10 && c.h.isLiar(c.Conn) && !c.h.readHeld.Swap(true) {
		c.h.await(c.h.release, "the release of rank 0's reader (hook point words)")
	}
	return n, err
}

// holdWrite holds the second large write to the liar (the first piece of
// rank 1's region; the first was rank 0's region, after the spliced header
// that the liar refuses) until the liar's connections are closed.
func (c *heldConn) holdWrite(n int) {
	if n >= 64<<10 && c.h.isLiar(c.Conn) && c.h.bigWrites.Add(1) == 2 {
		c.h.writeHeld.Store(true)
		c.h.await(c.h.exited, "the liar's exit")
	}
}

func (c *heldConn) Write(p []byte) (int, error) {
	c.holdWrite(len(p))
	return c.Conn.Write(p)
}

func (c *heldConn) WriteBuffers(bufs [][]byte) (int64, error) {
	n := 0
	for _, b := range bufs {
		n += len(b)
	}
	c.holdWrite(n)
	return c.Conn.WriteBuffers(bufs)
}

// recordingDialer records the liar's connections.
type recordingDialer struct {
	transport.Dialer
	h *liarHolds
}

func (d recordingDialer) Dial(ctx context.Context, addr string) (transport.Conn, error) {
	c, err := d.Dialer.Dial(ctx, addr)
	if tc, ok := c.(*tcp.Conn); ok && err == nil {
		d.h.mu.Lock()
		d.h.liarAddrs[tc.LocalAddr().String()] = true
		d.h.liarConns = append(d.h.liarConns, tc)
		d.h.mu.Unlock()
	}
	return c, err
}

// TestRelayLastWordsAfterRead: in a relayed allgatherv (2 MiB per rank, 3
// ranks), rank 2 expects a longer result than rank 0 sends (it counts 8
// bytes more for rank 1), refuses the reply from its header, sends its
// Abort and "exits" (its connections closed with the reply unread, which
// resets them) while rank 0's reader of rank 2's link is still in the
// middle of rank 2's region and rank 0's writer to rank 2 is still
// writing. The writer's write fails (the peer is gone); it waits for the
// reader to end (hook point words), then reads rank 2's last words: rank 0
// reports rank 2's reason, naming rank 0 as rank 2 did, and so does rank 1
// if it fails at all (its whole result may have gone out first). Before,
// the writer left the read side to the reader and rank 0 reported a broken
// pipe (and so did rank 1, through rank 0's Abort).
func TestRelayLastWordsAfterRead(t *testing.T) {
	t.Cleanup(star.SetRelayOnHost()) // its workers are on this host
	testkit.CheckGoroutines(t)
	const size, liar, per = 3, 2, 2 << 20
	h := &liarHolds{t: t, liarAddrs: map[string]bool{}, release: make(chan struct{}), exited: make(chan struct{})}
	var words, relays atomic.Int64
	var releaseOnce sync.Once
	sessions := make(chan int, 1024) // rank 0's control session with each worker, up
	// The hook goes after the communicators (cleanups run last first).
	t.Cleanup(star.SetTestHook(func(rank int, point string) {
		switch {
		case rank == 0 && point == star.HookWords:
			words.Add(1)
			releaseOnce.Do(func() { close(h.release) })
		case rank == 0 && point == star.HookRelay:
			relays.Add(1)
		case rank > 0 && point == star.HookHeartbeat:
			select { // a worker's rank: rank 0's session with it reads
			case sessions <- rank:
			default:
			}
		}
	}))
	net := acceptWrapping{TCPNetwork: testkit.NewTCPNetwork(), wrap: func(tc *tcp.Conn) transport.Conn {
		return &heldConn{Conn: tc, h: h}
	}}
	comms, err := testkit.StartStar(context.Background(), net, size, func(c *star.Config) {
		c.Timeout = 10 * time.Second
		if c.Rank == liar {
			c.Dialer = recordingDialer{Dialer: c.Dialer, h: h}
		}
	})
	require.NoError(t, err)
	t.Cleanup(func() { testkit.CloseAll(comms) })

	awaitSessions(t, sessions, size-1) // rank 0 relays only once they are up
	h.armed.Store(true)
	errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
		counts, displs := []int{per, per, per}, []int{0, per, 2 * per}
		if c.Rank() == liar {
			counts[1] += 8
			displs[2] += 8
		}
		r := c.Rank()
		err := comm.Allgatherv(context.Background(), c, make([]uint8, counts[r]), make([]uint8, displs[2]+counts[2]), counts, displs)
		if r == liar {
			// The process exits the instant it fails: its connections
			// close with rank 0's reply unread.
			h.mu.Lock()
			for _, tc := range h.liarConns {
				_ = tc.Close()
			}
			h.mu.Unlock()
			close(h.exited)
		}
		return err
	})
	require.True(t, h.readHeld.Load(), "rank 0's reader of rank 2's region was held")
	require.True(t, h.writeHeld.Load(), "rank 0's writer to rank 2 was held")
	assert.Equal(t, int64(1), relays.Load(), "the allgatherv was relayed")
	assert.Equal(t, int64(1), words.Load(), "rank 0's writer to rank 2 waited for the reader once")

	var ibs *comm.InvalidBufferSizeError
	require.ErrorAs(t, errs[liar], &ibs)
	const reason = "AllgathervRecv frame from rank 0"
	assert.Contains(t, ibs.Error(), reason)
	for r := 0; r < liar; r++ {
		if r == 1 && errs[r] == nil {
			continue // its whole result went out before rank 0 failed (a writer's failure is its worker's alone)
		}
		var cf *comm.CollectiveFailedError
		require.ErrorAs(t, errs[r], &cf, "rank %d", r)
		assert.Equal(t, 0, cf.Rank, "rank %d names rank 0, as rank 2 did: %v", r, errs[r])
		assert.Contains(t, errs[r].Error(), reason, "rank %d reports rank 2's reason", r)
		assert.NotContains(t, errs[r].Error(), "broken pipe", "rank %d", r)
		var ab *star.AbortError
		require.ErrorAs(t, errs[r], &ab, "rank %d: the error comes from an Abort", r)
	}
}
