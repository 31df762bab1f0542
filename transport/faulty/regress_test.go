package faulty_test

import (
	"errors"
	"github.com/starcomm/starcomm/testkit"
	"net"
	"os"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm/transport/faulty"
)

// Regression tests for bugs the first version of faulty had.

// TestLinkFromSplitHandshake: the accepted end learns its link even when the
// Handshake's payload arrives a byte at a time.
func TestLinkFromSplitHandshake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := faulty.NewScript()
		tn := newNet(t, s)
		w, c := tn.connect(nil)
		hs := handshake(2)
		go func() {
			for i := range hs {
				_, _ = w.Write(hs[i : i+1])
			}
		}()
		got := readFull(c, len(hs))
		require.NoError(t, got.err)
		require.Equal(t, 2, faulty.ConnOf(c).Link())
	})
}

// TestEarliestFaultWins: of two faults in one frame, the one earlier in the
// stream fires first, whatever the script's order.
func TestEarliestFaultWins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := faulty.NewScript(
			faulty.Fault{Kind: faulty.Delay, Rank: 1, Dir: faulty.Write, Frame: 1, Offset: 50, Delay: time.Second},
			faulty.Fault{Kind: faulty.Crash, Rank: 1, Dir: faulty.Write, Frame: 1, Offset: 5},
		)
		w, peer := workerPair(t, s)
		done := testkit.Async(func() readResult { return readUntilErr(peer, 4096) })
		res := writeChunks(w, [][]byte{handshake(1), mkFrame(0x01, payload(100))})
		require.ErrorIs(t, res.err, net.ErrClosed)
		require.Equal(t, 13+5, res.n)
		require.Len(t, (<-done).data, 13+5)
	})
}

// TestHangStopsPendingRead: a Read already waiting when the end hangs
// delivers nothing, and Close unblocks it without the peer seeing EOF.
func TestHangStopsPendingRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := faulty.NewScript(faulty.Fault{Kind: faulty.Hang, Rank: 1, Manual: true})
		w, peer := workerPair(t, s)
		pendingRead := testkit.Async(func() ioResult { n, err := w.Read(make([]byte, 16)); return ioResult{n, err} })
		synctest.Wait()
		s.Fire(1)
		go func() { _, _ = peer.Write([]byte("after the hang")) }()
		synctest.Wait()
		require.NoError(t, w.Close())
		got := <-pendingRead
		require.Zero(t, got.n, "a hung end delivers nothing")
		require.ErrorIs(t, got.err, net.ErrClosed)
		require.NoError(t, peer.SetReadDeadline(time.Now().Add(time.Second)))
		_, err := peer.Read(make([]byte, 1))
		require.ErrorIs(t, err, os.ErrDeadlineExceeded, "the peer sees silence, not EOF")
	})
}

// TestFiredCrashReachesPendingIO: I/O waiting when Fire crashes or resets
// the end reports the fault, not the driver's closed-pipe error.
func TestFiredCrashReachesPendingIO(t *testing.T) {
	for _, tc := range []struct {
		kind faulty.Kind
		want error
	}{{faulty.Crash, net.ErrClosed}, {faulty.Reset, syscall.ECONNRESET}} {
		t.Run("fault="+tc.kind.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := faulty.NewScript(faulty.Fault{Kind: tc.kind, Rank: 1, Manual: true})
				w, _ := workerPair(t, s)
				pendingRead := testkit.Async(func() ioResult { n, err := w.Read(make([]byte, 16)); return ioResult{n, err} })
				synctest.Wait()
				s.Fire(1)
				got := <-pendingRead
				require.True(t, errors.Is(got.err, tc.want), "got %v, want %v", got.err, tc.want)
			})
		})
	}
}
