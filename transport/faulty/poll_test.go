package faulty_test

import (
	"errors"
	"fmt"
	"github.com/starcomm/starcomm/testkit"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm/transport"
	"github.com/starcomm/starcomm/transport/faulty"
	"github.com/starcomm/starcomm/transport/pipe"
)

// The tests in this file check the polled paths (transport.Poller's ReadNow
// and WriteNow) of faulty conns: the same script gives the same observable
// result whether the faulty end moves the stream with Read and Write, with
// ReadNow and WriteNow, or with a mix of both, including a fault that
// triggers in a frame that one kind of call began and the other finishes.

// split is the stream offset, inside frame 1 and before the faults placed
// at its offset 50, where the mixed modes switch between blocking and
// polled calls: the frame is read (or written) partly each way.
var split = len(frame0) + 20

// ioMode is how the faulty end moves the stream: for each call, given how
// many calls have returned and the stream offset, whether it polls.
type ioMode struct {
	name   string
	polled func(call, at int) bool
}

var ioModes = []ioMode{
	{"blocking", func(int, int) bool { return false }},
	{"polled", func(int, int) bool { return true }},
	{"polled-then-blocking", func(_, at int) bool { return at < split }},
	{"blocking-then-polled", func(_, at int) bool { return at >= split }},
	{"alternate", func(call, _ int) bool { return call%2 == 0 }},
}

// pollStep is how long a poll loop sleeps when a poll found nothing even
// though every other goroutine was blocked: only the clock can change
// things then. Every time in the scenarios is a multiple of it, so a poll
// loop sees a deadline or the end of a Delay at the very instant a blocking
// call would.
const pollStep = 100 * time.Millisecond

// idler is what a poll loop does when a poll found nothing: first let every
// other goroutine of the bubble run as far as it can (synctest.Wait), then,
// if polls still find nothing, let time pass. It waits more than once
// before it sleeps because a ReadNow may take bytes without handing any out
// yet (the bytes of a frame header that may be corrupted, one at a time),
// and a poller cannot tell that from no progress; a header has headerSize
// bytes.
type idler struct{ empty int }

func (i *idler) idle() {
	i.empty++
	if i.empty <= headerSize {
		synctest.Wait()
		return
	}
	i.empty = 0
	time.Sleep(pollStep)
}

func (i *idler) progress() { i.empty = 0 }

// failure is an error an I/O loop saw: at which stream offset, which kind,
// and when.
type failure struct {
	At   int
	Err  string
	When time.Duration
}

// errClass names an error by the sentinel it wraps.
func errClass(err error) string {
	switch {
	case err == nil:
		return "nil"
	case err == io.EOF:
		return "EOF"
	case errors.Is(err, os.ErrDeadlineExceeded):
		return "deadline"
	case errors.Is(err, net.ErrClosed):
		return "closed"
	case errors.Is(err, syscall.ECONNRESET):
		return "reset"
	case errors.Is(err, io.ErrClosedPipe):
		return "closed-pipe"
	}
	return "other: " + err.Error()
}

// sideResult is what one side of a scenario observed: the bytes it moved
// and the errors on the way.
type sideResult struct {
	Data  []byte
	Fails []failure
}

// record adds err at offset at; it reports whether the loop must stop: at
// any error but a deadline, and at a deadline that comes again at the
// same offset (the end is stuck: hung, or past its deadline for good).
func (r *sideResult) record(err error, start time.Time) (stop bool) {
	f := failure{At: len(r.Data), Err: errClass(err), When: time.Since(start)}
	again := len(r.Fails) > 0 && r.Fails[len(r.Fails)-1].At == f.At
	r.Fails = append(r.Fails, f)
	return f.Err != "deadline" || again
}

// giveUp bounds a scenario in fake time; no scenario gets near it.
const giveUp = time.Minute

// readStream reads c until it fails for good, each call at most size bytes
// and none across split, polling or not as m says.
func readStream(c transport.Conn, size int, m ioMode, start time.Time) sideResult {
	p, _ := c.(transport.Poller)
	var r sideResult
	var idle idler
	buf := make([]byte, size)
	call := 0
	for time.Since(start) < giveUp {
		at := len(r.Data)
		b := buf
		if at < split {
			b = buf[:min(size, split-at)]
		}
		var n int
		var err error
		if m.polled(call, at) {
			n, err = p.ReadNow(b)
			if n == 0 && err == nil {
				idle.idle()
				continue
			}
		} else {
			n, err = c.Read(b)
		}
		call++
		idle.progress()
		r.Data = append(r.Data, b[:n]...)
		if err != nil && r.record(err, start) {
			return r
		}
	}
	r.Fails = append(r.Fails, failure{At: len(r.Data), Err: "gave up"})
	return r
}

// writeStream writes chunks to c, no call across split, polling or not as
// m says, until all is written or a write fails for good.
func writeStream(c transport.Conn, chunks [][]byte, m ioMode, start time.Time) sideResult {
	p, _ := c.(transport.Poller)
	var r sideResult
	var idle idler
	call := 0
	for _, chunk := range chunks {
		for len(chunk) > 0 {
			if time.Since(start) >= giveUp {
				r.Fails = append(r.Fails, failure{At: len(r.Data), Err: "gave up"})
				return r
			}
			at := len(r.Data)
			b := chunk
			if at < split {
				b = chunk[:min(len(chunk), split-at)]
			}
			var n int
			var err error
			if m.polled(call, at) {
				n, err = p.WriteNow(b)
				if n < 0 || n > len(b) {
					r.Fails = append(r.Fails, failure{At: at, Err: fmt.Sprintf("WriteNow(%d bytes) = %d", len(b), n)})
					return r
				}
				if n == 0 && err == nil {
					idle.idle()
					continue
				}
			} else {
				n, err = c.Write(b)
			}
			call++
			idle.progress()
			r.Data = append(r.Data, b[:n]...)
			chunk = chunk[n:]
			if err != nil && r.record(err, start) {
				return r
			}
		}
	}
	return r
}

// outcome is everything a scenario observed, on both sides, and how many
// faults fired.
type outcome struct {
	Faulty, Peer sideResult
	Fired        int
}

// scenario is a script with one fault, and a deadline for the faulty end.
type scenario struct {
	name     string
	fault    faulty.Fault
	deadline time.Duration // 0: none
}

func scenarios(dir faulty.Dir) []scenario {
	f := func(k faulty.Kind, frame, offset int) faulty.Fault {
		return faulty.Fault{Kind: k, Rank: 1, Dir: dir, Frame: frame, Offset: offset}
	}
	var sc []scenario
	for _, off := range []int{0, 5, 50, 105} {
		sc = append(sc, scenario{name: fmt.Sprintf("fault=crash/offset=%d", off), fault: f(faulty.Crash, 1, off)})
	}
	sc = append(sc,
		scenario{name: "fault=reset/offset=50", fault: f(faulty.Reset, 1, 50)},
		scenario{name: "fault=deadline/offset=0", fault: f(faulty.Deadline, 1, 0)},
		scenario{name: "fault=deadline/offset=50", fault: f(faulty.Deadline, 1, 50)},
		scenario{name: "fault=hang/offset=50", fault: f(faulty.Hang, 1, 50), deadline: 2 * time.Second},
		scenario{name: "fault=hang/frame=0", fault: f(faulty.Hang, 0, 0), deadline: 2 * time.Second},
	)
	delay := f(faulty.Delay, 1, 50)
	delay.Delay = 3 * time.Second
	sc = append(sc,
		scenario{name: "fault=delay/offset=50", fault: delay},
		scenario{name: "fault=delay/offset=50/case=deadline-first", fault: delay, deadline: time.Second},
	)
	for _, c := range corruptions() {
		for i := range frames {
			cf := c.fault
			cf.Rank, cf.Dir, cf.Frame, cf.Offset = 1, dir, i, 3
			sc = append(sc, scenario{name: fmt.Sprintf("fault=%s/frame=%d", c.name, i), fault: cf})
		}
	}
	return sc
}

// peerDeadline bounds the raw peer's I/O in every scenario, after every
// deadline and delay of the faulty end.
const peerDeadline = 10 * time.Second

// runWrite runs sc with the faulty end writing the stream (cut as lay says)
// as m says, to a raw peer that reads until it fails; the faulty end closes
// when it is done.
func runWrite(t *testing.T, sc scenario, lay layout, buffer int, m ioMode) outcome {
	var out outcome
	synctest.Test(t, func(t *testing.T) {
		s := faulty.NewScript(sc.fault)
		w, peer := bufferedPair(t, s, buffer)
		start := time.Now()
		if sc.deadline > 0 {
			require.NoError(t, w.SetDeadline(start.Add(sc.deadline)))
		}
		require.NoError(t, peer.SetDeadline(start.Add(peerDeadline)))
		got := testkit.Async(func() sideResult {
			var r sideResult
			buf := make([]byte, 4096)
			for {
				n, err := peer.Read(buf)
				r.Data = append(r.Data, buf[:n]...)
				if err != nil {
					r.record(err, start)
					return r
				}
			}
		})
		out.Faulty = writeStream(w, lay.chunks, m, start)
		require.NoError(t, w.Close())
		out.Peer = <-got
		out.Fired = s.Fired()
	})
	return out
}

// runRead runs sc with the faulty end reading, size bytes at most per call,
// as m says, what a raw peer writes (cut as lay says) before it closes.
func runRead(t *testing.T, sc scenario, lay layout, buffer, size int, m ioMode) outcome {
	var out outcome
	synctest.Test(t, func(t *testing.T) {
		s := faulty.NewScript(sc.fault)
		w, peer := bufferedPair(t, s, buffer)
		start := time.Now()
		if sc.deadline > 0 {
			require.NoError(t, w.SetDeadline(start.Add(sc.deadline)))
		}
		require.NoError(t, peer.SetDeadline(start.Add(peerDeadline)))
		sent := testkit.Async(func() sideResult {
			var r sideResult
			for _, p := range lay.chunks {
				n, err := peer.Write(p)
				r.Data = append(r.Data, p[:n]...)
				if err != nil {
					r.record(err, start)
					return r
				}
			}
			if err := peer.Close(); err != nil {
				r.record(err, start)
			}
			return r
		})
		out.Faulty = readStream(w, size, m, start)
		require.NoError(t, w.Close())
		out.Peer = <-sent
		out.Fired = s.Fired()
		if buffer > 0 {
			// How far a buffered peer gets before the faulty end crashes
			// or resets (whether it finishes, even) depends on the
			// scheduling of the two goroutines, not on faulty: the
			// peer's side is compared unbuffered only.
			out.Peer = sideResult{}
		}
	})
	return out
}

// bufferedPair is workerPair over a pipe network whose directions buffer
// buffer bytes.
func bufferedPair(t *testing.T, s *faulty.Script, buffer int) (worker, peer transport.Conn) {
	t.Helper()
	n := pipe.NewNetwork()
	n.Buffer = buffer
	l, err := n.Listen(coordAddr)
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	tn := &testNet{t: t, n: n, l: l}
	return tn.connect(s.WrapDialer(n, 1))
}

// TestPolledSameAsBlocking: for every fault kind, in both directions, the
// faulty end observes the same bytes, the same errors at the same stream
// offsets and fake times, and its peer the same, whether it uses Read and
// Write, ReadNow and WriteNow, or both in turn.
func TestPolledSameAsBlocking(t *testing.T) {
	for _, buffer := range []int{0, 16} {
		for _, sc := range scenarios(faulty.Write) {
			for _, lay := range layouts() {
				if lay.name == "byte-by-byte" && sc.fault.Kind >= faulty.CorruptTag {
					continue // a header split across Writes cannot be corrupted
				}
				t.Run(fmt.Sprintf("dir=write/%s/layout=%s/buffer=%d", sc.name, lay.name, buffer), func(t *testing.T) {
					ref := runWrite(t, sc, lay, buffer, ioModes[0])
					require.Equal(t, 1, ref.Fired, "the fault fires")
					for _, m := range ioModes[1:] {
						t.Run("io="+m.name, func(t *testing.T) {
							require.Equal(t, ref, runWrite(t, sc, lay, buffer, m))
						})
					}
				})
			}
		}
		for _, sc := range scenarios(faulty.Read) {
			for _, lay := range layouts() {
				for _, size := range []int{1, 7, 4096} {
					t.Run(fmt.Sprintf("dir=read/%s/layout=%s/buffer=%d/read=%d", sc.name, lay.name, buffer, size), func(t *testing.T) {
						ref := runRead(t, sc, lay, buffer, size, ioModes[0])
						require.Equal(t, 1, ref.Fired, "the fault fires")
						require.NotEmpty(t, ref.Faulty.Fails, "the scenario ends in an error")
						for _, m := range ioModes[1:] {
							t.Run("io="+m.name, func(t *testing.T) {
								require.Equal(t, ref, runRead(t, sc, lay, buffer, size, m))
							})
						}
					})
				}
			}
		}
	}
}
