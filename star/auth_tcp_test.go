package star_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/star"
	"github.com/starcomm/starcomm/testkit"
	"github.com/starcomm/starcomm/transport"
)

// countingListener reports every connection it accepts on accepted.
type countingListener struct {
	transport.Listener
	accepted chan<- struct{}
}

func (l countingListener) Accept() (transport.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted <- struct{}{}
	}
	return c, err
}

// TestAuthHostileStartupTCP: TestAuthHostileStartup over real TCP on
// loopback, in this process, on the real clock. Rank 0 (with the token)
// starts, rank 1 joins and its Handshake and answer are recorded off its
// connection; then 200 connections without the token (every kind of
// hostileKinds: silence, garbage, replays of rank 1's answer, answers made
// with another token, trickled handshakes, valid Handshakes without a
// token, Control frames), with rank 2 starting among them; rank 3 starts
// only once rank 0 has accepted every one of them, so that all 200 come
// during start-up. Three rounds: each time the job starts and runs mixed
// collectives to their end on every rank, exactly the three real workers
// are registered, and no hostile connection is sent anything but a
// challenge and an Abort (never an Ack or a Control answer).
func TestAuthHostileStartupTCP(t *testing.T) {
	const (
		size     = 4
		hostiles = 200
		ht       = 2 * time.Second
	)
	var registered atomic.Int32
	regs := make(chan int, 64)
	restore := star.SetTestHook(func(rank int, point string) {
		if point == star.HookRegistered {
			registered.Add(1)
			regs <- rank
		}
	})
	defer restore()
	kinds := hostileKinds(size, ht)
	for round := range 3 {
		t.Run(fmt.Sprintf("round=%d", round), func(t *testing.T) {
			testkit.CheckGoroutines(t)
			registered.Store(0)
			for len(regs) > 0 { // the previous round's
				<-regs
			}
			rng := rand.New(rand.NewPCG(uint64(round), 17))
			nw := testkit.NewTCPNetwork()
			ln, err := nw.Listen()
			require.NoError(t, err)
			accepted := make(chan struct{}, hostiles+16)
			// Rank 1's connection is tapped; answered is closed once it
			// has written its Handshake and answer (it then reads for its
			// Ack).
			answered := make(chan struct{})
			var once sync.Once
			ts := &taps{}
			tapped := func(d transport.Dialer) transport.Dialer {
				return transport.DialerFunc(func(ctx context.Context, addr string) (transport.Conn, error) {
					c, err := d.Dial(ctx, addr)
					if err != nil {
						return nil, err
					}
					tc := ts.add(c).(*tap)
					tc.setOnRead(func() {
						if _, w := tc.counts(); w >= 13+star.HeaderSize+star.MACSize {
							once.Do(func() { close(answered) })
						}
					})
					return tc, nil
				})
			}
			start := func(rank int) <-chan rankResult {
				cfg := star.DefaultConfig()
				cfg.Rank, cfg.Size, cfg.Token = rank, size, jobToken
				cfg.HandshakeTimeout, cfg.ConnectTimeout = ht, 30*time.Second
				cfg.Timeout, cfg.ShutdownTimeout, cfg.Liveness = 10*time.Second, time.Second, 10*time.Second
				if rank == 0 {
					cfg.Listener = countingListener{Listener: ln, accepted: accepted}
				} else {
					cfg.Dialer, cfg.Addr = nw.Dialer(), ln.Addr()
					if rank == 1 {
						cfg.Dialer = tapped(cfg.Dialer)
					}
				}
				return testkit.Async(func() rankResult {
					c, err := newRank(cfg)
					return rankResult{c, err}
				})
			}
			coord := start(0)
			w1 := start(1)
			select {
			case r := <-regs:
				require.Equal(t, 1, r)
			case r := <-w1:
				t.Fatalf("rank 1 ended before it was registered: %v", r.err)
			}
			<-answered
			<-accepted
			ts.mu.Lock()
			rank1 := ts.all[0]
			ts.mu.Unlock()
			rank1.mu.Lock()
			wrote := bytes.Clone(rank1.wrote.Bytes())
			rank1.mu.Unlock()
			rec := recorded{handshake: wrote[:13], answer: wrote[13 : 13+star.HeaderSize+star.MACSize]}
			require.Equal(t, star.EncodeHandshake(1, size), rec.handshake)

			dialer := nw.Dialer()
			clients := make([]*rawConn, hostiles)
			played := make([]string, hostiles)
			var hs sync.WaitGroup
			var w2 <-chan rankResult
			at2 := rng.IntN(hostiles)
			begin := time.Now()
			for i := range hostiles {
				if i == at2 {
					w2 = start(2)
				}
				kind := kinds[(i+round)%len(kinds)]
				played[i] = kind.name
				seed := rng.Uint64()
				rc, err := dialRaw(t, dialer, ln.Addr(), begin)
				require.NoError(t, err, "hostile %d", i)
				clients[i] = rc
				hs.Go(func() { kind.play(rc, rand.New(rand.NewPCG(seed, 1)), rec) })
			}
			// Every hostile connection, and rank 2's, accepted by rank 0
			// before rank 3 dials: all come during start-up.
			for range hostiles + 1 {
				<-accepted
			}
			w3 := start(3)
			r0, r1, r2, r3 := <-coord, <-w1, <-w2, <-w3
			require.NoError(t, errors.Join(r0.err, r1.err, r2.err, r3.err))
			comms := []comm.Communicator{r0.c, r1.c, r2.c, r3.c}
			errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
				return testkit.MixedOps(context.Background(), c, uint64(round), 30)
			})
			require.NoError(t, errors.Join(errs...))
			require.NoError(t, testkit.CloseAll(comms))
			hs.Wait()
			assert.EqualValues(t, size-1, registered.Load(), "only the real workers were registered")
			refused := 0
			for i, rc := range clients {
				tags, _, _ := frames(rc.wait())
				for k, tag := range tags {
					ok := (k == 0 && tag == star.TagAuthChallenge) || tag == star.TagAbort
					assert.True(t, ok, "hostile %d (%s) read %v", i, played[i], tagNames(tags))
				}
				if len(tags) > 0 && tags[len(tags)-1] == star.TagAbort {
					refused++
				}
			}
			t.Logf("round %d: %d hostile connections during start-up, %d refused with an Abort, the others cut when it ended", round, hostiles, refused)
		})
	}
}

// failingListener fails Accept, without accepting, while fails (decremented
// at each failure) is positive, or always when it starts negative.
type failingListener struct {
	transport.Listener
	fails atomic.Int32
}

func (l *failingListener) Accept() (transport.Conn, error) {
	if n := l.fails.Load(); n != 0 {
		if n > 0 {
			l.fails.Add(-1)
		}
		return nil, fmt.Errorf("accept: %w", syscall.EMFILE)
	}
	return l.Listener.Accept()
}

// TestAcceptErrors: an Accept that fails while the listener is open (out
// of file descriptors, as a flood of hostile connections can cause) does
// not stop rank 0 from accepting: after 4 failures, with pauses of 5, 10,
// 20 and 40 ms between them, the real workers are accepted and the job
// starts (75 ms after the start, on the fake clock). When Accept never
// works again, rank 0 fails at the connect timeout naming the missing rank
// and saying that accepting failed, and nothing is left running. Without
// the retry, the first failure ended the accept loop and start-up waited
// for the connect timeout, then failed.
func TestAcceptErrors(t *testing.T) {
	t.Run("recovers", func(t *testing.T) {
		testkit.SyncTest(t, func(t *testing.T) {
			const size = 3
			var fl *failingListener
			ac := newAuthCluster(t, size, func(rank int, c *star.Config) {
				c.Token = jobToken
				if rank == 0 {
					fl = &failingListener{Listener: c.Listener}
					fl.fails.Store(4)
					c.Listener = fl
				}
			})
			begin := time.Now()
			coord := ac.start(0)
			w1, w2 := ac.start(1), ac.start(2)
			r0, r1, r2 := <-coord, <-w1, <-w2
			require.NoError(t, errors.Join(r0.err, r1.err, r2.err))
			assert.Equal(t, 75*time.Millisecond, time.Since(begin))
			comms := []comm.Communicator{r0.c, r1.c, r2.c}
			errs := testkit.RunRanks(comms, func(c comm.Communicator) error { return c.Barrier(context.Background()) })
			require.NoError(t, errors.Join(errs...))
			require.NoError(t, testkit.CloseAll(comms))
		})
	})
	t.Run("never", func(t *testing.T) {
		testkit.SyncTest(t, func(t *testing.T) {
			ac := newAuthCluster(t, 2, func(rank int, c *star.Config) {
				c.ConnectTimeout = 3 * time.Second
				if rank == 0 {
					fl := &failingListener{Listener: c.Listener}
					fl.fails.Store(-1)
					c.Listener = fl
				}
			})
			r0 := <-ac.start(0)
			require.Error(t, r0.err)
			assert.Contains(t, r0.err.Error(), "missing ranks [1]")
			assert.Contains(t, r0.err.Error(), "accepting a connection failed: accept: too many open files")
			assert.Contains(t, r0.err.Error(), "rank 0 ran out of open files (it holds 2 per worker: 2 ranks need a limit, ulimit -n, above 68)")
		})
	})
	// Rank 0 takes one worker and then runs out of files: the worker it
	// took is told that rank 0 failed, not the rank it could not take.
	t.Run("after one", func(t *testing.T) {
		testkit.SyncTest(t, func(t *testing.T) {
			ac := newAuthCluster(t, 3, func(rank int, c *star.Config) {
				c.ConnectTimeout = 3 * time.Second
				if rank == 0 {
					c.Listener = &acceptThenFail{Listener: c.Listener, accepts: 1}
				}
			})
			coord := ac.start(0)
			r1 := <-ac.start(1)
			w2 := ac.start(2)
			r0 := <-coord
			require.Error(t, r0.err)
			assert.Contains(t, r0.err.Error(), "missing ranks [2]")
			assert.Contains(t, r0.err.Error(), "rank 0 ran out of open files")
			var ab *star.AbortError
			require.ErrorAs(t, r1.err, &ab, "rank 1's start-up error")
			assert.Equal(t, 0, ab.Rank, "rank 1 is told that rank 0 failed: %v", r1.err)
			<-w2
		})
	})
	// A passing shortage (an Accept failed, the next worked) is not why
	// a worker that never came is missing: it is blamed.
	t.Run("passed", func(t *testing.T) {
		testkit.SyncTest(t, func(t *testing.T) {
			ac := newAuthCluster(t, 3, func(rank int, c *star.Config) {
				c.ConnectTimeout = 3 * time.Second
				if rank == 0 {
					fl := &failingListener{Listener: c.Listener}
					fl.fails.Store(1)
					c.Listener = fl
				}
			})
			coord := ac.start(0)
			r1 := <-ac.start(1) // rank 2 never comes
			r0 := <-coord
			require.Error(t, r0.err)
			assert.Contains(t, r0.err.Error(), "missing ranks [2]")
			assert.NotContains(t, r0.err.Error(), "ran out of open files")
			var ab *star.AbortError
			require.ErrorAs(t, r1.err, &ab, "rank 1's start-up error")
			assert.Equal(t, 2, ab.Rank, "rank 1 is told that rank 2 never came: %v", r1.err)
		})
	})
}

// acceptThenFail accepts accepts connections, then fails every Accept as
// a process out of file descriptors does.
type acceptThenFail struct {
	transport.Listener
	accepts int
}

func (l *acceptThenFail) Accept() (transport.Conn, error) {
	if l.accepts > 0 {
		l.accepts--
		return l.Listener.Accept()
	}
	return nil, fmt.Errorf("accept: %w", syscall.EMFILE)
}
