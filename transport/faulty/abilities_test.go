package faulty_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm/testkit"
	"github.com/starcomm/starcomm/transport"
	"github.com/starcomm/starcomm/transport/faulty"
	"github.com/starcomm/starcomm/transport/pipe"
)

// Tests of the optional abilities a faulty conn passes through
// (transport.Poller, transport.CloseWriter), and of polled I/O under each
// kind of fault, one at a time.

// onlyConn, pollOnly and closeWriteOnly show a pipe conn with fewer
// abilities, so that every combination can be wrapped.
type onlyConn struct{ transport.Conn }

type pollOnly struct {
	transport.Conn
	transport.Poller
}

type closeWriteOnly struct {
	transport.Conn
	transport.CloseWriter
}

// yieldCounter is a Poller whose Yield counts its calls.
type yieldCounter struct {
	*pipe.Conn
	yields int
}

func (c *yieldCounter) Yield() { c.yields++ }

// writeRecorder is a pipe end that records the size of every Write and
// WriteNow made on it.
type writeRecorder struct {
	*pipe.Conn
	sizes []int
}

func (c *writeRecorder) Write(p []byte) (int, error) {
	c.sizes = append(c.sizes, len(p))
	return c.Conn.Write(p)
}

func (c *writeRecorder) WriteNow(p []byte) (int, error) {
	c.sizes = append(c.sizes, len(p))
	return c.Conn.WriteNow(p)
}

// TestWritesPassWhole: with no fault in the way, each frame a caller hands
// over whole reaches the wrapped conn in one write, header and payload
// together (an unbuffered peer's pending Read then takes the frame, not the
// header alone); a write is only cut at the frame ends, and a frame the
// caller splits stays split where the caller split it.
func TestWritesPassWhole(t *testing.T) {
	var split []int
	for _, f := range frames {
		split = append(split, headerSize)
		if len(f) > headerSize {
			split = append(split, len(f)-headerSize)
		}
	}
	whole := []int{len(frame0), len(frame1), len(frame2), len(frame3)}
	want := map[string][]int{
		"whole-frames":         whole,
		"byte-by-byte":         nil, // one inner write per byte
		"header-then-payload":  split,
		"two-frames-per-write": whole,
	}
	for _, poll := range []bool{false, true} {
		for _, lo := range layouts() {
			t.Run(fmt.Sprintf("poll=%v/layout=%s", poll, lo.name), func(t *testing.T) {
				// The pipe buffers the whole stream, so that WriteNow
				// takes each write whole too.
				n := pipe.NewNetwork()
				n.Buffer = len(stream)
				l, err := n.Listen(coordAddr)
				require.NoError(t, err)
				t.Cleanup(func() { l.Close() })
				var rec *writeRecorder
				d := faulty.NewScript().WrapDialer(transport.DialerFunc(func(ctx context.Context, addr string) (transport.Conn, error) {
					c, err := n.Dial(ctx, addr)
					if err != nil {
						return nil, err
					}
					rec = &writeRecorder{Conn: c.(*pipe.Conn)}
					return rec, nil
				}), 1)
				w, peer := (&testNet{t: t, n: n, l: l}).connect(d)
				for _, chunk := range lo.chunks {
					var r ioResult
					if poll {
						r = writeNow(w, chunk)
					} else {
						r.n, r.err = w.Write(chunk)
					}
					require.Equal(t, ioResult{len(chunk), nil}, r)
				}
				require.Equal(t, stream, readFull(peer, len(stream)).data)
				wantSizes := want[lo.name]
				if wantSizes == nil {
					wantSizes = slices.Repeat([]int{1}, len(stream))
				}
				require.Equal(t, wantSizes, rec.sizes, "the writes the wrapped conn saw")
			})
		}
	}
}

// wrapAs wraps a pipe end, shown with the given abilities, as rank 1's end.
func wrapAs(t *testing.T, s *faulty.Script, show func(*pipe.Conn) transport.Conn) (w, peer transport.Conn) {
	t.Helper()
	n := pipe.NewNetwork()
	l, err := n.Listen(coordAddr)
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	d := s.WrapDialer(transport.DialerFunc(func(ctx context.Context, addr string) (transport.Conn, error) {
		c, err := n.Dial(ctx, addr)
		if err != nil {
			return nil, err
		}
		return show(c.(*pipe.Conn)), nil
	}), 1)
	tn := &testNet{t: t, n: n, l: l}
	return tn.connect(d)
}

// TestAbilities: a faulty conn implements transport.Poller and
// transport.CloseWriter exactly when the conn it wraps does, and ConnOf
// finds its *faulty.Conn.
func TestAbilities(t *testing.T) {
	for _, tc := range []struct {
		name             string
		show             func(*pipe.Conn) transport.Conn
		poller, cw       bool
		typeName         string
		wantConnOfIsSelf bool
	}{
		{"none", func(c *pipe.Conn) transport.Conn { return onlyConn{c} }, false, false, "*faulty.Conn", true},
		{"poller", func(c *pipe.Conn) transport.Conn { return pollOnly{c, c} }, true, false, "*faulty.PollConn", false},
		{"close-writer", func(c *pipe.Conn) transport.Conn { return closeWriteOnly{c, c} }, false, true, "*faulty.CloseWriteConn", false},
		{"both", func(c *pipe.Conn) transport.Conn { return c }, true, true, "*faulty.PollCloseWriteConn", false},
	} {
		t.Run("abilities="+tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := faulty.NewScript()
				w, _ := wrapAs(t, s, tc.show)
				require.Equal(t, tc.typeName, fmt.Sprintf("%T", w))
				_, isPoller := w.(transport.Poller)
				require.Equal(t, tc.poller, isPoller, "implements transport.Poller")
				_, isCW := w.(transport.CloseWriter)
				require.Equal(t, tc.cw, isCW, "implements transport.CloseWriter")
				fc := faulty.ConnOf(w)
				require.NotNil(t, fc)
				require.Equal(t, 0, fc.Link(), "a worker's end links to the coordinator")
				if tc.wantConnOfIsSelf {
					require.Same(t, w, transport.Conn(fc))
				}
			})
		})
	}
	t.Run("case=accepted", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := faulty.NewScript()
			tn := newNet(t, s)
			_, c := tn.connect(nil)
			_, ok := c.(*faulty.PollCloseWriteConn)
			require.True(t, ok, "Accept over pipe returned a %T", c)
			require.Equal(t, -1, faulty.ConnOf(c).Link())
		})
	})
	t.Run("case=conn-of-other", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			_, peer := workerPair(t, faulty.NewScript())
			require.Nil(t, faulty.ConnOf(peer), "ConnOf a pipe conn")
		})
	})
	t.Run("case=yield", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var yc *yieldCounter
			w, _ := wrapAs(t, faulty.NewScript(), func(c *pipe.Conn) transport.Conn {
				yc = &yieldCounter{Conn: c}
				return yc
			})
			p := w.(transport.Poller)
			p.Yield()
			p.Yield()
			require.Equal(t, 2, yc.yields, "Yield calls that reached the wrapped conn")
		})
	})
}

// TestCloseWrite: CloseWrite reaches the wrapped conn (the peer reads the
// data, then io.EOF; the end still reads); a crashed or reset end reports
// its fault; a hung end sends nothing, so its peer sees silence; a closed
// end fails with net.ErrClosed.
func TestCloseWrite(t *testing.T) {
	t.Run("case=forwarded", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			w, peer := workerPair(t, faulty.NewScript())
			sent := testkit.Async(func() error {
				if _, err := w.Write(frame0); err != nil {
					return err
				}
				return w.(transport.CloseWriter).CloseWrite()
			})
			r := readUntilErr(peer, 64)
			require.Equal(t, io.EOF, r.err)
			require.Equal(t, frame0, r.data)
			require.NoError(t, <-sent)
			_, err := w.Write(frame2)
			require.ErrorIs(t, err, io.ErrClosedPipe, "Write after CloseWrite (pipe's error)")
			sent = testkit.Async(func() error { _, err := peer.Write(frame1); return err })
			require.Equal(t, frame1, readFull(w, len(frame1)).data, "the half-closed end still reads")
			require.NoError(t, <-sent)
		})
	})
	for _, tc := range []struct {
		kind faulty.Kind
		want error
	}{{faulty.Crash, net.ErrClosed}, {faulty.Reset, syscall.ECONNRESET}} {
		t.Run("fault="+tc.kind.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := faulty.NewScript(faulty.Fault{Kind: tc.kind, Rank: 1, Manual: true})
				w, _ := workerPair(t, s)
				s.Fire(1)
				require.ErrorIs(t, w.(transport.CloseWriter).CloseWrite(), tc.want)
			})
		})
	}
	t.Run("fault=hang", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := faulty.NewScript(faulty.Fault{Kind: faulty.Hang, Rank: 1, Manual: true})
			w, peer := workerPair(t, s)
			s.Fire(1)
			require.NoError(t, w.(transport.CloseWriter).CloseWrite())
			start := time.Now()
			require.NoError(t, peer.SetReadDeadline(start.Add(time.Second)))
			_, err := peer.Read(make([]byte, 1))
			require.ErrorIs(t, err, os.ErrDeadlineExceeded, "the peer sees silence, not EOF")
			require.Equal(t, time.Second, time.Since(start))
		})
	})
	t.Run("case=after-close", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			w, _ := workerPair(t, faulty.NewScript())
			require.NoError(t, w.Close())
			require.ErrorIs(t, w.(transport.CloseWriter).CloseWrite(), net.ErrClosed)
		})
	})
}

func readNow(c transport.Conn, size int) ioResult {
	n, err := c.(transport.Poller).ReadNow(make([]byte, size))
	return ioResult{n, err}
}

func writeNow(c transport.Conn, p []byte) ioResult {
	n, err := c.(transport.Poller).WriteNow(p)
	return ioResult{n, err}
}

// TestPolledHang: on a hung end ReadNow and WriteNow return 0 and nil until
// the deadline has passed, then os.ErrDeadlineExceeded; after Close,
// net.ErrClosed; the bytes the peer offers stay where they are.
func TestPolledHang(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := faulty.NewScript(faulty.Fault{Kind: faulty.Hang, Rank: 1, Dir: faulty.Write, Frame: 1, Offset: 50})
		w, peer := workerPair(t, s)
		got := testkit.Async(func() readResult { return readFull(peer, len(frame0)+50) })
		synctest.Wait()
		require.Equal(t, ioResult{len(frame0), nil}, writeNow(w, frame0))
		synctest.Wait()
		require.Equal(t, ioResult{50, nil}, writeNow(w, frame1), "WriteNow up to the hang")
		require.Equal(t, stream[:len(frame0)+50], (<-got).data)
		require.Equal(t, 1, s.Fired())
		sent := testkit.Async(write(peer, frame2))
		synctest.Wait()
		start := time.Now()
		require.NoError(t, w.SetDeadline(start.Add(2*time.Second)))
		for range 3 {
			require.Equal(t, ioResult{0, nil}, writeNow(w, frame1[50:]), "WriteNow on a hung end")
			require.Equal(t, ioResult{0, nil}, readNow(w, 64), "ReadNow on a hung end, the peer's Write pending")
			time.Sleep(time.Second / 2)
		}
		time.Sleep(time.Second / 2)
		require.Equal(t, 2*time.Second, time.Since(start))
		r := writeNow(w, frame1[50:])
		require.ErrorIs(t, r.err, os.ErrDeadlineExceeded, "WriteNow past the deadline")
		require.Zero(t, r.n)
		r = readNow(w, 64)
		require.ErrorIs(t, r.err, os.ErrDeadlineExceeded, "ReadNow past the deadline")
		require.Zero(t, r.n)
		testkit.Blocked(t, sent, "peer's Write to a hung end")

		// A deadline cleared: nothing again, until Close.
		require.NoError(t, w.SetDeadline(time.Time{}))
		require.Equal(t, ioResult{0, nil}, readNow(w, 64))
		require.NoError(t, w.Close())
		require.ErrorIs(t, readNow(w, 64).err, net.ErrClosed, "ReadNow after Close")
		require.ErrorIs(t, writeNow(w, frame2).err, net.ErrClosed, "WriteNow after Close")
		require.NoError(t, peer.SetWriteDeadline(time.Now().Add(time.Second)))
		require.ErrorIs(t, (<-sent).err, os.ErrDeadlineExceeded, "the peer's Write stalls: silence")
	})
}

// TestPolledDelay: a Delay makes ReadNow and WriteNow return 0 and nil until
// it has elapsed, then the stream goes on; a blocking call in the meantime
// waits for the rest of it.
func TestPolledDelay(t *testing.T) {
	const delay = 3 * time.Second
	t.Run("dir=write", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := faulty.NewScript(faulty.Fault{Kind: faulty.Delay, Rank: 1, Dir: faulty.Write, Frame: 1, Offset: 50, Delay: delay})
			w, peer := workerPair(t, s)
			got := testkit.Async(func() readResult { return readUntilErr(peer, 4096) })
			synctest.Wait()
			require.Equal(t, ioResult{len(frame0), nil}, writeNow(w, frame0))
			synctest.Wait()
			start := time.Now()
			require.Equal(t, ioResult{50, nil}, writeNow(w, frame1), "WriteNow up to the Delay")
			synctest.Wait()
			time.Sleep(delay - time.Nanosecond)
			require.Equal(t, ioResult{0, nil}, writeNow(w, frame1[50:]), "WriteNow just before the Delay ends")
			time.Sleep(time.Nanosecond)
			require.Equal(t, ioResult{len(frame1) - 50, nil}, writeNow(w, frame1[50:]), "WriteNow once the Delay ended")
			require.Equal(t, delay, time.Since(start))
			require.NoError(t, writeChunks(w, frames[2:]).err)
			require.NoError(t, w.Close())
			r := <-got
			require.Equal(t, io.EOF, r.err)
			require.Equal(t, stream, r.data)
		})
	})
	t.Run("dir=read/case=then-blocking", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := faulty.NewScript(faulty.Fault{Kind: faulty.Delay, Rank: 1, Dir: faulty.Read, Frame: 1, Offset: 50, Delay: delay})
			w, peer := workerPair(t, s)
			sent := testkit.Async(func() ioResult { return writeChunks(peer, frames) })
			require.Equal(t, stream[:len(frame0)+50], readFull(w, len(frame0)+50).data)
			start := time.Now()
			require.Equal(t, ioResult{0, nil}, readNow(w, 64), "ReadNow at the Delay")
			time.Sleep(time.Second)
			require.Equal(t, ioResult{0, nil}, readNow(w, 64), "ReadNow during the Delay")
			// A blocking Read waits for the rest of the Delay, not more.
			rest := readFull(w, len(stream)-len(frame0)-50)
			require.NoError(t, rest.err)
			require.Equal(t, stream[len(frame0)+50:], rest.data)
			require.Equal(t, delay, time.Since(start))
			require.NoError(t, (<-sent).err)
		})
	})
}

// TestPolledManual: faults that Script.Fire triggers reach polled I/O as
// they reach Read and Write.
func TestPolledManual(t *testing.T) {
	for _, tc := range []struct {
		kind faulty.Kind
		want error
	}{{faulty.Crash, net.ErrClosed}, {faulty.Reset, syscall.ECONNRESET}} {
		t.Run("fault="+tc.kind.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := faulty.NewScript(faulty.Fault{Kind: tc.kind, Rank: 1, Manual: true})
				w, peer := workerPair(t, s)
				require.Equal(t, ioResult{0, nil}, readNow(w, 8))
				s.Fire(1)
				require.ErrorIs(t, readNow(w, 8).err, tc.want)
				require.ErrorIs(t, writeNow(w, frame0).err, tc.want)
				require.Equal(t, ioResult{0, io.EOF}, readNow(peer, 8), "the peer's ReadNow")
			})
		})
	}
	t.Run("fault=deadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := faulty.NewScript(faulty.Fault{Kind: faulty.Deadline, Rank: 1, Manual: true})
			w, peer := workerPair(t, s)
			s.Fire(1)
			r := writeNow(w, frame0)
			require.ErrorIs(t, r.err, os.ErrDeadlineExceeded, "the next polled I/O")
			require.Zero(t, r.n)
			got := testkit.Async(func() readResult { return readFull(peer, len(frame0)) })
			synctest.Wait()
			require.Equal(t, ioResult{len(frame0), nil}, writeNow(w, frame0), "the one after")
			require.Equal(t, frame0, (<-got).data)
		})
	})
	t.Run("fault=hang", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := faulty.NewScript(faulty.Fault{Kind: faulty.Hang, Rank: 1, Manual: true})
			w, peer := workerPair(t, s)
			sent := testkit.Async(write(peer, frame0))
			synctest.Wait()
			s.Fire(1)
			require.Equal(t, ioResult{0, nil}, readNow(w, 64), "ReadNow on a hung end, data offered")
			require.NoError(t, w.SetReadDeadline(time.Now()))
			require.ErrorIs(t, readNow(w, 64).err, os.ErrDeadlineExceeded)
			require.NoError(t, w.Close())
			require.NoError(t, peer.SetWriteDeadline(time.Now()))
			require.ErrorIs(t, (<-sent).err, os.ErrDeadlineExceeded)
		})
	})
	t.Run("fault=corrupt-tag", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := faulty.NewScript(faulty.Fault{Kind: faulty.CorruptTag, Rank: 1, Dir: faulty.Read, Manual: true})
			w, peer := workerPair(t, s)
			s.Fire(1)
			sent := testkit.Async(write(peer, frame2))
			synctest.Wait()
			buf := make([]byte, 64)
			n, err := w.(transport.Poller).ReadNow(buf)
			require.NoError(t, err)
			want := mkFrame(0xEE, []byte{0x42})
			require.Equal(t, want[:n], buf[:n])
			rest := readFull(w, len(frame2)-n)
			require.Equal(t, want, append(buf[:n:n], rest.data...))
			require.NoError(t, (<-sent).err)
		})
	})
}

// TestPolledWholeRank: a WholeRank fault that polled I/O triggers acts on
// every end of the rank.
func TestPolledWholeRank(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := faulty.NewScript(faulty.Fault{Kind: faulty.Crash, Rank: 0, Link: 1, Dir: faulty.Write, WholeRank: true})
		tn := newNet(t, s)
		coord, workers := handshakeAll(t, tn, 1, 2)
		r := writeNow(coord[1], mkFrame(0x09))
		require.ErrorIs(t, r.err, net.ErrClosed, "the WriteNow that triggers the crash")
		require.Zero(t, r.n)
		require.Equal(t, 1, s.Fired())
		for _, rk := range []int{1, 2} {
			require.Equal(t, ioResult{0, io.EOF}, readNow(workers[rk], 8), "worker %d's ReadNow", rk)
			require.ErrorIs(t, readNow(coord[rk], 8).err, net.ErrClosed, "coordinator's ReadNow on link %d", rk)
		}
		_, c3 := tn.connect(nil)
		require.ErrorIs(t, writeNow(c3, mkFrame(0x09)).err, net.ErrClosed, "WriteNow on an end accepted after the crash")
	})
}

// TestPolledHeaderSplit: a corrupted header goes out (or comes in)
// corrupted however polled and blocking calls split it.
func TestPolledHeaderSplit(t *testing.T) {
	for _, c := range corruptions() {
		t.Run("fault="+c.name+"/dir=write", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := c.fault
				f.Rank, f.Dir, f.Frame = 1, faulty.Write, 1
				s := faulty.NewScript(f)
				n := pipe.NewNetwork()
				n.Buffer = 3 // WriteNow takes 3 bytes of a header
				l, err := n.Listen(coordAddr)
				require.NoError(t, err)
				t.Cleanup(func() { l.Close() })
				w, peer := (&testNet{t: t, n: n, l: l}).connect(s.WrapDialer(n, 1))
				got := testkit.Async(func() readResult { return readFull(peer, len(frame0)) })
				require.NoError(t, writeChunks(w, frames[:1]).err)
				require.Equal(t, frame0, (<-got).data)
				require.Equal(t, ioResult{3, nil}, writeNow(w, frame1), "WriteNow into the 3-byte buffer")
				require.Equal(t, 1, s.Fired())
				got = testkit.Async(func() readResult { return readUntilErr(peer, 4096) })
				require.NoError(t, writeChunks(w, [][]byte{frame1[3:], frame2, frame3}).err)
				require.NoError(t, w.Close())
				r := <-got
				require.Equal(t, io.EOF, r.err)
				require.Equal(t, corrupted(1, c.edit)[len(frame0):], r.data)
			})
		})
		t.Run("fault="+c.name+"/dir=read", func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := c.fault
				f.Rank, f.Dir, f.Frame = 1, faulty.Read, 1
				s := faulty.NewScript(f)
				w, peer := workerPair(t, s)
				var bytewise [][]byte
				for i := range stream {
					bytewise = append(bytewise, stream[i:i+1])
				}
				sent := testkit.Async(func() error {
					if r := writeChunks(peer, bytewise); r.err != nil {
						return r.err
					}
					return peer.Close()
				})
				require.Equal(t, frame0, readFull(w, len(frame0)).data)
				// Two header bytes taken by ReadNow, held back.
				for range 2 {
					synctest.Wait()
					require.Equal(t, ioResult{0, nil}, readNow(w, 64), "ReadNow of a header byte")
				}
				r := readUntilErr(w, 4096)
				require.Equal(t, io.EOF, r.err)
				require.Equal(t, corrupted(1, c.edit)[len(frame0):], r.data)
				require.NoError(t, <-sent)
				require.Equal(t, 1, s.Fired())
			})
		})
	}
}

// TestPolledDeadlineHeldBytes: a passed read deadline fails ReadNow even
// when faulty holds bytes back (as the wrapped conn's ReadNow fails with
// data there); clearing it hands them out.
func TestPolledDeadlineHeldBytes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := faulty.NewScript(faulty.Fault{Kind: faulty.CorruptTag, Rank: 1, Dir: faulty.Read, Frame: 0})
		w, peer := workerPair(t, s)
		sent := testkit.Async(write(peer, frame0))
		synctest.Wait()
		buf := make([]byte, 1)
		n, err := w.(transport.Poller).ReadNow(buf)
		require.NoError(t, err)
		require.Equal(t, 1, n, "the first header byte; four held back")
		require.NoError(t, w.SetReadDeadline(time.Now()))
		r := readNow(w, 64)
		require.ErrorIs(t, r.err, os.ErrDeadlineExceeded)
		require.Zero(t, r.n)
		require.NoError(t, w.SetReadDeadline(time.Time{}))
		rest := readFull(w, len(frame0)-1)
		require.NoError(t, rest.err)
		want := corrupted(0, func(h []byte) { h[4] = 0xEE })[:len(frame0)]
		require.Equal(t, want, append(buf, rest.data...))
		require.NoError(t, (<-sent).err)
	})
}

// TestUnread: a faulty conn counts the wrapped conn's unread bytes, none
// while its end hangs (its reads deliver nothing), and over a conn that
// cannot count them fails with errors.ErrUnsupported.
func TestUnread(t *testing.T) {
	t.Run("case=counted", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := faulty.NewScript(faulty.Fault{Kind: faulty.Hang, Rank: 1, Manual: true})
			w, peer := workerPair(t, s)
			uc, ok := w.(transport.UnreadCounter)
			require.True(t, ok, "%T implements transport.UnreadCounter", w)
			n, err := uc.Unread()
			require.NoError(t, err)
			require.Equal(t, 0, n, "a fresh connection")
			wrote := testkit.Async(func() error { _, err := peer.Write([]byte("twelve bytes")); return err })
			synctest.Wait()
			n, err = uc.Unread()
			require.NoError(t, err)
			require.Equal(t, 12, n, "the peer's bytes, offered")
			_, err = io.ReadFull(w, make([]byte, 5))
			require.NoError(t, err)
			n, _ = uc.Unread()
			require.Equal(t, 7, n, "after reading 5")
			s.Fire(1)
			n, err = uc.Unread()
			require.NoError(t, err)
			require.Equal(t, 0, n, "hung")
			require.NoError(t, peer.Close())
			require.Error(t, <-wrote, "the peer's Write, cut by its Close")
		})
	})
	t.Run("case=unsupported", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			w, _ := wrapAs(t, faulty.NewScript(), func(c *pipe.Conn) transport.Conn { return onlyConn{c} })
			_, err := w.(transport.UnreadCounter).Unread()
			require.ErrorIs(t, err, errors.ErrUnsupported)
		})
	})
}
