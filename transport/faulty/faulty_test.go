package faulty_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/starcomm/starcomm/testkit"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm/transport"
	"github.com/starcomm/starcomm/transport/faulty"
	"github.com/starcomm/starcomm/transport/pipe"
	"github.com/starcomm/starcomm/transport/transporttest"
)

// Every test but the conformance suite runs in a synctest bubble: pipe
// deadlines and faulty's timers use the fake clock, so times are exact, and a
// goroutine left blocked is a deadlock that fails the test instead of hanging
// it.

// TestConformance runs the driver suite over faulty conns with no faults: a
// wrapped conn must behave exactly like the driver it wraps, with the same
// optional abilities (over pipe: transport.Poller, unless NoPoll, and
// transport.CloseWriter).
func TestConformance(t *testing.T) {
	for _, mode := range []struct {
		name   string
		buffer int
		noPoll bool
	}{{"unbuffered", 0, false}, {"buffer=64KiB", 64 << 10, false}, {"nopoll", 0, true}} {
		t.Run("mode="+mode.name, func(t *testing.T) {
			transporttest.Run(t, func(t *testing.T) transporttest.Harness {
				n := pipe.NewNetwork()
				n.Buffer, n.NoPoll = mode.buffer, mode.noPoll
				s := faulty.NewScript()
				var seq atomic.Int64
				return transporttest.Harness{
					Listen: func() (transport.Listener, error) {
						l, err := n.Listen(fmt.Sprintf("listener-%d", seq.Add(1)))
						if err != nil {
							return nil, err
						}
						return s.WrapListener(l), nil
					},
					Dialer:   s.WrapDialer(n, 1),
					DeadAddr: func(*testing.T) string { return "nobody-listens-here" },
				}
			})
		})
	}
}

// The stream a worker sends in these tests, in the spec's framing: 4-byte
// big-endian LEN (bytes of TAG+PAYLOAD), 1-byte TAG, payload.
var (
	frame0 = mkFrame(0x08, be32(1), be32(4)) // handshake: rank 1 of 4; 13 bytes
	frame1 = mkFrame(0x10, payload(100))     // 105 bytes
	frame2 = mkFrame(0x11, []byte{0x42})     // 1-byte payload; 6 bytes
	frame3 = mkFrame(0x12)                   // tag only (LEN 1); 5 bytes
	frames = [][]byte{frame0, frame1, frame2, frame3}
	stream = bytes.Join(frames, nil)
)

const (
	headerSize = 5
	coordAddr  = "coordinator"
)

func be32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }

func mkFrame(tag byte, parts ...[]byte) []byte {
	body := append([]byte{tag}, bytes.Join(parts, nil)...)
	return append(be32(uint32(len(body))), body...)
}

func handshake(rank int) []byte { return mkFrame(0x08, be32(uint32(rank)), be32(4)) }

func payload(n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(i*7 + 3)
	}
	return p
}

// frameStart returns the stream offset of frames[i].
func frameStart(i int) int {
	n := 0
	for _, f := range frames[:i] {
		n += len(f)
	}
	return n
}

// layout is a way to cut the stream into Write calls.
type layout struct {
	name   string
	chunks [][]byte
}

func layouts() []layout {
	var bytewise, split [][]byte
	for i := range stream {
		bytewise = append(bytewise, stream[i:i+1])
	}
	for _, f := range frames {
		split = append(split, f[:headerSize])
		if len(f) > headerSize {
			split = append(split, f[headerSize:])
		}
	}
	return []layout{
		{"whole-frames", frames},
		{"byte-by-byte", bytewise},
		{"header-then-payload", split},
		{"two-frames-per-write", [][]byte{bytes.Join(frames[:2], nil), bytes.Join(frames[2:], nil)}},
	}
}

// readSizes are the buffer sizes readers use.
var readSizes = []int{1, 7, 4096}

type ioResult struct {
	n   int
	err error
}

type readResult struct {
	data []byte
	err  error
}

func writeChunks(c transport.Conn, chunks [][]byte) ioResult {
	total := 0
	for _, p := range chunks {
		n, err := c.Write(p)
		total += n
		if err != nil {
			return ioResult{total, err}
		}
	}
	return ioResult{total, nil}
}

// readUntilErr reads c with size-byte Reads until one fails.
func readUntilErr(c transport.Conn, size int) readResult {
	buf := make([]byte, size)
	var data []byte
	for {
		n, err := c.Read(buf)
		data = append(data, buf[:n]...)
		if err != nil {
			return readResult{data, err}
		}
	}
}

func readFull(c transport.Conn, n int) readResult {
	p := make([]byte, n)
	k, err := io.ReadFull(c, p)
	return readResult{p[:k], err}
}

func write(c transport.Conn, p []byte) func() ioResult {
	return func() ioResult { n, err := c.Write(p); return ioResult{n, err} }
}

func read(c transport.Conn, size int) func() ioResult {
	return func() ioResult { n, err := c.Read(make([]byte, size)); return ioResult{n, err} }
}

// testNet is a pipe network with one listener at coordAddr.
type testNet struct {
	t *testing.T
	n *pipe.Network
	l transport.Listener
}

// newNet starts the listener, wrapped by s unless s is nil.
func newNet(t *testing.T, s *faulty.Script) *testNet {
	t.Helper()
	n := pipe.NewNetwork()
	pl, err := n.Listen(coordAddr)
	require.NoError(t, err)
	var l transport.Listener = pl
	if s != nil {
		l = s.WrapListener(pl)
	}
	t.Cleanup(func() { l.Close() })
	return &testNet{t: t, n: n, l: l}
}

// connect dials the listener through d (nil: the raw network) and returns
// both ends, which are closed when the test ends.
func (tn *testNet) connect(d transport.Dialer) (dialed, accepted transport.Conn) {
	t := tn.t
	t.Helper()
	if d == nil {
		d = tn.n
	}
	type connResult struct {
		c   transport.Conn
		err error
	}
	acc := testkit.Async(func() connResult { c, err := tn.l.Accept(); return connResult{c, err} })
	dialed, err := d.Dial(t.Context(), coordAddr)
	require.NoError(t, err, "Dial")
	t.Cleanup(func() { dialed.Close() })
	a := <-acc
	require.NoError(t, a.err, "Accept")
	t.Cleanup(func() { a.c.Close() })
	return dialed, a.c
}

// workerPair returns a worker end of rank 1 wrapped by s and its peer, a raw
// pipe end.
func workerPair(t *testing.T, s *faulty.Script) (worker, peer transport.Conn) {
	t.Helper()
	tn := newNet(t, nil)
	return tn.connect(s.WrapDialer(tn.n, 1))
}

// handshakeAll connects one raw worker per rank to tn's listener and passes
// each worker's handshake, so that every accepted (coordinator) conn has
// learnt its link. The maps are indexed by rank.
func handshakeAll(t *testing.T, tn *testNet, ranks ...int) (coord, workers map[int]transport.Conn) {
	t.Helper()
	coord, workers = map[int]transport.Conn{}, map[int]transport.Conn{}
	for _, r := range ranks {
		w, c := tn.connect(nil)
		fc := faulty.ConnOf(c)
		require.NotNil(t, fc, "accepted conn is a %T, want a faulty conn", c)
		require.Equal(t, -1, fc.Link(), "Link before the handshake")
		sent := testkit.Async(write(w, handshake(r)))
		got := readFull(c, 13)
		require.NoError(t, got.err)
		require.Equal(t, handshake(r), got.data)
		require.NoError(t, (<-sent).err)
		require.Equal(t, r, fc.Link(), "Link after the handshake of rank %d", r)
		coord[r], workers[r] = c, w
	}
	return coord, workers
}

// Offsets inside frame 1 (105 bytes) where stream faults are placed; 105 is
// the frame's very end (the same point as frame 2, offset 0).
var offsets = []int{0, 1, 4, 5, 50, 104, 105}

// TestCrashPosition checks that a Crash cuts the stream exactly at its
// position, whatever the Write and Read sizes.
func TestCrashPosition(t *testing.T) {
	for _, lay := range layouts() {
		for _, k := range offsets {
			t.Run(fmt.Sprintf("fault=crash/dir=write/layout=%s/offset=%d", lay.name, k), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					s := faulty.NewScript(faulty.Fault{Kind: faulty.Crash, Rank: 1, Dir: faulty.Write, Frame: 1, Offset: k})
					w, peer := workerPair(t, s)
					got := testkit.Async(func() readResult { return readUntilErr(peer, 4096) })
					res := writeChunks(w, lay.chunks)
					require.ErrorIs(t, res.err, net.ErrClosed)
					require.Equal(t, len(frame0)+k, res.n, "bytes written before the crash")
					r := <-got
					require.Equal(t, io.EOF, r.err, "peer's Read after the crash")
					require.Equal(t, stream[:len(frame0)+k], r.data, "bytes the peer read")
					_, err := w.Write(frame2)
					require.ErrorIs(t, err, net.ErrClosed, "Write after the crash")
					_, err = w.Read(make([]byte, 1))
					require.ErrorIs(t, err, net.ErrClosed, "Read after the crash")
					require.Equal(t, 1, s.Fired())
				})
			})
		}
	}
	for _, lay := range layouts() {
		for _, size := range readSizes {
			for _, k := range offsets {
				t.Run(fmt.Sprintf("fault=crash/dir=read/layout=%s/read=%d/offset=%d", lay.name, size, k), func(t *testing.T) {
					synctest.Test(t, func(t *testing.T) {
						s := faulty.NewScript(faulty.Fault{Kind: faulty.Crash, Rank: 1, Dir: faulty.Read, Frame: 1, Offset: k})
						w, peer := workerPair(t, s)
						sent := testkit.Async(func() ioResult { return writeChunks(peer, lay.chunks) })
						r := readUntilErr(w, size)
						require.ErrorIs(t, r.err, net.ErrClosed)
						require.Equal(t, stream[:len(frame0)+k], r.data, "bytes read before the crash")
						res := <-sent
						require.Error(t, res.err, "peer's Write across the crash point")
						require.Equal(t, len(frame0)+k, res.n, "bytes the crashed end consumed")
						_, err := peer.Write(frame2)
						require.ErrorIs(t, err, io.ErrClosedPipe, "peer's later Write")
						_, err = w.Write(frame2)
						require.ErrorIs(t, err, net.ErrClosed, "Write on the crashed end")
						require.Equal(t, 1, s.Fired())
					})
				})
			}
		}
	}
}

// TestHang checks that a hung end blocks all I/O until its deadline or
// Close, and never closes its underlying conn.
func TestHang(t *testing.T) {
	t.Run("fault=hang/dir=write", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := faulty.NewScript(faulty.Fault{Kind: faulty.Hang, Rank: 1, Dir: faulty.Write, Frame: 1, Offset: 50})
			w, peer := workerPair(t, s)
			got := testkit.Async(func() readResult { return readFull(peer, len(frame0)+50) })
			start := time.Now()
			require.NoError(t, w.SetDeadline(start.Add(2*time.Second)))
			res := writeChunks(w, frames)
			require.ErrorIs(t, res.err, os.ErrDeadlineExceeded)
			require.Equal(t, 2*time.Second, time.Since(start), "Write returned before or after its deadline")
			require.Equal(t, len(frame0)+50, res.n)
			r := <-got
			require.NoError(t, r.err)
			require.Equal(t, stream[:len(frame0)+50], r.data)
			require.Equal(t, 1, s.Fired())

			// The hung end does not read either.
			sent := testkit.Async(write(peer, []byte("ping")))
			start = time.Now()
			require.NoError(t, w.SetReadDeadline(start.Add(time.Second)))
			n, err := w.Read(make([]byte, 8))
			require.ErrorIs(t, err, os.ErrDeadlineExceeded)
			require.Zero(t, n)
			require.Equal(t, time.Second, time.Since(start))
			testkit.Blocked(t, sent, "peer's Write to a hung end")

			// Close: I/O fails at once with net.ErrClosed, but the
			// underlying conn stays open, so the peer's Write stalls
			// until its own deadline. (The deadlines are cleared first:
			// faulty.go reports a passed deadline before Close on a hung
			// end.)
			require.NoError(t, w.SetDeadline(time.Time{}))
			require.NoError(t, w.Close())
			_, err = w.Write([]byte{1})
			require.ErrorIs(t, err, net.ErrClosed)
			_, err = w.Read(make([]byte, 1))
			require.ErrorIs(t, err, net.ErrClosed)
			testkit.Blocked(t, sent, "peer's Write after the hung end's Close")
			start = time.Now()
			require.NoError(t, peer.SetWriteDeadline(start.Add(3*time.Second)))
			require.ErrorIs(t, (<-sent).err, os.ErrDeadlineExceeded, "peer's Write")
			require.Equal(t, 3*time.Second, time.Since(start))
		})
	})
	t.Run("fault=hang/dir=read", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := faulty.NewScript(faulty.Fault{Kind: faulty.Hang, Rank: 1, Dir: faulty.Read, Frame: 1, Offset: 5})
			w, peer := workerPair(t, s)
			start := time.Now()
			require.NoError(t, peer.SetWriteDeadline(start.Add(5*time.Second)))
			sent := testkit.Async(func() ioResult { return writeChunks(peer, frames) })
			require.NoError(t, w.SetDeadline(start.Add(2*time.Second)))
			r := readUntilErr(w, 64)
			require.ErrorIs(t, r.err, os.ErrDeadlineExceeded)
			require.Equal(t, 2*time.Second, time.Since(start))
			require.Equal(t, stream[:len(frame0)+5], r.data)

			// The hung end does not write either.
			_, err := w.Write(frame2)
			require.ErrorIs(t, err, os.ErrDeadlineExceeded, "Write past the deadline")
			t0 := time.Now()
			require.NoError(t, w.SetWriteDeadline(t0.Add(time.Second)))
			n, err := w.Write(frame2)
			require.ErrorIs(t, err, os.ErrDeadlineExceeded)
			require.Zero(t, n)
			require.Equal(t, time.Second, time.Since(t0))

			// The peer's Write stalls: nobody reads.
			res := <-sent
			require.ErrorIs(t, res.err, os.ErrDeadlineExceeded, "peer's Write")
			require.Equal(t, 5*time.Second, time.Since(start))
			require.Equal(t, len(frame0)+5, res.n)
		})
	})
	for _, dir := range []faulty.Dir{faulty.Write, faulty.Read} {
		t.Run(fmt.Sprintf("fault=hang/dir=%v/case=deadline-moves", dir), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := faulty.NewScript(faulty.Fault{Kind: faulty.Hang, Rank: 1, Dir: dir})
				w, _ := workerPair(t, s)
				op, set := write(w, frame0), w.SetWriteDeadline
				if dir == faulty.Read {
					op, set = read(w, 64), w.SetReadDeadline
				}
				start := time.Now()
				require.NoError(t, set(start.Add(10*time.Second)))
				type timed struct {
					ioResult
					at time.Duration
				}
				done := testkit.Async(func() timed { r := op(); return timed{r, time.Since(start)} })
				testkit.Blocked(t, done, "hung I/O")
				require.NoError(t, set(start.Add(20*time.Second))) // later
				time.Sleep(15 * time.Second)                       // past the first deadline
				testkit.Blocked(t, done, "hung I/O after its deadline moved later")
				require.NoError(t, set(time.Now().Add(time.Second))) // earlier
				r := <-done
				require.ErrorIs(t, r.err, os.ErrDeadlineExceeded)
				require.Equal(t, 16*time.Second, r.at)
				require.Zero(t, r.n)
			})
		})
	}
	t.Run("fault=hang/case=close-unblocks", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := faulty.NewScript(faulty.Fault{Kind: faulty.Hang, Rank: 1, Dir: faulty.Write})
			w, peer := workerPair(t, s)
			wr := testkit.Async(write(w, frame0))
			testkit.Blocked(t, wr, "hung Write")
			rd := testkit.Async(read(w, 64))
			testkit.Blocked(t, rd, "Read on a hung end")
			require.NoError(t, w.Close())
			require.ErrorIs(t, testkit.Ready(t, wr, "hung Write after Close").err, net.ErrClosed)
			require.ErrorIs(t, testkit.Ready(t, rd, "hung Read after Close").err, net.ErrClosed)

			// The peer sees silence, not EOF: it times out on its own
			// deadline.
			start := time.Now()
			require.NoError(t, peer.SetReadDeadline(start.Add(5*time.Second)))
			n, err := peer.Read(make([]byte, 1))
			require.ErrorIs(t, err, os.ErrDeadlineExceeded, "peer's Read after a hung end's Close")
			require.Zero(t, n)
			require.Equal(t, 5*time.Second, time.Since(start))
		})
	})
}

// TestSysTimeout checks that a SysTimeout fails the I/O with ETIMEDOUT
// (whose Timeout method says true, but which is not
// os.ErrDeadlineExceeded: that is for star to say) and closes the conn
// under the peer, like a Reset.
func TestSysTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := faulty.NewScript(faulty.Fault{Kind: faulty.SysTimeout, Rank: 1, Dir: faulty.Write, Frame: 1, Offset: 50})
		w, peer := workerPair(t, s)
		got := testkit.Async(func() readResult { return readUntilErr(peer, 4096) })
		res := writeChunks(w, frames)
		require.ErrorIs(t, res.err, syscall.ETIMEDOUT)
		require.NotErrorIs(t, res.err, os.ErrDeadlineExceeded)
		require.Equal(t, len(frame0)+50, res.n)
		r := <-got
		require.Equal(t, io.EOF, r.err)
		_, err := w.Read(make([]byte, 1))
		require.ErrorIs(t, err, syscall.ETIMEDOUT, "Read after it")
		require.Equal(t, "system-timeout", faulty.SysTimeout.String())
	})
}

// TestReset checks that a Reset fails the I/O with ECONNRESET and closes
// the conn under the peer.
func TestReset(t *testing.T) {
	t.Run("fault=reset/dir=write", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := faulty.NewScript(faulty.Fault{Kind: faulty.Reset, Rank: 1, Dir: faulty.Write, Frame: 1, Offset: 50})
			w, peer := workerPair(t, s)
			got := testkit.Async(func() readResult { return readUntilErr(peer, 4096) })
			res := writeChunks(w, frames)
			require.ErrorIs(t, res.err, syscall.ECONNRESET)
			require.Equal(t, len(frame0)+50, res.n)
			r := <-got
			require.Equal(t, io.EOF, r.err)
			require.Equal(t, stream[:len(frame0)+50], r.data)
			_, err := w.Write(frame2)
			require.ErrorIs(t, err, syscall.ECONNRESET, "Write after the reset")
			_, err = w.Read(make([]byte, 1))
			require.ErrorIs(t, err, syscall.ECONNRESET, "Read after the reset")
			require.Equal(t, 1, s.Fired())
		})
	})
	t.Run("fault=reset/dir=read", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := faulty.NewScript(faulty.Fault{Kind: faulty.Reset, Rank: 1, Dir: faulty.Read, Frame: 1, Offset: 5})
			w, peer := workerPair(t, s)
			sent := testkit.Async(func() ioResult { return writeChunks(peer, frames) })
			r := readUntilErr(w, 64)
			require.ErrorIs(t, r.err, syscall.ECONNRESET)
			require.Equal(t, stream[:len(frame0)+5], r.data)
			require.Error(t, (<-sent).err, "peer's Write across the reset")
			n, err := peer.Read(make([]byte, 1))
			require.Equal(t, io.EOF, err, "peer's Read after the reset")
			require.Zero(t, n)
			_, err = w.Write(frame2)
			require.ErrorIs(t, err, syscall.ECONNRESET, "Write after the reset")
			require.Equal(t, 1, s.Fired())
		})
	})
}

// TestDeadline checks that a Deadline fault fails one I/O at once and
// leaves the stream intact.
func TestDeadline(t *testing.T) {
	t.Run("fault=deadline/dir=write", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := faulty.NewScript(faulty.Fault{Kind: faulty.Deadline, Rank: 1, Dir: faulty.Write, Frame: 1, Offset: 50})
			w, peer := workerPair(t, s)
			got := testkit.Async(func() readResult { return readFull(peer, len(stream)) })
			start := time.Now()
			_, err := w.Write(frame0)
			require.NoError(t, err)
			n, err := w.Write(frame1)
			require.ErrorIs(t, err, os.ErrDeadlineExceeded)
			require.Equal(t, 50, n)
			require.Zero(t, time.Since(start), "the Deadline fault took time")
			res := writeChunks(w, [][]byte{frame1[50:], frame2, frame3})
			require.NoError(t, res.err, "I/O after the Deadline fault")
			r := <-got
			require.NoError(t, r.err)
			require.Equal(t, stream, r.data)
			require.Equal(t, 1, s.Fired())
		})
	})
	t.Run("fault=deadline/dir=read", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := faulty.NewScript(faulty.Fault{Kind: faulty.Deadline, Rank: 1, Dir: faulty.Read, Frame: 1, Offset: 50})
			w, peer := workerPair(t, s)
			sent := testkit.Async(func() ioResult { return writeChunks(peer, frames) })
			start := time.Now()
			var data []byte
			var failedAt []int
			buf := make([]byte, 64)
			for len(data) < len(stream) {
				n, err := w.Read(buf)
				data = append(data, buf[:n]...)
				if err != nil {
					require.ErrorIs(t, err, os.ErrDeadlineExceeded)
					require.Zero(t, n)
					failedAt = append(failedAt, len(data))
				}
			}
			require.Equal(t, []int{len(frame0) + 50}, failedAt, "stream positions of failed Reads")
			require.Equal(t, stream, data)
			require.Zero(t, time.Since(start))
			require.NoError(t, (<-sent).err)
			require.Equal(t, 1, s.Fired())
		})
	})
}

// TestDelay checks that a Delay holds the I/O for exactly its duration (or
// until the deadline) and loses nothing.
func TestDelay(t *testing.T) {
	const delay = 3 * time.Second
	t.Run("fault=delay/dir=write", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := faulty.NewScript(faulty.Fault{Kind: faulty.Delay, Rank: 1, Dir: faulty.Write, Frame: 1, Offset: 50, Delay: delay})
			w, peer := workerPair(t, s)
			start := time.Now()
			type timedRead struct {
				before, after readResult
				beforeAt      time.Duration
			}
			got := testkit.Async(func() timedRead {
				var r timedRead
				r.before = readFull(peer, len(frame0)+50)
				r.beforeAt = time.Since(start)
				r.after = readUntilErr(peer, 4096)
				return r
			})
			for i, f := range frames {
				n, err := w.Write(f)
				require.NoError(t, err, "Write of frame %d", i)
				require.Equal(t, len(f), n)
				want := time.Duration(0)
				if i >= 1 {
					want = delay
				}
				require.Equal(t, want, time.Since(start), "time after the Write of frame %d", i)
			}
			require.NoError(t, w.Close())
			r := <-got
			require.NoError(t, r.before.err)
			require.Zero(t, r.beforeAt, "the bytes before the trigger were held back")
			require.Equal(t, io.EOF, r.after.err)
			require.Equal(t, stream, append(r.before.data, r.after.data...))
			require.Equal(t, 1, s.Fired())
		})
	})
	t.Run("fault=delay/dir=read", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := faulty.NewScript(faulty.Fault{Kind: faulty.Delay, Rank: 1, Dir: faulty.Read, Frame: 1, Offset: 50, Delay: delay})
			w, peer := workerPair(t, s)
			sent := testkit.Async(func() ioResult { return writeChunks(peer, frames) })
			start := time.Now()
			first := readFull(w, len(frame0)+50)
			require.NoError(t, first.err)
			require.Zero(t, time.Since(start))
			rest := readFull(w, len(stream)-len(first.data))
			require.NoError(t, rest.err)
			require.Equal(t, delay, time.Since(start))
			require.Equal(t, stream, append(first.data, rest.data...))
			require.NoError(t, (<-sent).err)
			require.Equal(t, 1, s.Fired())
		})
	})
	t.Run("fault=delay/case=deadline-first", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := faulty.NewScript(faulty.Fault{Kind: faulty.Delay, Rank: 1, Dir: faulty.Write, Frame: 1, Offset: 50, Delay: delay})
			w, peer := workerPair(t, s)
			got := testkit.Async(func() readResult { return readUntilErr(peer, 4096) })
			start := time.Now()
			require.NoError(t, w.SetWriteDeadline(start.Add(time.Second)))
			res := writeChunks(w, frames)
			require.ErrorIs(t, res.err, os.ErrDeadlineExceeded)
			require.Equal(t, time.Second, time.Since(start))
			require.Equal(t, len(frame0)+50, res.n)
			require.NoError(t, w.Close())
			require.Equal(t, stream[:len(frame0)+50], (<-got).data)
		})
	})
	t.Run("fault=delay/case=acked", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := faulty.NewScript(faulty.Fault{Kind: faulty.Delay, Rank: 1, Dir: faulty.Write, Frame: 1, Offset: 50, Delay: delay, Acked: true})
			w, peer := workerPair(t, s)
			fc := faulty.ConnOf(w)
			_, err := fc.Acks()
			require.ErrorIs(t, err, errors.ErrUnsupported, "before the Delay fired")
			got := testkit.Async(func() readResult { return readUntilErr(peer, 4096) })
			start := time.Now()
			require.NoError(t, w.SetWriteDeadline(start.Add(time.Second)))
			res := writeChunks(w, frames)
			require.ErrorIs(t, res.err, os.ErrDeadlineExceeded)
			require.Equal(t, time.Second, time.Since(start))
			require.Equal(t, len(frame0)+50, res.n)
			ack, err := fc.Acks()
			require.NoError(t, err)
			require.Equal(t, transport.Acks{SinceReceived: 24 * time.Hour, Open: true}, ack, "in the Delay: sent and acknowledged just now")

			// The deadline left the rest of the Delay to the next write.
			require.NoError(t, w.SetWriteDeadline(time.Time{}))
			rest := writeChunks(w, [][]byte{stream[res.n:]})
			require.NoError(t, rest.err)
			require.Equal(t, delay, time.Since(start), "the rest went when the Delay ended")
			time.Sleep(2 * time.Second) // the fake clock: ages count from the Delay's end
			ack, err = fc.Acks()
			require.NoError(t, err)
			require.Equal(t, transport.Acks{SinceSent: 2 * time.Second, SinceAcked: 2 * time.Second, SinceReceived: 24 * time.Hour, Open: true}, ack)
			require.NoError(t, w.Close())
			require.Equal(t, stream, (<-got).data)
			_, err = fc.Acks()
			require.ErrorIs(t, err, errors.ErrUnsupported, "a closed end")
		})
	})
}

// corruption is a header corruption and its expected effect.
type corruption struct {
	name  string
	fault faulty.Fault
	edit  func(h []byte)
}

func corruptions() []corruption {
	setLen := func(f func(uint32) uint32) func([]byte) {
		return func(h []byte) { binary.BigEndian.PutUint32(h, f(binary.BigEndian.Uint32(h))) }
	}
	return []corruption{
		{"corrupt-tag", faulty.Fault{Kind: faulty.CorruptTag}, func(h []byte) { h[4] = 0xEE }},
		{"len-too-large", faulty.Fault{Kind: faulty.LenTooLarge}, setLen(func(uint32) uint32 { return 0xFFFFFFFF })},
		{"len-too-large/extra=7", faulty.Fault{Kind: faulty.LenTooLarge, Extra: 7}, setLen(func(n uint32) uint32 { return n + 7 })},
		{"len-too-small", faulty.Fault{Kind: faulty.LenTooSmall}, setLen(func(n uint32) uint32 { return n - 1 })},
	}
}

// corrupted returns the stream with the header of frames[i] edited.
func corrupted(i int, edit func([]byte)) []byte {
	want := bytes.Clone(stream)
	edit(want[frameStart(i) : frameStart(i)+headerSize])
	return want
}

// TestCorrupt checks that a header corruption changes exactly the header
// bytes it names, in either direction, and nothing after them.
func TestCorrupt(t *testing.T) {
	t.Run("case=len-one-becomes-zero", func(t *testing.T) {
		want := corrupted(3, corruptions()[3].edit)
		require.Equal(t, []byte{0, 0, 0, 0}, want[frameStart(3):frameStart(3)+4])
	})
	for _, c := range corruptions() {
		for i := range frames {
			want := corrupted(i, c.edit)
			for _, lay := range layouts() {
				if lay.name == "byte-by-byte" {
					continue // a header split across Writes cannot be corrupted
				}
				t.Run(fmt.Sprintf("fault=%s/dir=write/frame=%d/layout=%s", c.name, i, lay.name), func(t *testing.T) {
					synctest.Test(t, func(t *testing.T) {
						f := c.fault
						f.Rank, f.Dir, f.Frame, f.Offset = 1, faulty.Write, i, 3 // any offset: the header is corrupted
						s := faulty.NewScript(f)
						w, peer := workerPair(t, s)
						got := testkit.Async(func() readResult { return readUntilErr(peer, 4096) })
						res := writeChunks(w, lay.chunks)
						require.NoError(t, res.err)
						require.Equal(t, len(stream), res.n)
						require.NoError(t, w.Close())
						r := <-got
						require.Equal(t, io.EOF, r.err)
						require.Equal(t, want, r.data)
						require.Equal(t, 1, s.Fired())
					})
				})
			}
			for _, lay := range layouts() {
				for _, size := range []int{1, 4096} {
					t.Run(fmt.Sprintf("fault=%s/dir=read/frame=%d/layout=%s/read=%d", c.name, i, lay.name, size), func(t *testing.T) {
						synctest.Test(t, func(t *testing.T) {
							f := c.fault
							f.Rank, f.Dir, f.Frame = 1, faulty.Read, i
							s := faulty.NewScript(f)
							w, peer := workerPair(t, s)
							sent := testkit.Async(func() error {
								if res := writeChunks(peer, lay.chunks); res.err != nil {
									return res.err
								}
								return peer.Close()
							})
							r := readUntilErr(w, size)
							require.Equal(t, io.EOF, r.err)
							require.Equal(t, want, r.data)
							require.NoError(t, <-sent)
							require.Equal(t, 1, s.Fired())
						})
					})
				}
			}
		}
	}
}

// TestRefuseDial checks that RefuseDial fails one Dial of its rank.
func TestRefuseDial(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := faulty.NewScript(faulty.Fault{Kind: faulty.RefuseDial, Rank: 2})
		tn := newNet(t, nil)
		tn.connect(s.WrapDialer(tn.n, 1)) // another rank dials as usual
		require.Zero(t, s.Fired())
		d := s.WrapDialer(tn.n, 2)
		c, err := d.Dial(t.Context(), coordAddr)
		require.ErrorIs(t, err, syscall.ECONNREFUSED)
		require.Nil(t, c)
		require.Equal(t, 1, s.Fired())
		w, peer := tn.connect(d) // the next Dial succeeds
		sent := testkit.Async(write(w, frame0))
		require.Equal(t, frame0, readFull(peer, len(frame0)).data)
		require.NoError(t, (<-sent).err)
	})
}

// TestLink checks that a coordinator end learns its link from the handshake
// it reads, and that faults naming a link fire on that link only.
func TestLink(t *testing.T) {
	for _, lay := range []struct {
		name   string
		chunks [][]byte
	}{
		{"whole-frame", [][]byte{handshake(3)}},
		{"header-then-payload", [][]byte{handshake(3)[:headerSize], handshake(3)[headerSize:]}},
	} {
		for _, rd := range []struct {
			name  string
			sizes []int
		}{{"whole", []int{13}}, {"header-then-payload", []int{headerSize, 8}}} {
			t.Run(fmt.Sprintf("case=learn/layout=%s/read=%s", lay.name, rd.name), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					s := faulty.NewScript()
					tn := newNet(t, s)
					w, c := tn.connect(s.WrapDialer(tn.n, 3))
					fc := faulty.ConnOf(c)
					require.Equal(t, -1, fc.Link())
					sent := testkit.Async(func() ioResult { return writeChunks(w, lay.chunks) })
					var got []byte
					for _, n := range rd.sizes {
						r := readFull(c, n)
						require.NoError(t, r.err)
						got = append(got, r.data...)
					}
					require.Equal(t, handshake(3), got)
					require.Equal(t, 3, fc.Link())
					require.NoError(t, (<-sent).err)
				})
			})
		}
	}
	t.Run("case=fault-on-link", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ack := mkFrame(0x09)
			s := faulty.NewScript(
				faulty.Fault{Kind: faulty.Crash, Rank: 0, Link: 2, Dir: faulty.Write}, // the Ack to worker 2
				faulty.Fault{Kind: faulty.Reset, Rank: 0, Link: 3, Dir: faulty.Read, Frame: 1, Offset: 2},
			)
			coord, workers := handshakeAll(t, newNet(t, s), 1, 2, 3)
			for _, r := range []int{1, 2, 3} {
				got := testkit.Async(func() readResult { return readUntilErr(workers[r], 64) })
				_, err := coord[r].Write(ack)
				if r == 2 {
					require.ErrorIs(t, err, net.ErrClosed, "Ack to worker 2")
					res := <-got
					require.Equal(t, io.EOF, res.err)
					require.Empty(t, res.data)
					continue
				}
				require.NoError(t, err, "Ack to worker %d", r)
				require.NoError(t, workers[r].SetReadDeadline(time.Now().Add(time.Second)))
				res := <-got
				require.ErrorIs(t, res.err, os.ErrDeadlineExceeded)
				require.Equal(t, ack, res.data)
			}
			require.Equal(t, 1, s.Fired())
			for _, r := range []int{1, 3} {
				sent := testkit.Async(write(workers[r], frame1))
				require.NoError(t, coord[r].SetReadDeadline(time.Now().Add(time.Second)))
				res := readUntilErr(coord[r], 64)
				if r == 3 {
					require.ErrorIs(t, res.err, syscall.ECONNRESET, "Read from worker 3")
					require.Equal(t, frame1[:2], res.data)
					require.Error(t, (<-sent).err)
					continue
				}
				// Worker 1's frame goes through.
				require.ErrorIs(t, res.err, os.ErrDeadlineExceeded)
				require.Equal(t, frame1, res.data)
				require.NoError(t, (<-sent).err)
			}
			require.Equal(t, 2, s.Fired())
		})
	})
	t.Run("case=any-link-fires-once", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ack := mkFrame(0x09)
			s := faulty.NewScript(faulty.Fault{Kind: faulty.Crash, Rank: 0, Link: -1, Dir: faulty.Write})
			coord, workers := handshakeAll(t, newNet(t, s), 1, 2, 3)
			for _, r := range []int{2, 1, 3} {
				got := testkit.Async(func() readResult { return readFull(workers[r], len(ack)) })
				_, err := coord[r].Write(ack)
				res := <-got
				if r == 2 {
					require.ErrorIs(t, err, net.ErrClosed, "the first Ack written (to worker 2)")
					require.Equal(t, io.EOF, res.err)
					continue
				}
				require.NoError(t, err, "Ack to worker %d: the fault fired already", r)
				require.NoError(t, res.err)
				require.Equal(t, ack, res.data)
			}
			require.Equal(t, 1, s.Fired())
		})
	})
}

// TestCheck checks that Fault.Check and Script.Check name every fault that
// can never fire, and only those.
func TestCheck(t *testing.T) {
	valid := []faulty.Fault{
		{Kind: faulty.Crash, Rank: 0, Link: 2},
		{Kind: faulty.Hang, Rank: 0, Link: -1, Dir: faulty.Read, Frame: 3, Offset: 7},
		{Kind: faulty.Reset, Rank: 3, Link: 0},
		{Kind: faulty.SysTimeout, Rank: 3, Link: -1, Control: true},
		{Kind: faulty.Crash, Rank: 0, Manual: true, WholeRank: true}, // Link plays no part
		{Kind: faulty.Delay, Rank: 1, Delay: time.Millisecond},
		{Kind: faulty.Delay, Rank: 1, Dir: faulty.Read, Delay: time.Millisecond, Acked: true},
		{Kind: faulty.RefuseDial, Rank: 1},
	}
	for _, f := range valid {
		require.NoError(t, f.Check(), "%v", f)
	}
	require.NoError(t, faulty.NewScript(valid...).Check())
	require.NoError(t, faulty.NewScript().Check())
	for _, c := range []struct {
		f    faulty.Fault
		want string
	}{
		{faulty.Fault{Rank: 1}, "unknown kind 0"},
		{faulty.Fault{Kind: faulty.SysTimeout + 1, Rank: 1}, "unknown kind 11"},
		{faulty.Fault{Kind: faulty.Crash, Rank: -1}, "rank -1 is negative"},
		{faulty.Fault{Kind: faulty.Crash, Rank: 0, Link: 0}, "link 0 names no link of the coordinator"},
		{faulty.Fault{Kind: faulty.Crash, Rank: 0, Link: -2}, "link -2 names no link of the coordinator"},
		{faulty.Fault{Kind: faulty.Crash, Rank: 0, Link: 0, WholeRank: true}, "link 0 names no link of the coordinator"},
		{faulty.Fault{Kind: faulty.Crash, Rank: 2, Link: 1}, "link 1 names no link of worker 2"},
		{faulty.Fault{Kind: faulty.Crash, Rank: 2, Frame: -1}, "frame -1 is negative"},
		{faulty.Fault{Kind: faulty.Crash, Rank: 2, Offset: -5}, "offset -5 is negative"},
		{faulty.Fault{Kind: faulty.RefuseDial, Rank: 0, Link: 1}, "the coordinator never dials"},
		{faulty.Fault{Kind: faulty.Delay, Rank: 1}, "a Delay fault needs a positive Delay"},
		{faulty.Fault{Kind: faulty.Hang, Rank: 1, Acked: true}, "Acked is for a Delay"},
	} {
		err := c.f.Check()
		require.ErrorContains(t, err, c.want, "%v", c.f)
		require.ErrorContains(t, err, c.f.String(), "the error names the fault")
	}
	err := faulty.NewScript(valid[0], faulty.Fault{Kind: faulty.Crash, Rank: 0, Link: 0}, valid[1],
		faulty.Fault{Kind: faulty.Crash, Rank: 2, Link: 1}).Check()
	require.ErrorContains(t, err, "fault 1: faulty: fault crash rank=0 link=0")
	require.ErrorContains(t, err, "fault 3: faulty: fault crash rank=2 link=1")
	require.NotContains(t, err.Error(), "fault 0:")
	require.NotContains(t, err.Error(), "fault 2:")
}

// TestManual checks faults that only Script.Fire triggers.
func TestManual(t *testing.T) {
	t.Run("fault=crash", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := faulty.NewScript(faulty.Fault{Kind: faulty.Crash, Rank: 1, Manual: true}) // Write frame 0 offset 0, were it not manual
			w, peer := workerPair(t, s)
			got := testkit.Async(func() readResult { return readUntilErr(peer, 4096) })
			require.NoError(t, writeChunks(w, frames).err, "the stream position of a manual fault does not trigger it")
			require.Zero(t, s.Fired())
			s.Fire(2) // another rank
			require.Zero(t, s.Fired())
			testkit.Blocked(t, got, "peer's Read before Fire")
			start := time.Now()
			s.Fire(1)
			r := testkit.Ready(t, got, "peer's Read after Fire")
			require.Equal(t, io.EOF, r.err)
			require.Equal(t, stream, r.data)
			require.Zero(t, time.Since(start))
			require.Equal(t, 1, s.Fired())
			_, err := w.Write(frame2)
			require.ErrorIs(t, err, net.ErrClosed)
			s.Fire(1) // fired faults do not fire again
			require.Equal(t, 1, s.Fired())
		})
	})
	t.Run("fault=deadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := faulty.NewScript(faulty.Fault{Kind: faulty.Deadline, Rank: 1, Manual: true})
			w, peer := workerPair(t, s)
			got := testkit.Async(func() readResult { return readFull(peer, len(stream)) })
			s.Fire(1)
			n, err := w.Write(frame0)
			require.ErrorIs(t, err, os.ErrDeadlineExceeded)
			require.Zero(t, n)
			require.NoError(t, writeChunks(w, frames).err, "I/O after the Deadline")
			require.Equal(t, stream, (<-got).data)
		})
	})
	for _, dir := range []faulty.Dir{faulty.Write, faulty.Read} {
		t.Run(fmt.Sprintf("fault=corrupt-tag/dir=%v", dir), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := faulty.NewScript(faulty.Fault{Kind: faulty.CorruptTag, Rank: 1, Dir: dir, Manual: true})
				w, peer := workerPair(t, s)
				from, to := w, peer
				if dir == faulty.Read {
					from, to = peer, w
				}
				sent := testkit.Async(write(from, frame0))
				require.Equal(t, frame0, readFull(to, len(frame0)).data)
				require.NoError(t, (<-sent).err)
				s.Fire(1) // the next frame in dir is corrupted
				got := testkit.Async(func() readResult { return readUntilErr(to, 4096) })
				require.NoError(t, writeChunks(from, frames[1:]).err)
				require.NoError(t, from.Close())
				r := <-got
				require.Equal(t, io.EOF, r.err)
				require.Equal(t, corrupted(1, func(h []byte) { h[4] = 0xEE })[len(frame0):], r.data)
				require.Equal(t, 1, s.Fired())
			})
		})
	}
	t.Run("fault=crash/case=link", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := faulty.NewScript(faulty.Fault{Kind: faulty.Crash, Rank: 0, Link: 2, Manual: true})
			coord, workers := handshakeAll(t, newNet(t, s), 1, 2)
			s.Fire(1)
			require.Zero(t, s.Fired())
			s.Fire(0)
			require.Equal(t, 1, s.Fired())
			n, err := workers[2].Read(make([]byte, 1))
			require.Equal(t, io.EOF, err, "worker 2's Read")
			require.Zero(t, n)
			_, err = coord[2].Write(frame2)
			require.ErrorIs(t, err, net.ErrClosed)
			sent := testkit.Async(write(coord[1], frame2))
			require.Equal(t, frame2, readFull(workers[1], len(frame2)).data, "link 1 is untouched")
			require.NoError(t, (<-sent).err)
		})
	})
}

// TestWholeRank checks that a WholeRank fault acts on every end of its rank,
// including ends wrapped later.
func TestWholeRank(t *testing.T) {
	for _, manual := range []bool{false, true} {
		t.Run(fmt.Sprintf("fault=crash/manual=%v", manual), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := faulty.NewScript(faulty.Fault{Kind: faulty.Crash, Rank: 0, Link: 1, Dir: faulty.Write, WholeRank: true, Manual: manual})
				tn := newNet(t, s)
				coord, workers := handshakeAll(t, tn, 1, 2)
				if manual {
					s.Fire(0)
				} else {
					_, err := coord[1].Write(mkFrame(0x09))
					require.ErrorIs(t, err, net.ErrClosed, "the Write that triggers the crash")
				}
				require.Equal(t, 1, s.Fired())
				for _, r := range []int{1, 2} {
					n, err := workers[r].Read(make([]byte, 1))
					require.Equal(t, io.EOF, err, "worker %d's Read", r)
					require.Zero(t, n)
					_, err = coord[r].Read(make([]byte, 1))
					require.ErrorIs(t, err, net.ErrClosed, "coordinator's Read on link %d", r)
				}
				// A new connection to the dead rank is born broken.
				w3, c3 := tn.connect(nil)
				_, err := c3.Write(mkFrame(0x09))
				require.ErrorIs(t, err, net.ErrClosed, "Write on an end accepted after the crash")
				n, err := w3.Read(make([]byte, 1))
				require.Equal(t, io.EOF, err, "new worker's Read")
				require.Zero(t, n)
			})
		})
	}
	t.Run("fault=hang/manual=true", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := faulty.NewScript(faulty.Fault{Kind: faulty.Hang, Rank: 0, Link: 1, WholeRank: true, Manual: true})
			tn := newNet(t, s)
			coord, workers := handshakeAll(t, tn, 1, 2)
			s.Fire(0)
			w3, c3 := tn.connect(nil) // born hung
			coord[3], workers[3] = c3, w3
			for _, r := range []int{1, 2, 3} {
				sent := testkit.Async(write(workers[r], frame2))
				start := time.Now()
				require.NoError(t, coord[r].SetDeadline(start.Add(time.Second)))
				n, err := coord[r].Read(make([]byte, 64))
				require.ErrorIs(t, err, os.ErrDeadlineExceeded, "coordinator's Read on link %d", r)
				require.Zero(t, n)
				require.Equal(t, time.Second, time.Since(start))
				require.NoError(t, coord[r].Close())
				// Silence, not EOF: the worker's Write stalls until its
				// deadline.
				testkit.Blocked(t, sent, fmt.Sprintf("worker %d's Write", r))
				require.NoError(t, workers[r].SetWriteDeadline(time.Now().Add(time.Second)))
				require.ErrorIs(t, (<-sent).err, os.ErrDeadlineExceeded, "worker %d's Write", r)
			}
		})
	})
}

// TestFired checks the count of fired faults.
func TestFired(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := faulty.NewScript(
			faulty.Fault{Kind: faulty.Deadline, Rank: 1, Dir: faulty.Write, Frame: 1},
			faulty.Fault{Kind: faulty.Delay, Rank: 1, Dir: faulty.Write, Frame: 2, Delay: time.Second},
			faulty.Fault{Kind: faulty.Crash, Rank: 5},                   // no such rank here
			faulty.Fault{Kind: faulty.Crash, Rank: 1, Dir: faulty.Read}, // nothing is read
			faulty.Fault{Kind: faulty.Reset, Rank: 1, Manual: true},
		)
		w, peer := workerPair(t, s)
		go readUntilErr(peer, 4096)
		require.Zero(t, s.Fired())
		_, err := w.Write(frame0)
		require.NoError(t, err)
		require.Zero(t, s.Fired(), "no fault at frame 0")
		_, err = w.Write(frame1)
		require.ErrorIs(t, err, os.ErrDeadlineExceeded)
		require.Equal(t, 1, s.Fired())
		require.NoError(t, writeChunks(w, frames[1:]).err)
		require.Equal(t, 2, s.Fired())
		s.Fire(1)
		require.Equal(t, 3, s.Fired())
		s.Fire(1)
		require.Equal(t, 3, s.Fired(), "Fire again")
	})
}
