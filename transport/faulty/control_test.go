package faulty_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strings"
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

// Tests of control conns: besides its data conn, each worker opens a second
// conn to the coordinator whose first frame (tag 0x0C, payload rank and
// size) and its Ack (the same frame back) are followed by a control
// session's bytes in their own framing (smux), which the tests simulate
// with random bytes.

// controlFrame is the first frame of a control conn, and its Ack.
func controlFrame(rank int) []byte { return mkFrame(0x0C, be32(uint32(rank)), be32(4)) }

// dataAck is the coordinator's answer to a Handshake.
var dataAck = mkFrame(0x09, be32(4))

// bufferModes are the pipe networks the tests run over.
var bufferModes = []int{0, 64 << 10}

// newNetBuffered is newNet over a network whose directions buffer buffer
// bytes.
func newNetBuffered(t *testing.T, s *faulty.Script, buffer int) *testNet {
	t.Helper()
	n := pipe.NewNetwork()
	n.Buffer = buffer
	pl, err := n.Listen(coordAddr)
	require.NoError(t, err)
	var l transport.Listener = pl
	if s != nil {
		l = s.WrapListener(pl)
	}
	t.Cleanup(func() { l.Close() })
	return &testNet{t: t, n: n, l: l}
}

// worker holds the four ends of one worker's two conns: the worker's
// (wData, wCtl) and the coordinator's (cData, cCtl).
type worker struct {
	rank                     int
	wData, cData, wCtl, cCtl transport.Conn
}

// dialWorker opens rank's data and control conns through s (control first
// when controlFirst), without any frame passed yet.
func dialWorker(t *testing.T, tn *testNet, s *faulty.Script, rank int, controlFirst bool) *worker {
	t.Helper()
	d := s.WrapDialer(tn.n, rank)
	w := &worker{rank: rank}
	if controlFirst {
		w.wCtl, w.cCtl = tn.connect(d)
		w.wData, w.cData = tn.connect(d)
	} else {
		w.wData, w.cData = tn.connect(d)
		w.wCtl, w.cCtl = tn.connect(d)
	}
	return w
}

// leg is what one transfer observed: the writer's Write and what the reader
// read.
type leg struct {
	sent ioResult
	got  readResult
}

// pass writes p on from and reads len(p) bytes on to, each bounded by a
// deadline a second away (cleared afterwards), so that a hung or broken
// end fails the transfer instead of blocking it.
func pass(from, to transport.Conn, p []byte) leg {
	dl := time.Now().Add(time.Second)
	_ = from.SetWriteDeadline(dl)
	_ = to.SetReadDeadline(dl)
	sent := testkit.Async(write(from, p))
	got := readFull(to, len(p))
	l := leg{<-sent, got}
	_ = from.SetWriteDeadline(time.Time{})
	_ = to.SetReadDeadline(time.Time{})
	return l
}

// requirePasses checks that p goes from from to to intact.
func requirePasses(t *testing.T, from, to transport.Conn, p []byte, what string) {
	t.Helper()
	l := pass(from, to, p)
	require.NoError(t, l.sent.err, "%s: Write", what)
	require.NoError(t, l.got.err, "%s: Read", what)
	require.Equal(t, p, l.got.data, "%s: bytes", what)
}

// firstFrames passes a worker's first frames both ways on both conns (the
// data conn's first when dataFirst).
func (w *worker) firstFrames(t *testing.T, dataFirst bool) {
	t.Helper()
	data := func() {
		requirePasses(t, w.wData, w.cData, handshake(w.rank), fmt.Sprintf("worker %d's Handshake", w.rank))
		requirePasses(t, w.cData, w.wData, dataAck, fmt.Sprintf("Ack to worker %d", w.rank))
	}
	ctl := func() {
		requirePasses(t, w.wCtl, w.cCtl, controlFrame(w.rank), fmt.Sprintf("worker %d's Control frame", w.rank))
		requirePasses(t, w.cCtl, w.wCtl, controlFrame(w.rank), fmt.Sprintf("control Ack to worker %d", w.rank))
	}
	if dataFirst {
		data()
		ctl()
	} else {
		ctl()
		data()
	}
}

// requireAttributed checks the link and kind each end of w has learnt.
func (w *worker) requireAttributed(t *testing.T) {
	t.Helper()
	for _, e := range []struct {
		name    string
		c       transport.Conn
		link    int
		control bool
	}{
		{"worker's data end", w.wData, 0, false},
		{"worker's control end", w.wCtl, 0, true},
		{"coordinator's data end", w.cData, w.rank, false},
		{"coordinator's control end", w.cCtl, w.rank, true},
	} {
		fc := faulty.ConnOf(e.c)
		require.NotNil(t, fc, "%s of worker %d is a %T", e.name, w.rank, e.c)
		require.Equal(t, e.link, fc.Link(), "Link of the %s of worker %d", e.name, w.rank)
		require.Equal(t, e.control, fc.Control(), "Control of the %s of worker %d", e.name, w.rank)
	}
}

// ends returns w's conns as (faulty end, peer) pairs for the worker's side
// (rank != 0) or the coordinator's (rank 0), with whether each is the
// control conn.
func (w *worker) ends(rank int) []struct {
	end, peer transport.Conn
	control   bool
} {
	type e = struct {
		end, peer transport.Conn
		control   bool
	}
	if rank == 0 {
		return []e{{w.cData, w.wData, false}, {w.cCtl, w.wCtl, true}}
	}
	return []e{{w.wData, w.cData, false}, {w.wCtl, w.cCtl, true}}
}

// requireCrashed checks that end was closed by a Crash: its own I/O fails
// with net.ErrClosed, and its peer reads EOF.
func requireCrashed(t *testing.T, end, peer transport.Conn, what string) {
	t.Helper()
	_, err := end.Write([]byte{1})
	require.ErrorIs(t, err, net.ErrClosed, "%s: Write", what)
	_, err = end.Read(make([]byte, 1))
	require.ErrorIs(t, err, net.ErrClosed, "%s: Read", what)
	_ = peer.SetReadDeadline(time.Now().Add(time.Second))
	n, err := peer.Read(make([]byte, 1))
	require.Equal(t, io.EOF, err, "%s: the peer's Read", what)
	require.Zero(t, n)
	_ = peer.SetReadDeadline(time.Time{})
}

// requireIntact checks that bytes go both ways between end and peer.
func requireIntact(t *testing.T, end, peer transport.Conn, what string) {
	t.Helper()
	requirePasses(t, end, peer, frame2, what+": from the faulty end")
	requirePasses(t, peer, end, frame3, what+": to the faulty end")
}

// requireHung checks that end is hung: its Read and Write time out on their
// deadline, exactly, and its peer's Read sees silence.
func requireHung(t *testing.T, end, peer transport.Conn, what string) {
	t.Helper()
	start := time.Now()
	require.NoError(t, end.SetDeadline(start.Add(time.Second)))
	wr := testkit.Async(write(end, frame2))
	rd := testkit.Async(read(end, 64))
	require.NoError(t, peer.SetReadDeadline(start.Add(2*time.Second)))
	n, err := peer.Read(make([]byte, 1))
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "%s: the peer's Read sees silence", what)
	require.Zero(t, n)
	for _, r := range []ioResult{<-wr, <-rd} {
		require.ErrorIs(t, r.err, os.ErrDeadlineExceeded, "%s: the hung end's I/O", what)
		require.Zero(t, r.n)
	}
	require.Equal(t, 2*time.Second, time.Since(start))
	require.NoError(t, end.SetDeadline(time.Time{}))
	require.NoError(t, peer.SetReadDeadline(time.Time{}))
}

// TestControlAttribution: data and control conns are told apart on both
// sides, and the coordinator's ends learn their link from the Handshake or
// the Control frame, whatever the order of the conns, the buffering, and
// however the first frames are cut; reading ahead (when a fault is placed
// in frame 0) changes none of it.
func TestControlAttribution(t *testing.T) {
	scripts := []struct {
		name   string
		faults []faulty.Fault
	}{
		{"none", nil},
		// Faults for a link that does not exist: the coordinator's ends
		// read ahead of frame 0 up to the rank, without effect.
		{"read-ahead", []faulty.Fault{
			{Kind: faulty.Crash, Rank: 0, Link: 9, Dir: faulty.Read, Frame: 0, Offset: 0, Control: true},
			{Kind: faulty.Crash, Rank: 0, Link: 9, Dir: faulty.Read, Frame: 0, Offset: 1},
			{Kind: faulty.CorruptTag, Rank: 0, Link: 9, Dir: faulty.Read, Frame: 0, Control: true},
		}},
	}
	for _, buffer := range bufferModes {
		for _, sc := range scripts {
			for _, controlFirst := range []bool{false, true} {
				t.Run(fmt.Sprintf("buffer=%d/script=%s/control-first=%v", buffer, sc.name, controlFirst), func(t *testing.T) {
					synctest.Test(t, func(t *testing.T) {
						s := faulty.NewScript(sc.faults...)
						tn := newNetBuffered(t, s, buffer)
						var ws []*worker
						for _, r := range []int{1, 2, 3} {
							w := dialWorker(t, tn, s, r, controlFirst)
							for _, c := range []transport.Conn{w.cData, w.cCtl} {
								require.Equal(t, -1, faulty.ConnOf(c).Link(), "an accepted end's link before its first frame")
								require.False(t, faulty.ConnOf(c).Control())
							}
							ws = append(ws, w)
						}
						for i, w := range ws {
							w.firstFrames(t, i%2 == 0)
							w.requireAttributed(t)
						}
						require.Zero(t, s.Fired())
					})
				})
			}
		}
	}
	// The Control frame cut every way, read every way, blocking or
	// polled.
	cf := controlFrame(2)
	cuts := []layout{
		{"whole", [][]byte{cf}},
		{"header-then-payload", [][]byte{cf[:headerSize], cf[headerSize:]}},
		{"byte-by-byte", nil},
	}
	for i := range cf {
		cuts[2].chunks = append(cuts[2].chunks, cf[i:i+1])
	}
	for _, sc := range scripts {
		for _, cut := range cuts {
			for _, size := range []int{1, 3, 64} {
				for _, polled := range []bool{false, true} {
					t.Run(fmt.Sprintf("case=control-frame/script=%s/layout=%s/read=%d/polled=%v", sc.name, cut.name, size, polled), func(t *testing.T) {
						synctest.Test(t, func(t *testing.T) {
							s := faulty.NewScript(sc.faults...)
							tn := newNetBuffered(t, s, 0)
							wc, cc := tn.connect(s.WrapDialer(tn.n, 2))
							sent := testkit.Async(func() ioResult { return writeChunks(wc, cut.chunks) })
							got := readSome(t, cc, len(cf), size, polled)
							require.NoError(t, got.err)
							require.Equal(t, cf, got.data)
							require.NoError(t, (<-sent).err)
							require.Equal(t, 2, faulty.ConnOf(cc).Link())
							require.True(t, faulty.ConnOf(cc).Control())
							require.True(t, faulty.ConnOf(wc).Control())
						})
					})
				}
			}
		}
	}
}

// readSome reads n bytes from c, size at most per call, with Read or, when
// polled, ReadNow (letting the other goroutines run when it finds nothing);
// it stops at the first error.
func readSome(t *testing.T, c transport.Conn, n, size int, polled bool) readResult {
	t.Helper()
	var data []byte
	buf := make([]byte, size)
	for idle := 0; len(data) < n; {
		b := buf[:min(size, n-len(data))]
		var k int
		var err error
		if polled {
			k, err = c.(transport.Poller).ReadNow(b)
			if k == 0 && err == nil {
				idle++
				require.Less(t, idle, 1000, "ReadNow finds nothing for good")
				synctest.Wait()
				continue
			}
		} else {
			k, err = c.Read(b)
		}
		data = append(data, b[:k]...)
		if err != nil {
			return readResult{data, err}
		}
	}
	return readResult{data, nil}
}

// TestControlFaultTargets: a fault with Control acts on control conns only,
// one without on data conns only, whether Script.Fire or a stream position
// in frame 0 triggers it, on either side.
func TestControlFaultTargets(t *testing.T) {
	type hitFunc func(rank int, control bool) bool
	// Manual faults: fired once every first frame has passed.
	for _, tc := range []struct {
		name  string
		fault faulty.Fault
		hit   hitFunc // the conns of worker rank that the fault closes
	}{
		{"worker-control", faulty.Fault{Kind: faulty.Crash, Rank: 1, Manual: true, Control: true},
			func(r int, c bool) bool { return r == 1 && c }},
		{"worker-data", faulty.Fault{Kind: faulty.Crash, Rank: 1, Manual: true},
			func(r int, c bool) bool { return r == 1 && !c }},
		{"coordinator-control-link-2", faulty.Fault{Kind: faulty.Crash, Rank: 0, Link: 2, Manual: true, Control: true},
			func(r int, c bool) bool { return r == 2 && c }},
		{"coordinator-control-every-link", faulty.Fault{Kind: faulty.Crash, Rank: 0, Link: -1, Manual: true, Control: true},
			func(r int, c bool) bool { return c }},
		{"coordinator-data-every-link", faulty.Fault{Kind: faulty.Crash, Rank: 0, Link: -1, Manual: true},
			func(r int, c bool) bool { return !c }},
	} {
		for _, buffer := range bufferModes {
			t.Run(fmt.Sprintf("trigger=fire/target=%s/buffer=%d", tc.name, buffer), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					s := faulty.NewScript(tc.fault)
					tn := newNetBuffered(t, s, buffer)
					ws := []*worker{dialWorker(t, tn, s, 1, false), dialWorker(t, tn, s, 2, true)}
					for _, w := range ws {
						w.firstFrames(t, w.rank == 1)
						w.requireAttributed(t)
					}
					s.Fire(tc.fault.Rank)
					require.Equal(t, 1, s.Fired())
					for _, w := range ws {
						for _, e := range w.ends(tc.fault.Rank) {
							what := fmt.Sprintf("worker %d, control=%v", w.rank, e.control)
							if tc.hit(w.rank, e.control) {
								requireCrashed(t, e.end, e.peer, what)
							} else {
								requireIntact(t, e.end, e.peer, what)
							}
						}
					}
				})
			})
		}
	}

	// Faults placed in frame 0: the first frame of each conn passes or
	// fails as the fault says, and the others pass.
	cf1 := controlFrame(1)
	cf2 := controlFrame(2)
	for _, tc := range []struct {
		name  string
		fault faulty.Fault
		// run passes the first frames of workers 1 and 2 (ws) and checks
		// the fault's effect.
		run func(t *testing.T, ws []*worker)
	}{
		{"worker-control-write", faulty.Fault{Kind: faulty.Crash, Rank: 1, Dir: faulty.Write, Frame: 0, Offset: 0, Control: true},
			func(t *testing.T, ws []*worker) {
				w := ws[0]
				requirePasses(t, w.wData, w.cData, handshake(1), "Handshake")
				l := pass(w.wCtl, w.cCtl, cf1)
				require.ErrorIs(t, l.sent.err, net.ErrClosed, "the Control frame's Write")
				require.Zero(t, l.sent.n)
				require.Equal(t, io.EOF, l.got.err, "the coordinator's Read of the Control frame")
				require.Empty(t, l.got.data)
				requirePasses(t, w.cData, w.wData, dataAck, "Ack")
			}},
		{"worker-data-write", faulty.Fault{Kind: faulty.Crash, Rank: 1, Dir: faulty.Write, Frame: 0, Offset: 7},
			func(t *testing.T, ws []*worker) {
				w := ws[0]
				requirePasses(t, w.wCtl, w.cCtl, cf1, "Control frame") // written first: not the data conn
				requirePasses(t, w.cCtl, w.wCtl, cf1, "control Ack")
				l := pass(w.wData, w.cData, handshake(1))
				require.ErrorIs(t, l.sent.err, net.ErrClosed, "the Handshake's Write")
				require.Equal(t, 7, l.sent.n)
				require.Equal(t, io.ErrUnexpectedEOF, l.got.err)
				require.Equal(t, handshake(1)[:7], l.got.data)
			}},
		{"worker-control-read-ack", faulty.Fault{Kind: faulty.Reset, Rank: 2, Dir: faulty.Read, Frame: 0, Offset: 5, Control: true},
			func(t *testing.T, ws []*worker) {
				w := ws[1]
				requirePasses(t, w.wData, w.cData, handshake(2), "Handshake")
				requirePasses(t, w.cData, w.wData, dataAck, "Ack") // read first: not the control conn
				requirePasses(t, w.wCtl, w.cCtl, cf2, "Control frame")
				l := pass(w.cCtl, w.wCtl, cf2)
				require.ErrorIs(t, l.got.err, syscall.ECONNRESET, "the worker's Read of the control Ack")
				require.Equal(t, cf2[:5], l.got.data)
			}},
		{"coordinator-control-read-link-2", faulty.Fault{Kind: faulty.Reset, Rank: 0, Link: 2, Dir: faulty.Read, Frame: 0, Offset: 2, Control: true},
			func(t *testing.T, ws []*worker) {
				for _, w := range ws {
					requirePasses(t, w.wData, w.cData, handshake(w.rank), "Handshake")
				}
				requirePasses(t, ws[0].wCtl, ws[0].cCtl, cf1, "worker 1's Control frame")
				l := pass(ws[1].wCtl, ws[1].cCtl, cf2)
				require.ErrorIs(t, l.got.err, syscall.ECONNRESET, "the coordinator's Read of worker 2's Control frame")
				require.Equal(t, cf2[:2], l.got.data)
				require.Equal(t, 2, faulty.ConnOf(ws[1].cCtl).Link(), "read ahead: the link is known")
			}},
		{"coordinator-data-read-any-link", faulty.Fault{Kind: faulty.Crash, Rank: 0, Link: -1, Dir: faulty.Read, Frame: 0, Offset: 0},
			func(t *testing.T, ws []*worker) {
				w := ws[0]
				// The control conn's frame is read first: not the data
				// conn, so it passes.
				requirePasses(t, w.wCtl, w.cCtl, cf1, "Control frame")
				l := pass(w.wData, w.cData, handshake(1))
				require.ErrorIs(t, l.got.err, net.ErrClosed, "the coordinator's Read of the Handshake")
				require.Empty(t, l.got.data)
				requirePasses(t, ws[1].wData, ws[1].cData, handshake(2), "worker 2's Handshake") // fired once
			}},
		{"coordinator-control-write-ack", faulty.Fault{Kind: faulty.Crash, Rank: 0, Link: 1, Dir: faulty.Write, Frame: 0, Control: true},
			func(t *testing.T, ws []*worker) {
				w := ws[0]
				requirePasses(t, w.wData, w.cData, handshake(1), "Handshake")
				requirePasses(t, w.wCtl, w.cCtl, cf1, "Control frame")
				requirePasses(t, w.cData, w.wData, dataAck, "Ack")
				l := pass(w.cCtl, w.wCtl, cf1)
				require.ErrorIs(t, l.sent.err, net.ErrClosed, "the control Ack's Write")
				require.Equal(t, io.EOF, l.got.err)
			}},
		{"coordinator-data-write-ack", faulty.Fault{Kind: faulty.Crash, Rank: 0, Link: 1, Dir: faulty.Write, Frame: 0},
			func(t *testing.T, ws []*worker) {
				w := ws[0]
				requirePasses(t, w.wCtl, w.cCtl, cf1, "Control frame")
				requirePasses(t, w.cCtl, w.wCtl, cf1, "control Ack")
				requirePasses(t, w.wData, w.cData, handshake(1), "Handshake")
				l := pass(w.cData, w.wData, dataAck)
				require.ErrorIs(t, l.sent.err, net.ErrClosed, "the Ack's Write")
				require.Equal(t, io.EOF, l.got.err)
			}},
	} {
		for _, buffer := range bufferModes {
			t.Run(fmt.Sprintf("trigger=frame-0/target=%s/buffer=%d", tc.name, buffer), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					s := faulty.NewScript(tc.fault)
					tn := newNetBuffered(t, s, buffer)
					ws := []*worker{dialWorker(t, tn, s, 1, true), dialWorker(t, tn, s, 2, false)}
					tc.run(t, ws)
					require.Equal(t, 1, s.Fired())
				})
			})
		}
	}
}

// TestControlWholeRank: a whole-rank Crash or Hang acts on every conn of
// the rank, data and control, however it is triggered, and on conns the
// rank opens later.
func TestControlWholeRank(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault faulty.Fault
		// trigger makes the fault fire once every first frame has
		// passed.
		trigger func(t *testing.T, s *faulty.Script, w *worker)
	}{
		{"fault=crash/rank=1/trigger=fire", faulty.Fault{Kind: faulty.Crash, Rank: 1, WholeRank: true, Manual: true},
			func(t *testing.T, s *faulty.Script, w *worker) { s.Fire(1) }},
		{"fault=crash/rank=1/trigger=data-frame-1", faulty.Fault{Kind: faulty.Crash, Rank: 1, Dir: faulty.Write, Frame: 1, WholeRank: true},
			func(t *testing.T, s *faulty.Script, w *worker) {
				_, err := w.wData.Write(frame1)
				require.ErrorIs(t, err, net.ErrClosed)
			}},
		{"fault=crash/rank=0/trigger=fire", faulty.Fault{Kind: faulty.Crash, Rank: 0, Link: 1, WholeRank: true, Manual: true},
			func(t *testing.T, s *faulty.Script, w *worker) { s.Fire(0) }},
		{"fault=hang/rank=1/trigger=fire", faulty.Fault{Kind: faulty.Hang, Rank: 1, WholeRank: true, Manual: true},
			func(t *testing.T, s *faulty.Script, w *worker) { s.Fire(1) }},
		{"fault=hang/rank=1/trigger=data-frame-1", faulty.Fault{Kind: faulty.Hang, Rank: 1, Dir: faulty.Read, Frame: 1, WholeRank: true},
			func(t *testing.T, s *faulty.Script, w *worker) {
				sent := testkit.Async(write(w.cData, frame2))
				require.NoError(t, w.wData.SetReadDeadline(time.Now().Add(time.Second)))
				n, err := w.wData.Read(make([]byte, 64))
				require.ErrorIs(t, err, os.ErrDeadlineExceeded)
				require.Zero(t, n)
				require.NoError(t, w.wData.SetReadDeadline(time.Time{}))
				require.NoError(t, w.cData.SetWriteDeadline(time.Now())) // unbuffered, the Write waits for it
				<-sent
				require.NoError(t, w.cData.SetWriteDeadline(time.Time{}))
			}},
		// The end of the control conn's frame 0 is the start of its
		// session: the first heartbeat's Write.
		{"fault=hang/rank=1/trigger=control-frame-0-end", faulty.Fault{Kind: faulty.Hang, Rank: 1, Dir: faulty.Write, Frame: 0, Offset: 13, WholeRank: true, Control: true},
			func(t *testing.T, s *faulty.Script, w *worker) {
				require.NoError(t, w.wCtl.SetWriteDeadline(time.Now().Add(time.Second)))
				n, err := w.wCtl.Write([]byte("heartbeat"))
				require.ErrorIs(t, err, os.ErrDeadlineExceeded)
				require.Zero(t, n)
				require.NoError(t, w.wCtl.SetWriteDeadline(time.Time{}))
			}},
		{"fault=hang/rank=0/trigger=fire", faulty.Fault{Kind: faulty.Hang, Rank: 0, Link: -1, WholeRank: true, Manual: true},
			func(t *testing.T, s *faulty.Script, w *worker) { s.Fire(0) }},
	} {
		for _, buffer := range bufferModes {
			t.Run(fmt.Sprintf("%s/buffer=%d", tc.name, buffer), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					s := faulty.NewScript(tc.fault)
					tn := newNetBuffered(t, s, buffer)
					ws := []*worker{dialWorker(t, tn, s, 1, false), dialWorker(t, tn, s, 2, true)}
					for _, w := range ws {
						w.firstFrames(t, true)
					}
					tc.trigger(t, s, ws[0])
					require.Equal(t, 1, s.Fired())
					rank := tc.fault.Rank
					for _, w := range ws {
						for _, e := range w.ends(rank) {
							what := fmt.Sprintf("worker %d, control=%v", w.rank, e.control)
							switch {
							case rank != 0 && w.rank != rank:
								requireIntact(t, e.end, e.peer, what)
							case tc.fault.Kind == faulty.Crash:
								requireCrashed(t, e.end, e.peer, what)
							default:
								requireHung(t, e.end, e.peer, what)
							}
						}
					}
					// A conn the dead rank opens (or accepts) later, such as
					// a control conn opened anew, is born dead.
					var later worker
					if rank == 0 {
						later.wCtl, later.cCtl = tn.connect(nil)
					} else {
						later.wCtl, later.cCtl = tn.connect(s.WrapDialer(tn.n, rank))
					}
					end, peer := later.ends(rank)[1].end, later.ends(rank)[1].peer
					if tc.fault.Kind == faulty.Crash {
						requireCrashed(t, end, peer, "a conn opened later")
					} else {
						requireHung(t, end, peer, "a conn opened later")
					}
				})
			})
		}
	}
}

// session returns n bytes of a simulated control session (smux): random
// bytes, among which are runs that read as frame headers with huge LENs
// and star's tags.
func session(seed uint64, n int) []byte {
	rng := rand.New(rand.NewPCG(seed, 0x0C))
	lies := [][]byte{
		{0xFF, 0xFF, 0xFF, 0xFF, 0x0C},
		{0x7F, 0x00, 0x00, 0x00, 0x08},
		{0x00, 0x00, 0x00, 0x00, 0x09},
		{0x00, 0x00, 0x00, 0x01, 0xEE},
		{0xFF, 0xFF, 0xFF, 0xFE},
	}
	var b []byte
	for len(b) < n {
		if rng.IntN(4) == 0 {
			b = append(b, lies[rng.IntN(len(lies))]...)
			continue
		}
		k := rng.IntN(64)
		for range k {
			b = append(b, byte(rng.Uint32()))
		}
	}
	return b[:n]
}

// randomChunks cuts b into pieces of 1 to max bytes.
func randomChunks(seed uint64, b []byte, maxLen int) [][]byte {
	rng := rand.New(rand.NewPCG(seed, 1))
	var out [][]byte
	for len(b) > 0 {
		k := min(len(b), 1+rng.IntN(maxLen))
		out = append(out, b[:k])
		b = b[k:]
	}
	return out
}

// stream moves data from one end to the other: the writer writes chunks, the
// reader reads with random sizes; either may poll (WriteNow, ReadNow).
func streamBytes(from, to transport.Conn, chunks [][]byte, n int, seed uint64, pollFrom, pollTo bool) (sent ioResult, got readResult) {
	done := testkit.Async(func() ioResult {
		total := 0
		for _, p := range chunks {
			for len(p) > 0 {
				var k int
				var err error
				if pollFrom {
					k, err = from.(transport.Poller).WriteNow(p)
					if k == 0 && err == nil {
						time.Sleep(time.Millisecond)
						continue
					}
				} else {
					k, err = from.Write(p)
				}
				total += k
				p = p[k:]
				if err != nil {
					return ioResult{total, err}
				}
			}
		}
		return ioResult{total, nil}
	})
	rng := rand.New(rand.NewPCG(seed, 2))
	var data []byte
	buf := make([]byte, 4096)
	for len(data) < n {
		b := buf[:min(n-len(data), 1+rng.IntN(len(buf)))]
		var k int
		var err error
		if pollTo {
			k, err = to.(transport.Poller).ReadNow(b)
			if k == 0 && err == nil {
				time.Sleep(time.Millisecond)
				continue
			}
		} else {
			k, err = to.Read(b)
		}
		data = append(data, b[:k]...)
		if err != nil {
			return <-done, readResult{data, err}
		}
	}
	return <-done, readResult{data, nil}
}

// TestControlPassThrough: past the first frames, a control conn passes any
// bytes unchanged, both ways at once, blocking or polled, buffered or not:
// no stream fault placed past frame 0 fires, and no corruption (placed, or
// fired by Script.Fire) touches them, even where they look like frame
// headers.
func TestControlPassThrough(t *testing.T) {
	var faults []faulty.Fault
	for _, end := range []struct{ rank, link int }{{1, 0}, {0, -1}, {0, 1}} {
		for _, dir := range []faulty.Dir{faulty.Write, faulty.Read} {
			f := func(k faulty.Kind, frame, offset int) faulty.Fault {
				return faulty.Fault{Kind: k, Rank: end.rank, Link: end.link, Dir: dir, Frame: frame, Offset: offset, Control: true}
			}
			for frame := 1; frame <= 4; frame++ {
				faults = append(faults, f(faulty.Crash, frame, 0), f(faulty.Hang, frame, 3), f(faulty.Reset, frame, 5),
					f(faulty.CorruptTag, frame, 0), f(faulty.LenTooLarge, frame, 0), f(faulty.LenTooSmall, frame, 0))
			}
			faults = append(faults, f(faulty.Crash, 0, 14), f(faulty.Crash, 0, 1000)) // past the end of frame 0
			manual := f(faulty.CorruptTag, 0, 0)
			manual.Manual = true
			faults = append(faults, manual)
		}
	}
	const size = 200 << 10
	for _, buffer := range bufferModes {
		for _, mode := range []struct {
			name               string
			pollWorker, pollCo bool
		}{{"blocking", false, false}, {"worker-polled", true, false}, {"coordinator-polled", false, true}} {
			t.Run(fmt.Sprintf("buffer=%d/io=%s", buffer, mode.name), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					s := faulty.NewScript(faults...)
					tn := newNetBuffered(t, s, buffer)
					w := dialWorker(t, tn, s, 1, true)
					w.firstFrames(t, false)
					w.requireAttributed(t)
					s.Fire(0)
					s.Fire(1) // corruptions armed for the next frame each way: none comes
					manual := 6
					require.Equal(t, manual, s.Fired())
					up, down := session(1, size), session(2, size)
					type result struct {
						sent ioResult
						got  readResult
					}
					upDone := testkit.Async(func() result {
						s, g := streamBytes(w.wCtl, w.cCtl, randomChunks(3, up, 3000), size, 4, mode.pollWorker, mode.pollCo)
						return result{s, g}
					})
					downSent, downGot := streamBytes(w.cCtl, w.wCtl, randomChunks(5, down, 5000), size, 6, mode.pollCo, mode.pollWorker)
					upRes := <-upDone
					for _, r := range []struct {
						name string
						want []byte
						result
					}{{"worker to coordinator", up, upRes}, {"coordinator to worker", down, result{downSent, downGot}}} {
						require.NoError(t, r.sent.err, r.name)
						require.NoError(t, r.got.err, r.name)
						require.Equal(t, len(r.want), r.sent.n, r.name)
						require.True(t, bytes.Equal(r.want, r.got.data), "%s: the bytes changed", r.name)
					}
					require.Equal(t, manual, s.Fired(), "faults fired on the session's bytes")
					// The data conn is untouched by it all, its frames
					// tracked as ever.
					requireIntact(t, w.wData, w.cData, "data conn")
					// The control conn keeps the wrapped conn's abilities:
					// CloseWrite reaches it, and the half-closed end still
					// reads.
					require.IsType(t, &faulty.PollCloseWriteConn{}, w.wCtl)
					require.IsType(t, &faulty.PollCloseWriteConn{}, w.cCtl)
					eof := testkit.Async(func() readResult { return readUntilErr(w.cCtl, 64) })
					require.NoError(t, w.wCtl.(transport.CloseWriter).CloseWrite())
					r := <-eof
					require.Equal(t, io.EOF, r.err)
					require.Empty(t, r.data)
					requirePasses(t, w.cCtl, w.wCtl, up[:1000], "to the half-closed end")
				})
			})
		}
	}
}

// TestControlHang: a hung control conn drops the heartbeats: nothing passes
// either way on it, its reader and writer (a session's goroutines) block
// until their deadline or Close, and the peer sees silence, while the data
// conn goes on.
func TestControlHang(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault faulty.Fault
		fire  int
	}{
		{"end=worker", faulty.Fault{Kind: faulty.Hang, Rank: 1, Manual: true, Control: true}, 1},
		{"end=coordinator", faulty.Fault{Kind: faulty.Hang, Rank: 0, Link: 1, Manual: true, Control: true}, 0},
	} {
		for _, buffer := range bufferModes {
			t.Run(fmt.Sprintf("%s/buffer=%d", tc.name, buffer), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					s := faulty.NewScript(tc.fault)
					tn := newNetBuffered(t, s, buffer)
					w := dialWorker(t, tn, s, 1, false)
					w.firstFrames(t, true)
					hung, peer := w.wCtl, w.cCtl
					if tc.fire == 0 {
						hung, peer = w.cCtl, w.wCtl
					}
					start := time.Now()
					// Both ends run a session: a heartbeat every second each
					// way, and a reader that records when each came.
					heartbeat := []byte("heartbeat")
					beat := func(c transport.Conn) <-chan ioResult {
						return testkit.Async(func() ioResult {
							for i := 0; ; i++ {
								if _, err := c.Write(heartbeat); err != nil {
									return ioResult{i, err}
								}
								time.Sleep(time.Second)
							}
						})
					}
					type heard struct {
						at  []time.Duration
						err error
					}
					listen := func(c transport.Conn) <-chan heard {
						return testkit.Async(func() heard {
							var h heard
							for {
								r := readFull(c, len(heartbeat))
								if r.err != nil {
									h.err = r.err
									return h
								}
								h.at = append(h.at, time.Since(start))
							}
						})
					}
					hungBeats, peerBeats := beat(hung), beat(peer)
					hungHeard, peerHeard := listen(hung), listen(peer)
					time.Sleep(2500 * time.Millisecond)
					s.Fire(tc.fire)
					require.Equal(t, 1, s.Fired())
					time.Sleep(10 * time.Second)
					// The data conn goes on meanwhile.
					requireIntact(t, w.wData, w.cData, "data conn")
					testkit.Blocked(t, hungBeats, "the hung end's heartbeat Write")
					testkit.Blocked(t, hungHeard, "the hung end's Read")
					// The peer's session closes on missing heartbeats:
					// its reader and writer end, and it heard nothing
					// after the hang, not even EOF.
					require.NoError(t, peer.Close())
					pb, ph := <-peerBeats, <-peerHeard
					require.ErrorIs(t, pb.err, io.ErrClosedPipe)
					require.ErrorIs(t, ph.err, io.ErrClosedPipe)
					secs := []time.Duration{0, time.Second, 2 * time.Second}
					require.Equal(t, secs, ph.at, "heartbeats the peer heard")
					// The hung end's I/O waits for its deadline, set
					// while it waits, then its Close.
					t0 := time.Now()
					require.NoError(t, hung.SetReadDeadline(t0.Add(3*time.Second)))
					hh := <-hungHeard
					require.ErrorIs(t, hh.err, os.ErrDeadlineExceeded)
					require.Equal(t, 3*time.Second, time.Since(t0))
					testkit.Blocked(t, hungBeats, "the hung end's Write after a read deadline")
					require.NoError(t, hung.Close())
					hb := testkit.Ready(t, hungBeats, "the hung end's Write after Close")
					require.ErrorIs(t, hb.err, net.ErrClosed)
					require.Equal(t, 3, hb.n, "heartbeats sent before the hang")
					// The data conn is still there.
					requireIntact(t, w.wData, w.cData, "data conn after the control conn's Close")
				})
			})
		}
	}
	t.Run("case=both-ways-until-deadline-or-close", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := faulty.NewScript(faulty.Fault{Kind: faulty.Hang, Rank: 1, Manual: true, Control: true})
			tn := newNetBuffered(t, s, 64<<10)
			w := dialWorker(t, tn, s, 1, true)
			w.firstFrames(t, false)
			s.Fire(1)
			start := time.Now()
			require.NoError(t, w.wCtl.SetDeadline(start.Add(2*time.Second)))
			wr := testkit.Async(write(w.wCtl, []byte("ping")))
			rd := testkit.Async(read(w.wCtl, 16))
			sent := testkit.Async(write(w.cCtl, []byte("pong"))) // buffered: taken, never read
			require.NoError(t, (<-sent).err)
			for _, r := range []ioResult{<-wr, <-rd} {
				require.ErrorIs(t, r.err, os.ErrDeadlineExceeded)
				require.Zero(t, r.n)
			}
			require.Equal(t, 2*time.Second, time.Since(start))
			// Without a deadline: until Close.
			require.NoError(t, w.wCtl.SetDeadline(time.Time{}))
			wr = testkit.Async(write(w.wCtl, []byte("ping")))
			rd = testkit.Async(read(w.wCtl, 16))
			time.Sleep(time.Hour)
			testkit.Blocked(t, wr, "hung Write")
			testkit.Blocked(t, rd, "hung Read")
			require.NoError(t, w.wCtl.Close())
			require.ErrorIs(t, testkit.Ready(t, wr, "hung Write after Close").err, net.ErrClosed)
			require.ErrorIs(t, testkit.Ready(t, rd, "hung Read after Close").err, net.ErrClosed)
			require.NoError(t, w.wCtl.Close(), "Close again")
			// Silence, not EOF, on the peer.
			require.NoError(t, w.cCtl.SetReadDeadline(time.Now().Add(time.Second)))
			_, err := w.cCtl.Read(make([]byte, 1))
			require.ErrorIs(t, err, os.ErrDeadlineExceeded)
			requireIntact(t, w.wData, w.cData, "data conn")
		})
	})
}

// TestControlManual: each kind of fault that Script.Fire triggers on a
// control conn, between collectives: what the control conn does, while
// the data conn goes on.
func TestControlManual(t *testing.T) {
	const delay = 3 * time.Second
	for _, end := range []struct {
		name string
		rank int
		link int
	}{{"worker", 1, 0}, {"coordinator", 0, 1}} {
		for _, tc := range []struct {
			kind  faulty.Kind
			check func(t *testing.T, hit, peer transport.Conn)
		}{
			{faulty.Crash, func(t *testing.T, hit, peer transport.Conn) { requireCrashed(t, hit, peer, "crashed control end") }},
			{faulty.Reset, func(t *testing.T, hit, peer transport.Conn) {
				_, err := hit.Write([]byte{1})
				require.ErrorIs(t, err, syscall.ECONNRESET)
				_, err = hit.Read(make([]byte, 1))
				require.ErrorIs(t, err, syscall.ECONNRESET)
				_, err = peer.Read(make([]byte, 1))
				require.Equal(t, io.EOF, err, "the peer's Read")
			}},
			{faulty.SysTimeout, func(t *testing.T, hit, peer transport.Conn) {
				_, err := hit.Read(make([]byte, 1))
				require.ErrorIs(t, err, syscall.ETIMEDOUT)
				require.NotErrorIs(t, err, os.ErrDeadlineExceeded)
				_, err = peer.Read(make([]byte, 1))
				require.Equal(t, io.EOF, err, "the peer's Read")
			}},
			{faulty.Deadline, func(t *testing.T, hit, peer transport.Conn) {
				n, err := hit.Write([]byte("x"))
				require.ErrorIs(t, err, os.ErrDeadlineExceeded, "the next I/O")
				require.Zero(t, n)
				requireIntact(t, hit, peer, "after the Deadline")
			}},
			{faulty.Delay, func(t *testing.T, hit, peer transport.Conn) {
				start := time.Now()
				requirePasses(t, peer, hit, frame3, "the other direction") // not delayed
				got := testkit.Async(func() readResult { return readFull(peer, len(frame1)) })
				n, err := hit.Write(frame1)
				require.NoError(t, err)
				require.Equal(t, len(frame1), n)
				require.Equal(t, delay, time.Since(start), "the Write waited for the Delay")
				require.Equal(t, frame1, (<-got).data)
				requireIntact(t, hit, peer, "after the Delay")
				require.Equal(t, delay, time.Since(start), "the Delay is over")
			}},
			{faulty.Hang, func(t *testing.T, hit, peer transport.Conn) { requireHung(t, hit, peer, "hung control end") }},
		} {
			for _, buffer := range bufferModes {
				t.Run(fmt.Sprintf("end=%s/fault=%v/buffer=%d", end.name, tc.kind, buffer), func(t *testing.T) {
					synctest.Test(t, func(t *testing.T) {
						f := faulty.Fault{Kind: tc.kind, Rank: end.rank, Link: end.link, Manual: true, Control: true, Delay: delay}
						s := faulty.NewScript(f)
						tn := newNetBuffered(t, s, buffer)
						w := dialWorker(t, tn, s, 1, buffer == 0)
						w.firstFrames(t, buffer != 0)
						s.Fire(2) // another rank
						require.Zero(t, s.Fired())
						s.Fire(end.rank)
						require.Equal(t, 1, s.Fired())
						e := w.ends(end.rank)
						tc.check(t, e[1].end, e[1].peer)
						requireIntact(t, e[0].end, e[0].peer, "data conn")
						s.Fire(end.rank)
						require.Equal(t, 1, s.Fired(), "fired faults do not fire again")
					})
				})
			}
		}
	}
}

// TestControlFrame0Corruption: a corruption acts on a control conn's first
// frame each way (the Control frame, its Ack), placed there or fired before
// that frame passes, and leaves the session's bytes after it alone; the
// coordinator's end learns its kind and link from the real frame.
func TestControlFrame0Corruption(t *testing.T) {
	cf := controlFrame(1)
	corruptedFrame := func(edit func([]byte)) []byte {
		b := bytes.Clone(cf)
		edit(b[:headerSize])
		return b
	}
	tail := session(7, 4096)
	for _, c := range corruptions() {
		for _, buffer := range bufferModes {
			t.Run(fmt.Sprintf("fault=%s/end=worker/dir=write/buffer=%d", c.name, buffer), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					f := c.fault
					f.Rank, f.Dir, f.Frame, f.Control = 1, faulty.Write, 0, true
					s := faulty.NewScript(f)
					tn := newNetBuffered(t, nil, buffer)
					wc, peer := tn.connect(s.WrapDialer(tn.n, 1)) // peer: a raw coordinator end
					wd, peerData := tn.connect(s.WrapDialer(tn.n, 1))
					requirePasses(t, wd, peerData, handshake(1), "Handshake") // the data conn's frame 0 passes as it is
					want := append(corruptedFrame(c.edit), tail...)
					got := testkit.Async(func() readResult { return readFull(peer, len(want)) })
					require.NoError(t, writeChunks(wc, [][]byte{cf, tail}).err)
					r := <-got
					require.NoError(t, r.err)
					require.Equal(t, want, r.data)
					require.Equal(t, 1, s.Fired())
					require.True(t, faulty.ConnOf(wc).Control())
				})
			})
			t.Run(fmt.Sprintf("fault=%s/end=coordinator/dir=read/buffer=%d", c.name, buffer), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					f := c.fault
					f.Rank, f.Link, f.Dir, f.Frame, f.Control = 0, 1, faulty.Read, 0, true
					s := faulty.NewScript(f)
					tn := newNetBuffered(t, s, buffer)
					wd, cd := tn.connect(nil)
					wc, cc := tn.connect(nil)
					requirePasses(t, wd, cd, handshake(1), "Handshake")
					want := append(corruptedFrame(c.edit), tail...)
					sent := testkit.Async(func() ioResult { return writeChunks(wc, [][]byte{cf, tail}) })
					r := readFull(cc, len(want))
					require.NoError(t, r.err)
					require.Equal(t, want, r.data)
					require.NoError(t, (<-sent).err)
					require.Equal(t, 1, s.Fired())
					require.Equal(t, 1, faulty.ConnOf(cc).Link(), "link from the real frame")
					require.True(t, faulty.ConnOf(cc).Control(), "kind from the real frame")
				})
			})
		}
	}
	// Fired by Fire once the coordinator has read the Control frame: the
	// control Ack, frame 0 of what it writes, is corrupted; the data Ack
	// is not.
	t.Run("fault=corrupt-tag/end=coordinator/dir=write/trigger=fire", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := faulty.NewScript(
				faulty.Fault{Kind: faulty.CorruptTag, Rank: 0, Link: 1, Dir: faulty.Write, Manual: true, Control: true},
			)
			tn := newNetBuffered(t, s, 0)
			w := dialWorker(t, tn, s, 1, false)
			requirePasses(t, w.wData, w.cData, handshake(1), "Handshake")
			requirePasses(t, w.wCtl, w.cCtl, cf, "Control frame")
			s.Fire(0)
			requirePasses(t, w.cData, w.wData, dataAck, "Ack")
			l := pass(w.cCtl, w.wCtl, cf)
			require.NoError(t, l.sent.err)
			require.Equal(t, corruptedFrame(func(h []byte) { h[4] = 0xEE }), l.got.data)
			requirePasses(t, w.cCtl, w.wCtl, tail, "session bytes after")
		})
	})
}

// TestControlSplitHeader: a dialer's end learns its kind from the tag of
// the first frame it writes. When the Writes cut that frame's header before
// its tag, the end counts as a data conn until the tag passes; a Write that
// would make a control conn's fault placed in frame 0 miss fails instead.
func TestControlSplitHeader(t *testing.T) {
	cf := controlFrame(1)
	var bytewise [][]byte
	for i := range cf {
		bytewise = append(bytewise, cf[i:i+1])
	}
	t.Run("case=no-fault", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := faulty.NewScript(faulty.Fault{Kind: faulty.Crash, Rank: 1, Dir: faulty.Write, Frame: 1, Control: true}) // past frame 0: never fires
			tn := newNetBuffered(t, s, 0)
			wc, peer := tn.connect(s.WrapDialer(tn.n, 1))
			got := testkit.Async(func() readResult { return readFull(peer, len(cf)+len(frame1)) })
			require.NoError(t, writeChunks(wc, append(bytewise, frame1)).err)
			require.Equal(t, append(bytes.Clone(cf), frame1...), (<-got).data)
			require.True(t, faulty.ConnOf(wc).Control())
			require.Zero(t, s.Fired())
		})
	})
	t.Run("case=control-fault-in-frame-0", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := faulty.NewScript(faulty.Fault{Kind: faulty.Crash, Rank: 1, Dir: faulty.Write, Frame: 0, Offset: 2, Control: true})
			tn := newNetBuffered(t, s, 0)
			wc, _ := tn.connect(s.WrapDialer(tn.n, 1))
			n, err := wc.Write(cf[:2])
			require.Zero(t, n)
			require.Error(t, err)
			require.True(t, strings.Contains(err.Error(), "split across writes"), "error: %v", err)
			require.Zero(t, s.Fired())
		})
	})
	t.Run("case=data-fault-in-frame-0", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			// As before control conns: a data conn's fault in frame 0
			// fires at its byte, however the header is cut.
			s := faulty.NewScript(faulty.Fault{Kind: faulty.Crash, Rank: 1, Dir: faulty.Write, Frame: 0, Offset: 2})
			tn := newNetBuffered(t, s, 0)
			wd, peer := tn.connect(s.WrapDialer(tn.n, 1))
			got := testkit.Async(func() readResult { return readUntilErr(peer, 64) })
			var hs [][]byte
			for i := range handshake(1) {
				hs = append(hs, handshake(1)[i:i+1])
			}
			res := writeChunks(wd, hs)
			require.ErrorIs(t, res.err, net.ErrClosed)
			require.Equal(t, 2, res.n)
			require.Equal(t, handshake(1)[:2], (<-got).data)
		})
	})
}

// TestControlReadAheadEOF: an accepted end that reads ahead to learn its
// kind hands out what came, then the end of the stream, when the stream
// ends first; it counts as a data conn.
func TestControlReadAheadEOF(t *testing.T) {
	for _, polled := range []bool{false, true} {
		t.Run(fmt.Sprintf("polled=%v", polled), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := faulty.NewScript(faulty.Fault{Kind: faulty.Crash, Rank: 0, Link: -1, Dir: faulty.Read, Frame: 0, Offset: 3, Control: true})
				tn := newNetBuffered(t, s, 0)
				w, c := tn.connect(nil)
				go func() {
					_, _ = w.Write(controlFrame(1)[:3])
					_ = w.Close()
				}()
				var data []byte
				var err error
				buf := make([]byte, 64)
				for i := 0; err == nil; i++ {
					require.Less(t, i, 1000)
					var n int
					if polled {
						n, err = c.(transport.Poller).ReadNow(buf)
						if n == 0 && err == nil {
							synctest.Wait()
						}
					} else {
						n, err = c.Read(buf)
					}
					data = append(data, buf[:n]...)
				}
				require.True(t, errors.Is(err, io.EOF), "got %v", err)
				require.Equal(t, controlFrame(1)[:3], data)
				require.False(t, faulty.ConnOf(c).Control())
				require.Zero(t, s.Fired())
			})
		})
	}
}
