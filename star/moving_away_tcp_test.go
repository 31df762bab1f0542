package star

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm/transport/tcp"
)

// awayNthConn is a TCP conn whose rank goes away (stopped, starved) once,
// in its nth Read, after the read was armed: during runs as it goes away.
type awayNthConn struct {
	*tcp.Conn
	nth    int
	away   time.Duration
	during func()
	reads  atomic.Int64
}

func (c *awayNthConn) Read(p []byte) (int, error) {
	if int(c.reads.Add(1)) == c.nth {
		if c.during != nil {
			c.during()
		}
		time.Sleep(c.away)
	}
	return c.Conn.Read(p)
}

// TestMovingThenAway: over real TCP, a rank waits for a 3-byte frame
// while its own earlier bytes still go out to the peer, which
// acknowledges them (the situation link.moving was made for): at the
// first deadline, moving sets rfix. The rank then goes away (stopped,
// starved) across rfix, and the peer's frame arrives meanwhile: what
// lateAt handles (see TestLateReaderReadsOn), and the frame is read.
// Before lateAt cleared rfix with rdl, every arm set the passed rfix
// again, every Read failed at once, and lateAt (bytes unread, the
// deadline long past) said "read on" again: the read spun forever (3.8
// million Reads in 5 s), without reading the frame or failing.
func TestMovingThenAway(t *testing.T) {
	const timeout = 200 * time.Millisecond
	l, peer := tcpLinkPair(t, timeout)
	if _, err := l.conn.(*tcp.Conn).Acks(); errors.Is(err, errors.ErrUnsupported) {
		t.Skip("no tcp.Conn.Acks here:", err)
	}
	// The peer reads everything this end sends (its window stays open).
	go func() {
		buf := make([]byte, 4096)
		for {
			if _, err := peer.Read(buf); err != nil {
				return
			}
		}
	}()
	raw := l.conn.(*tcp.Conn)
	stop := make(chan struct{})
	defer close(stop)
	go trickle(raw, stop) // this end's earlier data still going out
	ac := &awayNthConn{Conn: raw, nth: 2, away: timeout + deadlineSlack(timeout) + 50*time.Millisecond}
	ac.during = func() {
		_, err := peer.Write(append(lateHeader(4, TagBroadcast), 7, 8, 9))
		assert.NoError(t, err)
	}
	l = newLink(1, ac, timeout)
	var moved atomic.Int64
	defer SetTestHook(func(_ int, point string) {
		if point == hookMoving {
			moved.Add(1)
		}
	})()
	part := make([]byte, 3)
	l.beginRead(TagBroadcast, [][]byte{part})
	done := make(chan error, 1)
	go func() { done <- l.finishRead() }()
	select {
	case err := <-done:
		require.NoError(t, err)
		assert.Equal(t, []byte{7, 8, 9}, part)
	case <-time.After(5 * time.Second):
		reads := ac.reads.Load()
		l.cancel(errors.New("test: given up"))
		<-done
		t.Fatalf("the read neither completed nor failed in 5 s (25 timeouts): %d Read calls, moving fired %d times; the frame waits unread", reads, moved.Load())
	}
	assert.Positive(t, moved.Load(), "moving set rfix before the absence")
}

// trickle writes a byte to c every 20 ms until stop is closed or a write
// fails: data of this end that still goes out, which the peer's host
// acknowledges (what link.moving counts as the link moving).
func trickle(c *tcp.Conn, stop <-chan struct{}) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
			if _, err := c.Write([]byte{0}); err != nil {
				return
			}
		}
	}
}
