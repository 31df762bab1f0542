package star_test

import (
	"context"
	"encoding/binary"
	"io"
	"math"
	"net"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/star"
	"github.com/starcomm/starcomm/testkit"
	"github.com/starcomm/starcomm/transport"
	"github.com/starcomm/starcomm/transport/tcp"
)

// TestLargeFrameInPieces: a large frame that arrives in pieces of every
// size, over real TCP, is read whole and right by a worker whose reads ask
// to wake only once the rest of the frame, or 256 KiB of it, is in the
// socket (SO_RCVLOWAT; see readFull). A mark left above what is still to
// come would wait for bytes that never come: the worker would fail with a
// timeout. The coordinator here is the test's, speaking the wire format: it
// answers each allgatherv with an AllgathervRecv frame written in pieces
// from 1 byte to 300 KB, pausing between them so that the worker's reads
// find part of a piece, a whole piece or nothing, on either side of the
// polling limit and the mark's cap (both 256 KiB), up to 2.5 MB.
func TestLargeFrameInPieces(t *testing.T) {
	testkit.CheckGoroutines(t)
	w, co := tcpFakeCoordinator(t, 3*time.Second)

	const mine = 20_000 // float64 of rank 1's (160 KB)
	pieces := []int{1, 4, 100 << 10, 300 << 10, 7, 250 << 10, 64 << 10, 1 << 10, 299 << 10, 3, 200 << 10}
	for _, theirs := range []int{40_000, 120_000, 180_000, 300_000} {
		total := theirs + mine
		counts, displs := []int{theirs, mine}, []int{0, theirs}
		send := make([]float64, mine)
		for i := range send {
			send[i] = float64(i)
		}
		want := make([]float64, total)
		for i := range theirs {
			want[i] = -float64(i)
		}
		copy(want[theirs:], send)
		frame := make([]byte, star.HeaderSize+8*total)
		binary.BigEndian.PutUint32(frame, uint32(8*total+1))
		frame[4] = star.TagAllgathervRecv
		for i, v := range want {
			binary.LittleEndian.PutUint64(frame[star.HeaderSize+8*i:], math.Float64bits(v))
		}
		for shift := range 3 {
			done := make(chan error, 1)
			go func() {
				tag, payload, err := readRawFrame(co, 8*mine)
				if err == nil && (tag != star.TagAllgathervSend || len(payload) != 8*mine) {
					err = io.ErrUnexpectedEOF
				}
				for off, i := 0, shift; err == nil && off < len(frame); i++ {
					n := min(pieces[i%len(pieces)], len(frame)-off)
					_, err = co.Write(frame[off : off+n])
					off += n
					time.Sleep(time.Millisecond) // paces the pieces; nothing waits on it
				}
				done <- err
			}()
			recv := make([]float64, total)
			err := comm.Allgatherv(context.Background(), w, send, recv, counts, displs)
			require.NoError(t, <-done, "the test's coordinator")
			require.NoError(t, err, "allgatherv of %d bytes, pieces from %d", 8*total, shift)
			require.Equal(t, want, recv, "allgatherv of %d bytes", 8*total)
			smallAfterLarge(t, w, co)
		}
	}
}

// smallAfterLarge runs a 16-byte allgatherv whose reply comes after the
// worker has stopped polling for it: its header is read by a waiting read,
// which a mark left from the large frame before would hold until the
// timeout.
func smallAfterLarge(t *testing.T, w comm.Communicator, co transport.Conn) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, _, err := readRawFrame(co, 8)
		if err == nil {
			time.Sleep(20 * time.Millisecond) // well past the worker's polling (100 µs)
			frame := append(header(17, star.TagAllgathervRecv), make([]byte, 16)...)
			binary.LittleEndian.PutUint64(frame[star.HeaderSize:], math.Float64bits(42))
			_, err = co.Write(frame)
		}
		done <- err
	}()
	recv := make([]float64, 2)
	err := comm.Allgatherv(context.Background(), w, []float64{7}, recv, []int{1, 1}, []int{0, 1})
	require.NoError(t, <-done, "the test's coordinator")
	require.NoError(t, err, "a small allgatherv after a large one")
	require.Equal(t, []float64{42, 0}, recv)
}

// tcpFakeCoordinator starts a real worker (rank 1 of 2, control session
// off) against a TCP listener that the test answers itself, and returns the
// worker and the coordinator's end of its connection after a valid Ack;
// both are closed when the test ends.
func tcpFakeCoordinator(t *testing.T, timeout time.Duration) (comm.Communicator, *tcp.Conn) {
	t.Helper()
	cfg := tcp.DefaultConfig()
	cfg.BindAddr = "127.0.0.1"
	ln, err := tcp.Listen(cfg, 0)
	require.NoError(t, err)
	defer ln.Close()
	got := acceptWorker(ln)
	wcfg := star.DefaultConfig()
	wcfg.Rank, wcfg.Size = 1, 2
	wcfg.Dialer, wcfg.Addr = tcp.NewDialer(cfg), net.JoinHostPort("127.0.0.1", strconv.Itoa(ln.Port()))
	wcfg.Timeout, wcfg.ShutdownTimeout, wcfg.Liveness = timeout, 100*time.Millisecond, -1
	w, conn := joinFake(t, wcfg, got)
	return w, conn.(*tcp.Conn)
}

// TestLargeFrameCutShort: a coordinator that dies halfway through a large
// frame, by closing its end (FIN) or by a reset (RST), fails the worker at
// once, not after the timeout: the worker's read waits under a low-water
// mark of the rest of the frame (1 MiB), and the end of the stream or the
// reset wakes it all the same. One that stops sending and keeps the
// connection open fails it after the timeout, as without the mark; the
// worker's own Close from another goroutine ends its wait at once.
func TestLargeFrameCutShort(t *testing.T) {
	t.Run("hang", func(t *testing.T) {
		testkit.CheckGoroutines(t)
		const timeout = 500 * time.Millisecond
		w, co := tcpFakeCoordinator(t, timeout)
		const n = 400_000
		done := make(chan error, 1)
		go func() {
			_, _, err := readRawFrame(co, 8*n)
			if err == nil {
				_, err = co.Write(append(header(uint32(16*n+1), star.TagAllgathervRecv), make([]byte, 3*n)...))
			}
			done <- err
		}()
		start := time.Now()
		err := comm.Allgatherv(context.Background(), w, make([]float64, n), make([]float64, 2*n), []int{n, n}, []int{0, n})
		took := time.Since(start)
		require.NoError(t, <-done, "the test's coordinator")
		require.ErrorIs(t, err, os.ErrDeadlineExceeded)
		require.GreaterOrEqual(t, took, timeout, "failed before the timeout: %v", err)
		require.Less(t, took, 10*timeout, "the timeout took %v: %v", took, err)
	})
	t.Run("own-close", func(t *testing.T) {
		// The worker's own Close, from another goroutine, while it waits
		// under the mark for the rest of the frame: the collective ends at
		// once, and so does Close.
		testkit.CheckGoroutines(t)
		const timeout = 20 * time.Second
		w, co := tcpFakeCoordinator(t, timeout)
		const n = 400_000
		closed := make(chan error, 1)
		go func() {
			_, _, err := readRawFrame(co, 8*n)
			if err == nil {
				_, err = co.Write(append(header(uint32(16*n+1), star.TagAllgathervRecv), make([]byte, 3*n)...))
			}
			if err == nil {
				err = w.Close()
			}
			closed <- err
		}()
		start := time.Now()
		err := comm.Allgatherv(context.Background(), w, make([]float64, n), make([]float64, 2*n), []int{n, n}, []int{0, n})
		require.NoError(t, <-closed, "the test's coordinator, then Close")
		took := time.Since(start)
		var cf *comm.CollectiveFailedError
		require.ErrorAs(t, err, &cf)
		require.ErrorContains(t, err, "communicator closed during the collective")
		require.Less(t, took, timeout/4, "the collective and Close took %v: %v", took, err)
	})
	for _, reset := range []bool{false, true} {
		t.Run(map[bool]string{false: "close", true: "reset"}[reset], func(t *testing.T) {
			testkit.CheckGoroutines(t)
			const timeout = 20 * time.Second
			w, co := tcpFakeCoordinator(t, timeout)
			const n = 400_000 // float64 of each rank's: a 6.4 MB reply
			done := make(chan error, 1)
			go func() {
				_, _, err := readRawFrame(co, 8*n)
				if err == nil {
					_, err = co.Write(append(header(uint32(16*n+1), star.TagAllgathervRecv), make([]byte, 3*n)...))
				}
				if err == nil && reset {
					err = co.SetLinger(0)
				}
				if err == nil {
					err = co.Close()
				}
				done <- err
			}()
			start := time.Now()
			err := comm.Allgatherv(context.Background(), w, make([]float64, n), make([]float64, 2*n), []int{n, n}, []int{0, n})
			took := time.Since(start)
			require.NoError(t, <-done, "the test's coordinator")
			require.Error(t, err)
			require.Less(t, took, timeout/4, "the worker noticed the cut after %v: %v", took, err)
			var cf *comm.CollectiveFailedError
			require.ErrorAs(t, err, &cf)
			require.Equal(t, 0, cf.Rank, "the rank at fault: %v", err)
			if reset {
				require.ErrorIs(t, err, syscall.ECONNRESET)
			} else {
				require.ErrorIs(t, err, io.ErrUnexpectedEOF)
			}
		})
	}
}
