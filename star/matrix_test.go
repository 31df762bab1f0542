package star_test

import (
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/starcomm/starcomm/star"
	"github.com/starcomm/starcomm/testkit"
	"github.com/starcomm/starcomm/transport/faulty"
)

// TestMatrix runs the failure matrix (see testkit) over the faulty
// transport on a fake clock; `go test -run Matrix -v` shows each cell by
// name. Every cell of the relayed allgatherv must actually relay it.
func TestMatrix(t *testing.T) {
	var relays atomic.Int64
	defer star.SetTestHook(func(rank int, point string) {
		if point == star.HookRelay {
			relays.Add(1)
		}
	})()
	cells := testkit.MatrixCells()
	t.Logf("failure matrix: %d cells", len(cells))
	var polledRelays []string // cells of the polled relay in which rank 0 went on to relay
	for _, cell := range cells {
		t.Run(cell.Name(), func(t *testing.T) {
			before := relays.Load()
			testkit.RunMatrixCell(t, cell)
			// A coordinator's fault fired between collectives may reach
			// it first through a worker's control session (the worker's
			// collective fails at once on it, and says so), before it
			// begins to relay: those cells need not relay.
			mayNotRelay := cell.Side == "coordinator" && cell.When == "between"
			if cell.Op == testkit.OpAllgathervRelayed && relays.Load() == before && !mayNotRelay {
				t.Errorf("the coordinator did not relay the allgatherv")
			}
			if cell.Op == testkit.OpAllgathervPolledRelay && relays.Load() > before {
				polledRelays = append(polledRelays, cell.Name())
			}
		})
	}
	t.Logf("polled relay: rank 0 relayed in %d cells (%v), stored and forwarded in the others", len(polledRelays), polledRelays)
	// Both ways out of the polling must be exercised: relaying what it
	// left (a hung or late worker) and storing and forwarding.
	polledCells := 0
	for _, cell := range cells {
		if cell.Op == testkit.OpAllgathervPolledRelay {
			polledCells++
		}
	}
	if len(polledRelays) == 0 || len(polledRelays) == polledCells {
		t.Errorf("polled relay: rank 0 relayed in %d of %d cells; both ways must occur", len(polledRelays), polledCells)
	}
}

// TestMatrixRealClock runs the crash, reset, system-timeout and corrupt
// cells that strike before a collective's frame, and the barrier's hang
// cells, on the real clock (2 s timeout), and logs each fault's median
// time to fail over every surviving rank, and the survivors' Close times
// after the failure.
func TestMatrixRealClock(t *testing.T) {
	times, closes := testkit.RunMatrixRealClock(t, func(c testkit.Cell) bool {
		if c.Fault == faulty.Hang {
			return c.When == "before" && c.Op == testkit.OpBarrier // 2.5 s each
		}
		return c.When == "before" && c.Fault != faulty.Deadline && c.Fault != faulty.LenTooSmall
	})
	for kind, ds := range times {
		slices.Sort(ds)
		t.Logf("real clock: fault=%v: %d survivor observations, median time to fail %v (max %v)",
			kind, len(ds), ds[len(ds)/2].Round(10*time.Microsecond), ds[len(ds)-1].Round(10*time.Microsecond))
	}
	slices.Sort(closes)
	if len(closes) > 0 {
		t.Logf("real clock: Close after a failure: %d survivor observations, median %v, max %v",
			len(closes), closes[len(closes)/2].Round(time.Microsecond), closes[len(closes)-1].Round(time.Microsecond))
	}
}

// TestMatrixStreamedAllreduce runs the allreduce cells of the failure
// matrix, with the control sessions off and on, with the allreduce
// streamed in 64-byte chunks (the matrix's allreduce of 100 float64s then
// takes 13): every fault, on either side, before, in the middle of and
// between collectives, is found and named as it is when the allreduce is
// stored. A fault in the middle of a frame strikes while rank 0 streams it
// (each such cell must stream; with the control sessions on, its replies
// overlapping the reduction); the others are found at a header, before
// streaming begins, as stored.
func TestMatrixStreamedAllreduce(t *testing.T) {
	defer star.SetStream(1, 64)()
	var streams, replies atomic.Int64
	defer star.SetTestHook(func(rank int, point string) {
		switch point {
		case star.HookStream:
			streams.Add(1)
		case star.HookReply:
			replies.Add(1)
		}
	})()
	cells, mid := 0, 0
	for _, cell := range testkit.MatrixCells() {
		if cell.Op != testkit.OpAllreduce && cell.Op != testkit.OpAllreduceSessions {
			continue
		}
		cells++
		before, repliesBefore := streams.Load(), replies.Load()
		t.Run(cell.Name(), func(t *testing.T) {
			testkit.RunMatrixCell(t, cell)
			if cell.When == "mid" {
				mid++
				if streams.Load() == before {
					t.Errorf("the coordinator did not stream the allreduce")
				}
				if cell.Op == testkit.OpAllreduceSessions && replies.Load() == repliesBefore {
					t.Errorf("the replies did not overlap the reduction")
				}
			}
		})
	}
	t.Logf("%d cells (%d in the middle of a frame), %d streamed allreduces, %d with the replies overlapping", cells, mid, streams.Load(), replies.Load())
	if mid == 0 {
		t.Errorf("no cell strikes in the middle of a frame")
	}
}

// TestMatrixDuplex runs the cells of the failure matrix whose collectives
// have the control sessions on (the relayed allgathervs, the allreduce with
// sessions, streamed) with every worker writing its frame while it reads
// the reply, whatever its size (see worker.exchangeDuplex): every fault is
// found and named as when the frame is written first.
func TestMatrixDuplex(t *testing.T) {
	defer star.SetStream(1, 64)()
	defer star.SetDuplexMin(1)()
	var duplex atomic.Int64
	defer star.SetTestHook(func(rank int, point string) {
		if point == star.HookDuplex {
			duplex.Add(1)
		}
	})()
	cells := 0
	for _, cell := range testkit.MatrixCells() {
		switch cell.Op {
		case testkit.OpAllreduceSessions, testkit.OpAllgathervRelayed, testkit.OpAllgathervPolledRelay:
		default:
			continue
		}
		cells++
		before := duplex.Load()
		t.Run(cell.Name(), func(t *testing.T) {
			testkit.RunMatrixCell(t, cell)
			if cell.When == "mid" && duplex.Load() == before {
				t.Errorf("no worker wrote its frame while it read the reply")
			}
		})
	}
	t.Logf("%d cells, %d duplex exchanges", cells, duplex.Load())
}
