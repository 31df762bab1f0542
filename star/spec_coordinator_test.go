package star_test

import (
	"context"
	"encoding/binary"
	"errors"
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
	"github.com/starcomm/starcomm/transport/pipe"
)

// countingDialer counts the connections a worker asks for and tells each
// new count on dialed.
type countingDialer struct {
	transport.Dialer
	n      atomic.Int32
	dialed chan int32
}

func (d *countingDialer) Dial(ctx context.Context, addr string) (transport.Conn, error) {
	d.dialed <- d.n.Add(1)
	return d.Dialer.Dial(ctx, addr)
}

// TestSpecCoordinator: starcomm workers under a coordinator that knows
// only the spec. It accepts exactly R-1 connections, each taken for a
// worker's, and acknowledges each Handshake at once, while later workers
// have not joined. Each accepted connection must be a worker's Handshake:
// a worker that opened its control session right after its Ack would give
// the coordinator a Control frame in a worker's place, which fails such a
// coordinator's start-up (0x0C is not a Handshake). The workers open it
// after the coordinator's first frame (the first barrier's BarrierGo),
// when it holds every worker's connection: it is never accepted, and the
// workers go on without it, through a second barrier and the Shutdown.
func TestSpecCoordinator(t *testing.T) {
	testkit.CheckGoroutines(t)
	const size = 4
	nw := pipe.NewNetwork()
	ln, err := nw.Listen("coord")
	require.NoError(t, err)
	defer ln.Close()

	dialers := make([]*countingDialer, size)
	comms := make([]comm.Communicator, size)
	conns := make([]transport.Conn, size) // the coordinator's, by rank
	for r := 1; r < size; r++ {
		dialers[r] = &countingDialer{Dialer: nw, dialed: make(chan int32, 4)}
		cfg := star.DefaultConfig()
		cfg.Rank, cfg.Size, cfg.Timeout = r, size, 10*time.Second
		cfg.Dialer, cfg.Addr = dialers[r], "coord"
		// One worker at a time, each acknowledged before the next one
		// starts: the earlier ones hold their Acks while the coordinator
		// still waits for a worker.
		started := make(chan error, 1)
		go func() {
			c, err := newRank(cfg)
			comms[r] = c
			started <- err
		}()
		conn, err := ln.Accept()
		require.NoError(t, err)
		defer conn.Close()
		require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
		tag, payload, err := readRawFrame(conn, 8)
		require.NoError(t, err)
		require.Equal(t, star.TagName(star.TagHandshake), star.TagName(tag), "connection %d: the coordinator takes it for a worker's", r)
		rank := int(binary.BigEndian.Uint32(payload[0:4]))
		require.Equal(t, r, rank)
		conns[rank] = conn
		ack := make([]byte, star.HeaderSize+4)
		star.PutHeader(ack, star.TagAck, 4)
		binary.BigEndian.PutUint32(ack[star.HeaderSize:], size)
		_, err = conn.Write(ack)
		require.NoError(t, err)
		require.NoError(t, <-started)
	}
	defer testkit.CloseAll(comms[1:])
	for r := 1; r < size; r++ {
		assert.Equal(t, int32(1), dialers[r].n.Load(), "rank %d connected more than once before the coordinator's first frame", r)
	}

	ctx := context.Background()
	barrier := func() {
		t.Helper()
		done := make(chan error, 1)
		go func() {
			done <- errors.Join(testkit.RunRanks(comms[1:], func(c comm.Communicator) error { return c.Barrier(ctx) })...)
		}()
		for r := 1; r < size; r++ {
			tag, _, err := readRawFrame(conns[r], 0)
			require.NoError(t, err)
			require.Equal(t, star.TagName(star.TagBarrierReady), star.TagName(tag))
		}
		for r := 1; r < size; r++ {
			_, err := conns[r].Write([]byte{0, 0, 0, 1, star.TagBarrierGo})
			require.NoError(t, err)
		}
		require.NoError(t, <-done)
	}
	barrier()
	// Now each worker asks for its control session: nobody accepts it.
	for r := 1; r < size; r++ {
		require.Equal(t, int32(1), <-dialers[r].dialed)
		require.Equal(t, int32(2), <-dialers[r].dialed, "rank %d's control session", r)
	}
	barrier()

	closed := make(chan error, 1)
	go func() {
		closed <- errors.Join(testkit.RunRanks(comms[1:], func(c comm.Communicator) error { return c.Close() })...)
	}()
	for r := 1; r < size; r++ {
		_, err := conns[r].Write([]byte{0, 0, 0, 1, star.TagShutdown})
		require.NoError(t, err)
	}
	require.NoError(t, <-closed)
}

// TestControlOpensWithoutCollectives: a worker of a job of three ranks or
// more that calls no collective opens its control session controlWait
// (2 s) after start-up, well within the ConnectTimeout during which
// rank 0 takes sessions; one that calls a collective opens it when rank
// 0's first frame comes; the only worker of a job of two opens it at
// once. On the fake clock.
func TestControlOpensWithoutCollectives(t *testing.T) {
	for _, tc := range []struct {
		name    string
		size    int
		barrier bool
		want    time.Duration
	}{
		{"ranks=4", 4, false, 2 * time.Second},
		{"ranks=4/barrier", 4, true, 0},
		{"ranks=2", 2, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testkit.SyncTest(t, func(t *testing.T) {
				begin := time.Now()
				var mu sync.Mutex
				up := map[int]time.Duration{}
				defer star.SetTestHook(func(rank int, point string) {
					if point == star.HookSessionSetUp {
						mu.Lock()
						up[rank] = time.Since(begin)
						mu.Unlock()
					}
				})()
				comms := withControl(t, tc.size, time.Minute, 10*time.Second, nil, nil)
				defer testkit.CloseAll(comms)
				if tc.barrier {
					for _, err := range testkit.RunRanks(comms, func(c comm.Communicator) error { return c.Barrier(context.Background()) }) {
						require.NoError(t, err)
					}
				}
				time.Sleep(time.Minute)
				mu.Lock()
				defer mu.Unlock()
				require.Len(t, up, tc.size-1, "sessions set up: %v", up)
				for r, at := range up {
					assert.GreaterOrEqual(t, at, tc.want, "rank %d's session", r)
					assert.Less(t, at, tc.want+time.Millisecond, "rank %d's session", r)
				}
			})
		})
	}
}

// TestFailedWorkerOpensNoSession: a worker whose communicator failed (its
// context ended in a barrier nobody else called) before its control
// session was due opens none when controlWait passes: its collectives are
// over, and the port may be the next job's coordinator's by then. The
// other worker opens its own. On the fake clock.
func TestFailedWorkerOpensNoSession(t *testing.T) {
	testkit.SyncTest(t, func(t *testing.T) {
		var mu sync.Mutex
		up := map[int]bool{}
		defer star.SetTestHook(func(rank int, point string) {
			if point == star.HookSessionSetUp {
				mu.Lock()
				up[rank] = true
				mu.Unlock()
			}
		})()
		comms := withControl(t, 3, time.Minute, 10*time.Second, nil, nil)
		defer testkit.CloseAll(comms)
		ctx, cancel := context.WithTimeout(context.Background(), star.ControlWait()/2)
		defer cancel()
		collectiveFailed(t, comms[1].Barrier(ctx), 1)
		sessionsUp(t)
		mu.Lock()
		defer mu.Unlock()
		assert.False(t, up[1], "the failed worker opened a session")
		assert.True(t, up[2], "the other worker opened none")
	})
}
