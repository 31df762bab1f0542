package star

import (
	"context"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm/transport"
	"github.com/starcomm/starcomm/transport/tcp"
)

// tcpLinkPair returns a link over real TCP and the raw connection of its
// peer; both are closed when the test ends.
func tcpLinkPair(t *testing.T, timeout time.Duration) (*link, transport.Conn) {
	t.Helper()
	cfg := tcp.DefaultConfig()
	cfg.BindAddr = "127.0.0.1"
	ln, err := tcp.Listen(cfg, 0)
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan transport.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			c = nil
		}
		accepted <- c
	}()
	peer, err := tcp.NewDialer(cfg).Dial(context.Background(), net.JoinHostPort("127.0.0.1", strconv.Itoa(ln.Port())))
	require.NoError(t, err)
	conn := <-accepted
	require.NotNil(t, conn, "accept")
	t.Cleanup(func() { _ = conn.Close(); _ = peer.Close() })
	return newLink(1, conn, timeout), peer
}

// awayConn is a TCP conn whose rank goes away once (is stopped, paused or
// starved) for away: in its first Read, before the read (a read parked
// when the process stopped), or in its first Yield (a polling rank that
// stopped between two rounds), or in its first Write (a write parked when
// the process stopped). during runs as it goes away: what the peer
// does meanwhile; back as it comes back.
type awayConn struct {
	*tcp.Conn
	away         time.Duration
	during, back func()
	gone         bool
}

func (c *awayConn) goAway() {
	if !c.gone {
		c.gone = true
		if c.during != nil {
			c.during()
		}
		time.Sleep(c.away) // the scenario: this rank is not running
		if c.back != nil {
			c.back()
		}
	}
}

func (c *awayConn) Read(p []byte) (int, error)  { c.goAway(); return c.Conn.Read(p) }
func (c *awayConn) Write(p []byte) (int, error) { c.goAway(); return c.Conn.Write(p) }
func (c *awayConn) Yield()                      { c.goAway(); c.Conn.Yield() }

// TestLateReaderReadsOn: a rank whose read deadline passed while it was
// away (stopped, paused, starved) for twice the timeout, waiting for a
// frame that came meanwhile, finds the frame in its socket: it reads it,
// parked (finishRead) or polled (pollLinks), instead of failing the peer
// for a silence that was its own. With nothing waiting, the same lateness
// is the peer's timeout, reported at once. Before, both failed the peer.
func TestLateReaderReadsOn(t *testing.T) {
	const timeout = 100 * time.Millisecond
	away := 2*timeout + lateMin(timeout) // past the deadline by more than lateMin
	for _, how := range []string{"parked", "polled"} {
		for _, sends := range []bool{true, false} {
			name := how + "/frame-comes"
			if !sends {
				name = how + "/nothing-comes"
			}
			t.Run(name, func(t *testing.T) {
				l, peer := tcpLinkPair(t, timeout)
				ac := &awayConn{Conn: l.conn.(*tcp.Conn), away: away}
				if sends {
					ac.during = func() {
						_, err := peer.Write(append(lateHeader(4, TagBroadcast), 7, 8, 9))
						assert.NoError(t, err)
					}
				}
				l = newLink(1, ac, timeout)
				start := time.Now()
				part, err := readBroadcast(l, how)
				require.True(t, ac.gone, "the rank went away")
				if !sends {
					require.ErrorIs(t, err, os.ErrDeadlineExceeded, "the peer sent nothing: its timeout")
					assert.Less(t, time.Since(start), away+timeout/2, "reported as the rank came back: the deadline had passed")
					return
				}
				require.NoError(t, err)
				assert.Equal(t, []byte{7, 8, 9}, part)
			})
		}
	}
}

// readBroadcast reads a Broadcast frame of 3 bytes on l, parked
// (finishRead) or, for how "polled", polled first (pollLinks).
func readBroadcast(l *link, how string) ([]byte, error) {
	part := make([]byte, 3)
	l.beginRead(TagBroadcast, [][]byte{part})
	if how == "parked" {
		return part, l.finishRead()
	}
	done, _, err := pollLinks(time.Second, time.Second, l)
	if err == nil && done == 0 {
		err = l.finishRead()
	}
	return part, err
}

// lateHeader is the header of a frame of tag whose LEN is n (a payload of
// n-1 bytes).
func lateHeader(n uint32, tag byte) []byte {
	var h [HeaderSize]byte
	PutHeader(h[:], tag, int(n)-1)
	return h[:]
}

// TestLateWriterWritesOn: a rank whose write deadline passed while it was
// away, its peer having taken everything before, writes on under a fresh
// deadline: the peer gets the whole frame. Before, the write failed the
// peer ("raw-write ... i/o timeout"), seen once in 15 runs of
// TestRealCoordinatorStoppedWorkersExit.
func TestLateWriterWritesOn(t *testing.T) {
	const timeout = 100 * time.Millisecond
	l, peer := tcpLinkPair(t, timeout)
	ac := &awayConn{Conn: l.conn.(*tcp.Conn), away: 2*timeout + lateMin(timeout)}
	l = newLink(1, ac, timeout)
	frame := append(lateHeader(4, TagBroadcast), 7, 8, 9)
	require.NoError(t, l.writeArmed(frame))
	require.True(t, ac.gone, "the rank went away")
	got := make([]byte, len(frame))
	_, err := io.ReadFull(peer, got)
	require.NoError(t, err)
	assert.Equal(t, frame, got)
}

// awayDetector returns a communicator whose away detector (see
// Comm.watchAway) has ticked once, every tenth of a 200 ms liveness
// timeout, and a function for an awayConn's back: the detector's first
// tick after the absence, after which it ticks on until the test ends.
func awayDetector(t *testing.T, timeout time.Duration) (*Comm, func()) {
	c := &Comm{cfg: Config{Liveness: 200 * time.Millisecond, Timeout: timeout}, epoch: time.Now(), closeDone: make(chan struct{})}
	t.Cleanup(func() { close(c.closeDone) })
	c.ticked(time.Now())
	return c, func() { c.ticked(time.Now()); c.watchAway() }
}

// TestAbsentReaderGivesAFreshTimeout: a rank whose read deadline passed
// in the middle of an absence that its away detector saw (longer than
// half the timeout), with nothing from the peer waiting, gives the peer a
// whole timeout from its return, as when every rank's VM was paused
// together and the peer has not run since either: a frame that comes
// then is read, parked or polled; a peer that sends nothing even then is
// failed one timeout after the rank came back. Before, the rank failed
// the peer as it came back.
func TestAbsentReaderGivesAFreshTimeout(t *testing.T) {
	const timeout = 100 * time.Millisecond
	away := 2*timeout + lateMin(timeout)
	for _, how := range []string{"parked", "polled"} {
		for _, sends := range []bool{true, false} {
			name := how + "/frame-comes-after"
			if !sends {
				name = how + "/nothing-comes"
			}
			t.Run(name, func(t *testing.T) {
				l, peer := tcpLinkPair(t, timeout)
				c, back := awayDetector(t, timeout)
				ac := &awayConn{Conn: l.conn.(*tcp.Conn), away: away, back: back}
				l = newLink(1, ac, timeout)
				l.owner = c
				spared := 0
				restore := SetTestHook(func(rank int, point string) {
					if point != hookAbsent {
						return
					}
					assert.Equal(t, 1, rank, "the peer's rank")
					spared++
					if sends {
						_, err := peer.Write(append(lateHeader(4, TagBroadcast), 7, 8, 9))
						assert.NoError(t, err)
					}
				})
				defer restore()
				start := time.Now()
				part, err := readBroadcast(l, how)
				require.True(t, ac.gone, "the rank went away")
				assert.Equal(t, 1, spared, "one fresh timeout")
				if !sends {
					require.ErrorIs(t, err, os.ErrDeadlineExceeded, "the peer sent nothing in a whole timeout after the rank's return")
					assert.GreaterOrEqual(t, time.Since(start), away+timeout, "a whole timeout from the rank's return")
					return
				}
				require.NoError(t, err)
				assert.Equal(t, []byte{7, 8, 9}, part)
			})
		}
	}
}

// TestAbsentWriterGivesAFreshTimeout: the same for a write that the peer
// took nothing of while this rank was away across the deadline (the
// peer's receive buffer full): once the peer reads again, after the
// rank's return, the write completes. Before, the write failed the peer.
func TestAbsentWriterGivesAFreshTimeout(t *testing.T) {
	const timeout = 100 * time.Millisecond
	l, peer := tcpLinkPair(t, timeout)
	// Fill the socket's buffers, so that the next write waits for the peer.
	tc := l.conn.(*tcp.Conn)
	require.NoError(t, tc.SetWriteDeadline(time.Now().Add(50*time.Millisecond)))
	var filled int
	chunk := make([]byte, 64<<10)
	for {
		n, err := tc.Write(chunk)
		filled += n
		if err != nil {
			require.ErrorIs(t, err, os.ErrDeadlineExceeded)
			break
		}
	}
	require.NoError(t, tc.SetWriteDeadline(time.Time{}))
	c, back := awayDetector(t, timeout)
	ac := &awayConn{Conn: tc, away: 2*timeout + lateMin(timeout), back: back}
	l = newLink(1, ac, timeout)
	l.owner = c
	drained := make(chan error, 1)
	var drain sync.Once
	peerReads := func() {
		drain.Do(func() {
			go func() { // the peer runs again and reads everything
				_, err := io.CopyN(io.Discard, peer, int64(filled))
				drained <- err
			}()
		})
	}
	restore := SetTestHook(func(rank int, point string) {
		// The write goes on: this rank was away (hookAbsent), or, on a
		// loaded host where the away detector did not see it so, the
		// peer's host still takes bytes (its receive queue, collapsed,
		// opens its window a little at a time: hookSlowWrite, true).
		if point == hookAbsent || point == hookSlowWrite {
			peerReads()
		}
	})
	defer restore()
	frame := append(lateHeader(4, TagBroadcast), 7, 8, 9)
	require.NoError(t, l.writeArmed(frame))
	peerReads() // the window may also have taken the frame at once
	require.True(t, ac.gone, "the rank went away")
	require.NoError(t, <-drained)
	got := make([]byte, len(frame))
	_, err := io.ReadFull(peer, got)
	require.NoError(t, err)
	assert.Equal(t, frame, got)
}

// TestAbsentGrantOncePerCollective: a process that is away across every
// deadline of a collective (its detector never ticks again: stopped over
// and over) gives a silent peer one fresh timeout, not one per deadline:
// the peer is failed at the second timeout. (Without the bound, the read
// waited forever.)
func TestAbsentGrantOncePerCollective(t *testing.T) {
	const timeout = 100 * time.Millisecond
	l, _ := tcpLinkPair(t, timeout)
	c := &Comm{cfg: Config{Liveness: 200 * time.Millisecond, Timeout: timeout}, epoch: time.Now()}
	c.ticked(time.Now()) // and never again
	away := 2*timeout + lateMin(timeout)
	ac := &awayConn{Conn: l.conn.(*tcp.Conn), away: away}
	l = newLink(1, ac, timeout)
	l.owner = c
	spared := 0
	defer SetTestHook(func(_ int, point string) {
		if point == hookAbsent {
			spared++
		}
	})()
	part := make([]byte, 3)
	l.beginRead(TagBroadcast, [][]byte{part})
	start := time.Now()
	err := l.finishRead()
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	assert.Equal(t, 1, spared, "one fresh timeout in the collective")
	assert.Less(t, time.Since(start), away+10*timeout, "failed at the second timeout, not waiting on")
}
