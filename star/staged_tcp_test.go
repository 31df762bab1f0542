package star_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
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

// stagedSizes are frame payloads around the limits of the page-aligned
// stage a frame is copied into before it is written over TCP (frames of
// more than 16 KiB and at most 1 MiB, header included; see
// alignedStageMax) and of the lead a larger frame starts with (see
// leadFrag): just past the small frames' stage, in the middle, the
// largest staged frame, one byte more (the smallest with a lead), a
// larger one, and staged frames again after them (a shorter frame after a
// longer one must not carry the longer one's tail).
var stagedSizes = []int{16<<10 - star.HeaderSize + 1, 300_001, 1<<20 - star.HeaderSize, 1<<20 - star.HeaderSize + 1, 20_000, 3<<20 + 7, 1<<20 - star.HeaderSize, 40_000}

// bothWays runs f twice: as configured (on Linux the links splice every
// large frame's header apart: the test then asserts that this process
// holds at least pipes more pipe descriptors while f's communicators are
// open, and at most as many as before after they closed) and with
// splicing off (star.SetSpliceOff: the staged writes and leads that other
// systems use, with no new pipe).
func bothWays(t *testing.T, pipes int, f func(t *testing.T)) {
	t.Run("spliced", func(t *testing.T) {
		before := pipeFDs(t)
		var during int
		t.Cleanup(func() {
			// After f's own clean-ups (registered later, run first) closed
			// its communicators.
			if runtime.GOOS == "linux" {
				require.GreaterOrEqual(t, during-before, pipes, "pipe descriptors while the communicators were open: the headers were not spliced")
				require.LessOrEqual(t, pipeFDs(t), before, "pipe descriptors left after Close")
			}
		})
		f(t)
		during = pipeFDs(t)
	})
	t.Run("staged", func(t *testing.T) {
		defer star.SetSpliceOff()()
		before := pipeFDs(t)
		f(t)
		require.Equal(t, before, pipeFDs(t), "a pipe was made with splicing off")
	})
}

// pipeFDs counts this process's open pipe descriptors (0 where /proc/self/fd
// does not exist).
func pipeFDs(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(target, "pipe:") {
			n++
		}
	}
	return n
}

// pattern returns n bytes that differ from one frame (seed) to the next.
func pattern(n, seed int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + seed*13 + i>>11)
	}
	return b
}

// TestStagedFrameBytes: a worker's frames of every size around the staged
// range and past it (with a lead) reach the wire byte for byte (header and
// payload), read here by a coordinator of the test's over real TCP, both
// with the header spliced apart and staged (see bothWays).
func TestStagedFrameBytes(t *testing.T) { bothWays(t, 1, stagedFrameBytes) }

func stagedFrameBytes(t *testing.T) {
	testkit.CheckGoroutines(t)
	w, co := tcpFakeCoordinator(t, 2*time.Second)
	for i, n := range stagedSizes {
		// Each frame starts at another offset from a page boundary, so
		// that the lead of the larger ones ends at different distances.
		off := (i * 1237) % 4096
		send := pattern(n+off, i)[off:]
		done := make(chan error, 1)
		go func() {
			tag, payload, err := readRawFrame(co, n)
			switch {
			case err != nil:
			case tag != star.TagAllgathervSend:
				err = fmt.Errorf("tag %s, want AllgathervSend", star.TagName(tag))
			case !bytes.Equal(payload, send):
				err = fmt.Errorf("payload of %d bytes differs from what the worker sent", n)
			default:
				_, err = co.Write(append(header(uint32(n+2), star.TagAllgathervRecv), 42))
				if err == nil {
					_, err = co.Write(send)
				}
			}
			done <- err
		}()
		recv := make([]uint8, n+1)
		err := comm.Allgatherv(context.Background(), w, send, recv, []int{1, n}, []int{0, 1})
		require.NoError(t, <-done, "the test's coordinator, frame of %d bytes", n)
		require.NoError(t, err, "allgatherv sending %d bytes", n)
		require.Equal(t, uint8(42), recv[0])
		require.True(t, bytes.Equal(send, recv[1:]), "allgatherv of %d bytes: the reply", n)
	}
}

// TestStagedScatter: the coordinator's replies of every size around the
// staged range and past it, written by its links' goroutines at once from the same
// regions, reach every worker whole and right, over real TCP, both with
// the headers spliced apart and staged (see bothWays).
func TestStagedScatter(t *testing.T) { bothWays(t, 2*3, stagedScatter) }

func stagedScatter(t *testing.T) {
	const size = 4
	comms := startTCP(t, size, 100*time.Microsecond, 10*time.Second)
	for i, total := range stagedSizes {
		counts, displs := make([]int, size), make([]int, size)
		for r := range size {
			counts[r] = total / size
			if r == size-1 {
				counts[r] = total - 3*(total/size)
			}
			if r > 0 {
				displs[r] = displs[r-1] + counts[r-1]
			}
		}
		for r, err := range allgathervChecked(comms, pattern(total, i), counts, displs) {
			require.NoError(t, err, "rank %d, allgatherv of %d bytes", r, total)
		}
	}
}

// TestStagedBroadcast: broadcasts of every size around the staged range
// and past it, from every root in turn (the coordinator's copy goes to
// every worker but the root), reach every rank whole and right over real
// TCP, both with the headers spliced apart and staged (see bothWays).
func TestStagedBroadcast(t *testing.T) { bothWays(t, 2*3, stagedBroadcast) }

func stagedBroadcast(t *testing.T) {
	const size = 4
	comms := startTCP(t, size, 100*time.Microsecond, 10*time.Second)
	for i, n := range stagedSizes {
		root := i % size
		want := pattern(n, i)
		errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
			buf := make([]uint8, n)
			if c.Rank() == root {
				copy(buf, want)
			}
			if err := comm.Broadcast(context.Background(), c, buf, root); err != nil {
				return err
			}
			if !bytes.Equal(buf, want) {
				return fmt.Errorf("rank %d received a wrong broadcast of %d bytes from root %d", c.Rank(), n, root)
			}
			return nil
		})
		for r, err := range errs {
			require.NoError(t, err, "rank %d, broadcast of %d bytes from root %d", r, n, root)
		}
	}
}

// noPipeConn is a tcp.Conn (every interface of it) without a pipe:
// WriteSpliced writes nothing and returns an error wrapping
// errors.ErrUnsupported, as a tcp.Conn does when no pipe can be made, and
// counts its calls in calls.
type noPipeConn struct {
	*tcp.Conn
	calls *atomic.Int64
}

func (c *noPipeConn) WriteSpliced([]byte) error {
	c.calls.Add(1)
	return fmt.Errorf("test: no pipe (%w)", errors.ErrUnsupported)
}

// TestSpliceUnavailable: a link whose connection cannot splice (no pipe)
// writes its large frames the other way (staged, then from the shared
// stage of rank 0's replies) and every rank gets every byte; the link
// asks to splice only once.
func TestSpliceUnavailable(t *testing.T) {
	testkit.CheckGoroutines(t)
	const size = 3
	var calls atomic.Int64
	net := acceptWrapping{TCPNetwork: testkit.NewTCPNetwork(), wrap: func(tc *tcp.Conn) transport.Conn {
		return &noPipeConn{Conn: tc, calls: &calls}
	}}
	comms, err := testkit.StartStar(context.Background(), net, size, func(c *star.Config) {
		c.Timeout = 10 * time.Second
	})
	require.NoError(t, err)
	t.Cleanup(func() { testkit.CloseAll(comms) })
	for round, n := range []int{300_000, 300_001, 20_000, 700_000} {
		counts := []int{n, n + 1, n - 1}
		displs := []int{0, n, 2*n + 1}
		total := 3 * n
		for r, err := range allgathervChecked(comms, pattern(total, round), counts, displs) {
			require.NoError(t, err, "rank %d, round %d", r, round)
		}
	}
	require.Equal(t, int64(size-1), calls.Load(), "WriteSpliced calls on rank 0's links: one each, then never again")
}

// allgathervChecked runs one allgatherv of want's bytes (rank r sends
// want[displs[r]:][:counts[r]]) on every rank and returns each rank's
// error, a wrong result included.
func allgathervChecked(comms []comm.Communicator, want []byte, counts, displs []int) []error {
	return testkit.RunRanks(comms, func(c comm.Communicator) error {
		r := c.Rank()
		recv := make([]uint8, len(want))
		if err := comm.Allgatherv(context.Background(), c, want[displs[r]:displs[r]+counts[r]], recv, counts, displs); err != nil {
			return err
		}
		if !bytes.Equal(recv, want) {
			return fmt.Errorf("rank %d received a wrong result of %d bytes", r, len(want))
		}
		return nil
	})
}

// TestPolledReplyRestOverSmallBuffers: a reply of up to 256 KiB that rank 0
// posts without waiting (polling on), to sockets whose buffers take only
// part of it (16 KiB asked, about 32 KiB given), leaves a rest of more than
// 16 KiB to the link's goroutine; that rest is the middle of a frame, not
// a header, and goes out as it is (it used to be taken for a header to
// splice, and every rank failed). Broadcasts of 200 KB from rank 0 and
// allgathervs of 180 KB, both ways (see bothWays), every byte checked.
func TestPolledReplyRestOverSmallBuffers(t *testing.T) {
	bothWays(t, 2, func(t *testing.T) {
		testkit.CheckGoroutines(t)
		const size = 3
		net := testkit.NewTCPNetwork()
		net.Config.BufferSize = 16 << 10
		comms, err := testkit.StartStar(context.Background(), net, size, func(c *star.Config) {
			c.Spin, c.Timeout = 100*time.Microsecond, 10*time.Second
		})
		require.NoError(t, err)
		t.Cleanup(func() { testkit.CloseAll(comms) })
		for round := range 10 {
			want := pattern(200_000, round)
			errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
				buf := make([]uint8, len(want))
				if c.Rank() == 0 {
					copy(buf, want)
				}
				if err := comm.Broadcast(context.Background(), c, buf, 0); err != nil {
					return err
				}
				if !bytes.Equal(buf, want) {
					return fmt.Errorf("rank %d received a wrong broadcast", c.Rank())
				}
				return nil
			})
			for r, err := range errs {
				require.NoError(t, err, "rank %d, broadcast %d", r, round)
			}
			counts, displs := []int{60_000, 60_000, 60_000}, []int{0, 60_000, 120_000}
			for r, err := range allgathervChecked(comms, pattern(180_000, round), counts, displs) {
				require.NoError(t, err, "rank %d, allgatherv %d", r, round)
			}
		}
	})
}
