//go:build linux

package star_test

import (
	"context"
	"fmt"
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

// slowUploadConn is a worker's TCP connection over a thin uplink: large
// writes go out 16 KiB at a time, 50 ms apart (320 KiB/s).
type slowUploadConn struct{ *tcp.Conn }

const (
	uploadPiece = 16 << 10
	uploadGap   = 50 * time.Millisecond
)

func (c slowUploadConn) Write(p []byte) (int, error) {
	if len(p) <= uploadPiece {
		return c.Conn.Write(p)
	}
	n := 0
	for n < len(p) {
		k, err := c.Conn.Write(p[n:min(len(p), n+uploadPiece)])
		n += k
		if err != nil {
			return n, err
		}
		time.Sleep(uploadGap)
	}
	return n, nil
}

func (c slowUploadConn) WriteBuffers(bufs [][]byte) (int64, error) {
	var n int64
	for _, b := range bufs {
		k, err := c.Write(b)
		n += int64(k)
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// slowUploadDialer wraps the worker's connections in slowUploadConn.
type slowUploadDialer struct{ transport.Dialer }

func (d slowUploadDialer) Dial(ctx context.Context, addr string) (transport.Conn, error) {
	c, err := d.Dialer.Dial(ctx, addr)
	if tc, ok := c.(*tcp.Conn); ok && err == nil {
		return slowUploadConn{tc}, nil
	}
	return c, err
}

// TestSlowUploadWhileRelayedTCP is TestSlowUploadWhileRelayed over real
// TCP (Linux: TCP_INFO), with socket buffers of 64 KiB (as a host whose net.core.wmem_max
// and rmem_max are the common 208 KiB caps the 4 MiB starcomm asks for):
// in a relayed allgatherv of 1 MiB per rank, rank 1 uploads its region at
// 320 KiB/s (3.2 s, the timeout 1 s), and reads rank 0's reply only once
// it is out. Rank 0's relay writer meanwhile sends it rank 0's region and
// rank 2's, and blocks, rank 1's window closed: at its deadline the link
// still moves the other way (rank 1's data arrives), and the write goes on
// (link.slowWrite). Every rank completes, its result checked. Before,
// slowWrite looked only at acknowledgments with the window open, and rank
// 0 named rank 1 at the first deadline. On 4 network namespaces with the
// system's caps at 208 KiB (rank 1 at 2 Mbit/s, T = 2 s) the build before
// failed 4 of 5 runs so.
func TestSlowUploadWhileRelayedTCP(t *testing.T) {
	t.Cleanup(star.SetRelayOnHost()) // its workers are on this host
	testkit.CheckGoroutines(t)
	const size, per, timeout = 3, 1 << 20, time.Second
	var relays, slowed atomic.Int64
	sessions := make(chan int, 1024)
	t.Cleanup(star.SetTestHook(func(rank int, point string) {
		switch {
		case rank == 0 && point == star.HookRelay:
			relays.Add(1)
		case rank == 1 && point == star.HookSlowWrite: // rank: the link's peer
			slowed.Add(1)
		case rank > 0 && point == star.HookHeartbeat:
			select {
			case sessions <- rank:
			default:
			}
		}
	}))
	net := testkit.NewTCPNetwork()
	net.Config.BufferSize = 64 << 10
	comms, err := testkit.StartStar(context.Background(), net, size, func(c *star.Config) {
		c.Timeout = timeout
		if c.Rank == 1 {
			c.Dialer = slowUploadDialer{c.Dialer}
		}
	})
	require.NoError(t, err)
	t.Cleanup(func() { testkit.CloseAll(comms) })
	awaitSessions(t, sessions, size-1) // rank 0 relays only once they are up

	begin := time.Now()
	errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
		counts, displs := []int{per, per, per}, []int{0, per, 2 * per}
		send := make([]uint8, per)
		for i := range send {
			send[i] = uint8(c.Rank()*7 + i)
		}
		recv := make([]uint8, size*per)
		if err := comm.Allgatherv(context.Background(), c, send, recv, counts, displs); err != nil {
			return err
		}
		for r := range size {
			for i := range per {
				if recv[r*per+i] != uint8(r*7+i) {
					return fmt.Errorf("recv[%d] = %d, want %d", r*per+i, recv[r*per+i], uint8(r*7+i))
				}
			}
		}
		return nil
	})
	took := time.Since(begin)
	for r, err := range errs {
		assert.NoError(t, err, "rank %d", r)
	}
	assert.GreaterOrEqual(t, took, 3*timeout, "rank 1's upload took longer than the timeout")
	assert.Equal(t, int64(1), relays.Load(), "the allgatherv was relayed")
	assert.Positive(t, slowed.Load(), "rank 0's write to rank 1 went on past its deadline")
}
