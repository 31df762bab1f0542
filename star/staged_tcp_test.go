package star_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/star"
	"github.com/starcomm/starcomm/testkit"
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
// payload), read here by a coordinator of the test's over real TCP.
func TestStagedFrameBytes(t *testing.T) {
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
// regions, reach every worker whole and right, over real TCP.
func TestStagedScatter(t *testing.T) {
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
		want := pattern(total, i)
		errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
			r := c.Rank()
			recv := make([]uint8, total)
			if err := comm.Allgatherv(context.Background(), c, want[displs[r]:displs[r]+counts[r]], recv, counts, displs); err != nil {
				return err
			}
			if !bytes.Equal(recv, want) {
				return fmt.Errorf("rank %d received a wrong result of %d bytes", r, total)
			}
			return nil
		})
		for r, err := range errs {
			require.NoError(t, err, "rank %d, allgatherv of %d bytes", r, total)
		}
	}
}

// TestStagedBroadcast: broadcasts of every size around the staged range
// and past it, from every root in turn (the coordinator's copy goes to
// every worker but the root), reach every rank whole and right over real
// TCP.
func TestStagedBroadcast(t *testing.T) {
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
