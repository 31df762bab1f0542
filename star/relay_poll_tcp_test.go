package star_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/star"
	"github.com/starcomm/starcomm/testkit"
	"github.com/starcomm/starcomm/transport"
	"github.com/starcomm/starcomm/transport/tcp"
)

// acceptWrapping is a loopback TCP network whose accepted connections
// (rank 0's ends) are given to wrap, and the listener hands out what it
// returns; connections of another kind pass as they are.
type acceptWrapping struct {
	*testkit.TCPNetwork
	wrap func(*tcp.Conn) transport.Conn
}

func (n acceptWrapping) Listen() (transport.Listener, error) {
	ln, err := n.TCPNetwork.Listen()
	if err != nil {
		return nil, err
	}
	return wrappingListener{Listener: ln, wrap: n.wrap}, nil
}

type wrappingListener struct {
	transport.Listener
	wrap func(*tcp.Conn) transport.Conn
}

func (l wrappingListener) Accept() (transport.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if tc, ok := c.(*tcp.Conn); ok {
		return l.wrap(tc), nil
	}
	return c, nil
}

// awaitSessions waits until sessions (fed by a test hook at
// star.HookHeartbeat with a worker's rank) has named n different workers:
// rank 0's control session with each of them is up.
func awaitSessions(t *testing.T, sessions <-chan int, n int) {
	t.Helper()
	for up := map[int]bool{}; len(up) < n; {
		select {
		case r := <-sessions:
			up[r] = true
		case <-time.After(20 * time.Second):
			t.Fatalf("control sessions up: %d of %d", len(up), n)
		}
	}
}

// throttledNetwork is a loopback TCP network whose accepted connections
// (rank 0's ends) give polling at most budget bytes each while armed:
// ReadNow then reports nothing more, as if the rest had not arrived, while
// Read (a goroutine's wait) reads on. A relayed allgatherv then finds its
// frames partly polled when it gives up polling and relays the rest.
type throttledNetwork struct {
	acceptWrapping
	armed  atomic.Bool
	budget int64
	mu     sync.Mutex
	conns  []*throttledConn
}

// newThrottledNetwork returns a throttledNetwork of budget bytes.
func newThrottledNetwork(budget int64) *throttledNetwork {
	n := &throttledNetwork{budget: budget}
	n.acceptWrapping = acceptWrapping{TCPNetwork: testkit.NewTCPNetwork(), wrap: func(tc *tcp.Conn) transport.Conn {
		c := &throttledConn{Conn: tc, n: n}
		n.mu.Lock()
		n.conns = append(n.conns, c)
		n.mu.Unlock()
		return c
	}}
	return n
}

// arm starts a throttled collective: every connection's count restarts.
func (n *throttledNetwork) arm(on bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, c := range n.conns {
		c.polled.Store(0)
	}
	n.armed.Store(on)
}

// polled returns how many bytes each connection gave polling while armed,
// leaving out those that gave none (control sessions, idle links).
func (n *throttledNetwork) polled() []int64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []int64
	for _, c := range n.conns {
		if k := c.polled.Load(); k > 0 {
			out = append(out, k)
		}
	}
	return out
}

// throttledConn is a tcp.Conn (every interface of it: poller, direct
// writer, low-water reader) whose ReadNow the network throttles.
type throttledConn struct {
	*tcp.Conn
	n      *throttledNetwork
	polled atomic.Int64
}

func (c *throttledConn) ReadNow(p []byte) (int, error) {
	if !c.n.armed.Load() {
		return c.Conn.ReadNow(p)
	}
	left := c.n.budget - c.polled.Load()
	if left <= 0 {
		return 0, nil
	}
	if int64(len(p)) > left {
		p = p[:left]
	}
	k, err := c.Conn.ReadNow(p)
	c.polled.Add(int64(k))
	return k, err
}

// TestRelayAfterPolling: a relayed allgatherv whose regions are small
// enough to poll (over TCP, with polling on) is first polled by rank 0;
// when polling gives up with frames partly read, the relay reads each
// from where polling left it (and gives no reader to a frame polled in
// whole), and every rank gets every byte in its place; unthrottled, the
// same allgatherv (stored and forwarded or relayed, as the polling goes)
// is right too, twice in a row.
func TestRelayAfterPolling(t *testing.T) {
	t.Cleanup(star.SetRelayOnHost()) // its workers are on this host
	testkit.CheckGoroutines(t)
	const (
		size   = 7
		big    = 32_000 // float64: 256,000 bytes, at most pollMax
		budget = star.HeaderSize + 100_003
	)
	// Rank 0's region and four big ones; rank 1's empty and rank 2's small
	// (polled in whole within the budget): 1.288 MB in all, relayed.
	counts := []int{big, 0, 1000, big, big, big - 7, big}
	displs := make([]int, size)
	total := 0
	for r, n := range counts {
		displs[r] = total
		total += n
	}
	require.GreaterOrEqual(t, total*8, 1<<20, "the allgatherv must be relayed")

	var relays atomic.Int64
	sessions := make(chan int, 1024) // rank 0's control session with each worker, up
	begun := make(chan int, 1024)    // a worker's allgatherv, about to send
	defer star.SetTestHook(func(rank int, point string) {
		switch {
		case rank == 0 && point == star.HookRelay:
			relays.Add(1)
		case rank > 0 && point == star.HookHeartbeat:
			select { // a worker's rank: rank 0's session with it reads
			case sessions <- rank:
			default:
			}
		case rank > 0 && point == star.HookBegin:
			begun <- rank
		}
	})()
	nw := newThrottledNetwork(budget)
	comms, err := testkit.StartStar(context.Background(), nw, size, func(c *star.Config) {
		// Polling ends at the relay's limit, not for want of progress.
		c.Spin, c.Timeout = time.Second, 20*time.Second
	})
	require.NoError(t, err)
	defer testkit.CloseAll(comms)
	awaitSessions(t, sessions, size-1) // rank 0 relays only once they are up

	partial := 0 // big frames that polling left partly read
	for round, throttled := range []bool{true, false, true, false, true, false, true} {
		ok := t.Run(fmt.Sprintf("round=%d/throttled=%v", round, throttled), func(t *testing.T) {
			want := make([]float64, total)
			for r := range size {
				for i := range counts[r] {
					want[displs[r]+i] = float64(round)*1e9 + float64(r)*1e6 + float64(i)
				}
			}
			nw.arm(throttled)
			defer nw.arm(false)
			for len(begun) > 0 {
				<-begun // an earlier round's
			}
			before := relays.Load()
			errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
				r := c.Rank()
				recv := make([]float64, total)
				if r == 0 && throttled {
					// Rank 0 starts polling once every worker is about to
					// send: it polls for at most a millisecond, so that
					// it finds the frames arriving (the exact amounts are
					// the scheduler's).
					for range size - 1 {
						select {
						case <-begun:
						case <-time.After(20 * time.Second):
							return errors.New("the workers did not begin their allgatherv")
						}
					}
				}
				if err := comm.Allgatherv(context.Background(), c, want[displs[r]:displs[r]+counts[r]], recv, counts, displs); err != nil {
					return err
				}
				for i := range recv {
					if recv[i] != want[i] {
						return fmt.Errorf("rank %d: element %d is %v, want %v", r, i, recv[i], want[i])
					}
				}
				return nil
			})
			for r, err := range errs {
				require.NoError(t, err, "rank %d", r)
			}
			if !throttled {
				return
			}
			require.Equal(t, int64(1), relays.Load()-before, "polling cannot finish the big frames: rank 0 relayed")
			polled := nw.polled()
			t.Logf("bytes polled per link before the relay: %v", polled)
			for _, k := range polled {
				require.LessOrEqual(t, k, int64(budget))
				if k == budget {
					partial++
				}
			}
		})
		if !ok {
			return // the communicators failed: the next rounds would too
		}
	}
	// The point of the test: the relay went on from frames that polling
	// had begun (their bytes are right only if it reads each from there).
	require.Positive(t, partial, "no big frame was partly polled when the relay began")
}
