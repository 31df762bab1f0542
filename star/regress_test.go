package star_test

import (
	"context"
	"io"
	"strings"
	"sync"
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

// Regression tests for bugs found by the fuzz and hostile-input tests.

// hookListener wraps a listener: onAck runs after each Ack frame the
// coordinator writes, and closed is closed when the coordinator closes the
// listener (which accept does right after its wait for the workers ends).
type hookListener struct {
	transport.Listener
	onAck  func()
	once   sync.Once
	closed chan struct{}
}

func (l *hookListener) Accept() (transport.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &hookConn{Conn: c, l: l}, nil
}

func (l *hookListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

type hookConn struct {
	transport.Conn
	l *hookListener
}

func (c *hookConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if err == nil && len(p) >= star.HeaderSize && p[4] == star.TagAck {
		c.l.onAck()
	}
	return n, err
}

// TestBugStartupDeadlineAfterLastAckPanics: when the coordinator's start-up
// ends by its context (caller's cancel, or ConnectTimeout) while the last
// worker's handshake goroutine is between its successful Ack write and its
// registration, accept waits for that goroutine, which registers the
// worker; every rank is then present, missing is empty, and
// abortReason(missing[0], ...) in accept (handshake.go) panics with
// "index out of range [0] with length 0". The hook below only makes that
// scheduling window deterministic. Expected: no panic; New returns the
// links (every worker registered) or an InitializationFailedError.
func TestRegressionStartupDeadlineAfterLastAckPanics(t *testing.T) {
	testkit.SyncTest(t, func(t *testing.T) {
		nw := pipe.NewNetwork()
		ln, err := nw.Listen("coord")
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		hl := &hookListener{Listener: ln, closed: make(chan struct{})}
		// The caller gives up (or ConnectTimeout fires) while the Ack goes
		// out. (The Acks are now sent once every worker has registered, so
		// the old window, between a worker's Ack and its registration, is
		// gone; the test stays as a guard.)
		hl.onAck = cancel
		cfg := star.DefaultConfig()
		cfg.Rank, cfg.Size, cfg.Listener = 0, 2, hl
		cfg.ShutdownTimeout = 100 * time.Millisecond
		cfg.Liveness = -1 // the listener closes when start-up ends, as the hook expects
		type result struct {
			c     *star.Comm
			err   error
			panic any
		}
		got := make(chan result, 1)
		go func() {
			var r result
			defer func() {
				r.panic = recover()
				got <- r
			}()
			r.c, r.err = star.New(ctx, cfg)
		}()
		wcfg := star.DefaultConfig()
		wcfg.Rank, wcfg.Size, wcfg.Dialer, wcfg.Addr = 1, 2, nw, "coord"
		wcfg.Liveness = -1
		w, werr := star.New(context.Background(), wcfg)
		r := <-got
		if werr == nil {
			_ = w.Close()
		}
		if r.c != nil {
			_ = r.c.Close()
		}
		require.Nil(t, r.panic, "star.New (rank 0) panicked")
		if r.err != nil {
			var ife *comm.InitializationFailedError
			assert.ErrorAs(t, r.err, &ife)
		}
	})
}

// TestBugAbortReasonUnbounded: Abort frames sent through link.linger are
// not cut to MaxAbortReason, although a receiver refuses (does not read) an
// Abort frame whose reason is longer. The reasons quote error text that a
// peer controls, so one rank's long (but valid) Abort reason makes the
// coordinator send frames its own parser refuses:
//   - during a collective, the coordinator forwards "rank 2 failed during
//     barrier (seen by rank 0) ...: aborted by rank 2: <reason>" to the
//     other workers; when <reason> is near MaxAbortReason the forwarded
//     frame is longer, so worker 1 sees "received Abort frame, expected
//     BarrierGo" and blames rank 0 (Rank 0, ErrUnexpectedTag) instead of
//     rank 2 with its cause;
//   - during start-up, the refusal of a connection whose first frame is
//     such an Abort is "bad handshake: aborted by rank -1: <reason>", again
//     longer than MaxAbortReason.
//
// Expected: every Abort frame this package sends carries at most
// MaxAbortReason bytes (cut the reason, e.g. in linger or abortReason, on a
// UTF-8 boundary), so that the receiver reads it and names rank 2.
func TestRegressionAbortReasonUnbounded(t *testing.T) {
	prefix := "rank 2 failed during barrier: "
	long := prefix + strings.Repeat("x", star.MaxAbortReason-len(prefix))
	require.Len(t, long, star.MaxAbortReason)

	t.Run("phase=collective", func(t *testing.T) {
		comms, conn := startWithRogue(t, 3, 2)
		done := make(chan []error, 1)
		go func() {
			done <- testkit.RunRanks(comms[:2], func(c comm.Communicator) error { return c.Barrier(context.Background()) })
		}()
		_, err := conn.Write(star.EncodeAbort(long))
		require.NoError(t, err)
		errs := <-done
		var cf *comm.CollectiveFailedError
		require.ErrorAs(t, errs[0], &cf)
		assert.Equal(t, 2, cf.Rank, "the coordinator blames rank 2")
		require.ErrorAs(t, errs[1], &cf)
		assert.Equal(t, 2, cf.Rank, "worker 1 blames rank 2: %v", errs[1])
		assert.NotErrorIs(t, errs[1], star.ErrUnexpectedTag, "worker 1 could read the Abort")
	})

	t.Run("phase=handshake", func(t *testing.T) {
		testkit.SyncTest(t, func(t *testing.T) {
			cu := newCoordinator(2, 100*time.Millisecond)
			conn, err := cu.nw.Dial(context.Background(), "coord")
			require.NoError(t, err)
			defer conn.Close()
			got := listen(conn, time.Now())
			_, _ = conn.Write(star.EncodeAbort(long))
			r := <-got
			assertAbort(t, r.data, "bad handshake")
			comms := cu.workers(t, 2, -1)
			<-cu.done
			require.NoError(t, cu.err)
			comms[0] = cu.c
			for _, c := range comms {
				_ = c.Close()
			}
		})
	})
}

// TestBugBlamedRankAtEnd: blamedRank (frame.go) returns -1 when the rank
// number runs to the end of the reason, because strings.IndexFunc finds no
// non-digit and returns -1, which the "end <= 0" test treats as no number.
// So an Abort whose reason is exactly "rank 1" (AbortError documents the
// form "rank N ...") blames nobody: the worker names the sender (rank 0)
// instead of rank 1. Expected: AbortError.Rank == 1.
func TestRegressionBlamedRankAtEnd(t *testing.T) {
	w, conn := fakeCoordinator(t)
	done := make(chan error, 1)
	go func() { done <- w.Barrier(context.Background()) }()
	_, _, err := readRawFrame(conn, 0) // BarrierReady
	require.NoError(t, err)
	_, err = conn.Write(star.EncodeAbort("rank 1"))
	require.NoError(t, err)
	go func() { _, _ = io.Copy(io.Discard, conn) }()
	err = <-done
	var ab *star.AbortError
	require.ErrorAs(t, err, &ab)
	assert.Equal(t, 1, ab.Rank, "AbortError.Rank for reason %q", ab.Reason)
}

// TestBugHandshakeTimeoutPerRead: Config.HandshakeTimeout is documented as
// how long the coordinator waits for a connection's Handshake frame, but
// readFull sets a fresh deadline for the header and another for the
// payload (and the Ack write gets a third), so a peer that sends the header
// just before HandshakeTimeout and the payload just before twice that is
// accepted: it held a connection (and, for the Ack, a rank) for up to
// 3 x HandshakeTimeout. Expected: refused at HandshakeTimeout (one deadline
// for the whole frame), or the doc says "per read".
func TestRegressionHandshakeTimeoutPerRead(t *testing.T) {
	testkit.SyncTest(t, func(t *testing.T) {
		const timeout = 100 * time.Millisecond
		begin := time.Now()
		cu := newCoordinator(2, timeout)
		conn, err := cu.nw.Dial(context.Background(), "coord")
		require.NoError(t, err)
		defer conn.Close()
		got := listen(conn, begin)
		hs := star.EncodeHandshake(1, 2)
		time.Sleep(timeout - time.Millisecond)
		_, err = conn.Write(hs[:star.HeaderSize])
		require.NoError(t, err)
		time.Sleep(timeout - time.Millisecond)
		_, err = conn.Write(hs[star.HeaderSize:]) // at 198 ms
		if err == nil {
			// Accepted: this connection is rank 1 now. Let New return.
			_ = conn.Close()
		}
		r := <-got
		<-cu.done
		if cu.c != nil {
			_ = cu.c.Close()
		}
		// (The late payload itself may be drained by the coordinator's
		// refusal, which reads what the peer still sends until it closes.)
		assert.LessOrEqual(t, r.at, timeout, "reply %x", r.data)
		assertAbort(t, r.data, "bad handshake")
		assert.Error(t, cu.err, "the trickling connection registered as rank 1")
	})
}
