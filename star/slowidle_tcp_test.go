package star

import (
	"errors"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm/transport/tcp"
)

// TestMovingThenIdleTCP: over real TCP, a link reads a frame over a slow
// link, as in TestMovingThenAway: the peer's frame comes 1.5 timeouts
// after the read began, while this end's earlier bytes still go out to the
// peer, which acknowledges them, so at the first deadline link.moving sets
// rfix and the read goes on. Then the link idles for two timeouts (nothing
// moves either way), and the next read, whose frame comes 0.9 timeouts
// after it began (the peer computed), completes without reading on past a
// deadline; and the read after it, whose frame never comes, fails with
// the deadline error between a timeout and a timeout and the slack after
// it began (with a margin for the scheduler), not sooner. A stale rfix
// from the slow read (readFull and pollReadAt clear it once bytes come)
// would be armed again, passed, and fail the second read at once. The
// reads are parked (finishRead: readFull); a polled read re-arms its
// deadline every round, and does not reach it while it polls.
//
// Only the read side: a write over loopback outlasts its deadline only
// while the peer's window is closed, and slowWrite goes on only while it
// is open, so a slow write (link.slowWrite) is not made here; the faulty
// transport's Acked Delays make it (TestSlowLinkThenIdle).
func TestMovingThenIdleTCP(t *testing.T) {
	const timeout = 200 * time.Millisecond
	const sched = 150 * time.Millisecond // the most a loaded host may add to a deadline's report
	checkGoroutines(t)
	l, peer := tcpLinkPair(t, timeout)
	raw := l.conn.(*tcp.Conn)
	if _, err := raw.Acks(); errors.Is(err, errors.ErrUnsupported) {
		t.Skip("no tcp.Conn.Acks here:", err)
	}
	var moved atomic.Int64
	defer SetTestHook(func(_ int, point string) {
		if point == hookMoving {
			moved.Add(1)
		}
	})()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer func() { _ = peer.Close(); _ = raw.Close() }()
	// The peer reads everything this end sends (its window stays open).
	wg.Go(func() {
		buf := make([]byte, 4096)
		for {
			if _, err := peer.Read(buf); err != nil {
				return
			}
		}
	})
	// The peer sends a 3-byte Broadcast frame after a while.
	sendAfter := func(d time.Duration, b byte) {
		wg.Go(func() {
			time.Sleep(d) // the scenario: the peer is slow, or computes
			_, err := peer.Write(append(lateHeader(4, TagBroadcast), b, b, b))
			assert.NoError(t, err)
		})
	}
	// read reads a Broadcast frame, parked, giving up after 5 s (25
	// timeouts: a spin, or a read that neither completes nor fails).
	read := func(what string) ([]byte, time.Duration, error) {
		start := time.Now()
		type result struct {
			part []byte
			err  error
		}
		done := make(chan result, 1)
		go func() { p, err := readBroadcast(l, "parked"); done <- result{p, err} }()
		select {
		case r := <-done:
			return r.part, time.Since(start), r.err
		case <-time.After(5 * time.Second):
			l.cancel(errors.New("test: given up"))
			<-done
			t.Fatalf("%s: the read neither completed nor failed in 5 s (25 timeouts); moving fired %d times", what, moved.Load())
			return nil, 0, nil
		}
	}

	// The slow read: this end's earlier data still going out, a
	// byte at a time, while the peer's frame takes 1.5 timeouts.
	stop := make(chan struct{})
	wg.Go(func() { trickle(raw, stop) })
	sendAfter(3*timeout/2, 1)
	part, took, err := read("the slow read")
	close(stop)
	require.NoError(t, err, "the slow read")
	assert.Equal(t, []byte{1, 1, 1}, part)
	require.Positive(t, moved.Load(), "the slow read read on past its deadline (link.moving); it took %v", took)

	// Idle: nothing moves for two timeouts.
	time.Sleep(2 * timeout) // the scenario: the job idles
	moved.Store(0)

	sendAfter(9*timeout/10, 2)
	part, took, err = read("the read after the idle time")
	require.NoError(t, err, "the read after the idle time, its frame 0.9 timeouts in (took %v)", took)
	assert.Equal(t, []byte{2, 2, 2}, part)
	assert.GreaterOrEqual(t, took, 9*timeout/10)
	assert.Zero(t, moved.Load(), "the read after the idle time went on past a deadline")

	_, took, err = read("the read whose frame never comes")
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "the peer sent nothing: its timeout (took %v)", took)
	assert.GreaterOrEqual(t, took, timeout, "the peer was failed before its timeout")
	assert.LessOrEqual(t, took, timeout+deadlineSlack(timeout)+sched, "the peer was failed late")
	assert.Zero(t, moved.Load(), "a read went on past a deadline")
}

// checkGoroutines fails t if, once the test and its other cleanups are
// over, more goroutines run than when it was called (within 5 s): call it
// first. (Package star's own tests cannot import testkit, which imports
// star; testkit.CheckGoroutines does the same, by goroutine.)
func checkGoroutines(t *testing.T) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond) // polling for exit, not synchronising
		}
		if n := runtime.NumGoroutine(); n > before {
			buf := make([]byte, 1<<20)
			t.Errorf("%d goroutine(s) leaked:\n%s", n-before, buf[:runtime.Stack(buf, true)])
		}
	})
}
