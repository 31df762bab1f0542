package testkit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/star"
	"github.com/starcomm/starcomm/transport/faulty"
)

// The liveness rows of the failure matrix: the control session on, with
// the default liveness timeout (10 s) and a collective timeout of an hour,
// on the fake clock only. In each fault row the failing rank (the last worker,
// or the coordinator) meets its fault after the warm-up and then computes
// for two liveness timeouts before it calls the collective; every other
// rank calls it at once. Its next collective fails at once.
//
//   - live-freeze: the whole process freezes (faulty's WholeRank Hang: no
//     data, no heartbeats, on both of its connections).
//   - live-drop-heartbeats: its control connection(s) stay open but carry
//     nothing (faulty's Hang with Control): a cut link that sends no RST.
//   - live-close-control: only its control connection(s) close, without
//     the farewell a rank sends when it closes or fails (faulty's Crash
//     with Control), as they do when its process ends: its data links
//     still work, and it is computing, so only the control session can
//     tell.
//   - live-compute (no fault): the failing rank computes for 10 minutes
//     before the collective, the links idle as long: every rank succeeds.
//
// In the first two every survivor must fail within [0.9, 1] liveness
// timeouts + 1 s (silence counts from the last heartbeat heard, up to a
// tenth of the timeout before the fault), naming the failing rank, with a
// cause that says "unresponsive" and matches os.ErrDeadlineExceeded. In
// live-close-control every survivor must fail within 1 s (the grace
// before a connection's end is taken for the process's, plus a failing
// rank's bounded wait for its Aborts), naming the failing rank, with a
// cause that says "process ended" and matches io.EOF.
const (
	liveFreeze   = "live-freeze"
	liveClose    = "live-close-control"
	liveDrop     = "live-drop-heartbeats"
	liveCompute  = "live-compute"
	liveTimeout  = time.Hour
	liveLiveness = 10 * time.Second
)

// liveCells returns the liveness rows of every collective.
func liveCells() []Cell {
	var cells []Cell
	for _, op := range []string{OpAllgatherv, OpAllreduce, OpBroadcastRoot0, OpBroadcastWorker, OpBarrier} {
		for _, side := range []string{"worker", "coordinator"} {
			cells = append(cells,
				Cell{faulty.Hang, op, side, liveFreeze},
				Cell{faulty.Crash, op, side, liveClose},
				Cell{faulty.Hang, op, side, liveDrop},
				Cell{0, op, side, liveCompute})
		}
	}
	return cells
}

// isLiveRow reports whether a cell is a liveness row.
func (c Cell) isLiveRow() bool { return strings.HasPrefix(c.When, "live-") }

// liveFault is the failing rank's fault in a liveness row (fired by hand).
func (c Cell) liveFault() faulty.Fault {
	f := faulty.Fault{Kind: c.Fault, Rank: c.failing(), Link: -1, Manual: true}
	if c.When == liveFreeze {
		f.WholeRank = true
	} else {
		f.Control = true
	}
	return f
}

// runLiveCell runs a liveness row.
func runLiveCell(t *testing.T, cell Cell) {
	failing := cell.failing()
	var s *faulty.Script
	if cell.Fault != 0 {
		s = newScript(t, cell.liveFault())
	}
	comms, err := StartStar(context.Background(), NewPipeNetwork(), MatrixRanks, func(cfg *star.Config) {
		cfg.Timeout, cfg.ShutdownTimeout, cfg.Liveness = liveTimeout, matrixShutdown, liveLiveness
		if s != nil {
			if cfg.Listener != nil {
				cfg.Listener = s.WrapListener(cfg.Listener)
			}
			if cfg.Dialer != nil {
				cfg.Dialer = s.WrapDialer(cfg.Dialer, cfg.Rank)
			}
		}
	})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	defer CloseAll(comms)
	ctx := context.Background()
	for r, err := range RunRanks(comms, func(c comm.Communicator) error { return c.Barrier(ctx) }) {
		if err != nil {
			t.Fatalf("warm-up barrier on rank %d: %v", r, err)
		}
	}
	// The control sessions open in the background at the warm-up's reply;
	// a rank is watched once its session is up (at once on the fake clock,
	// where they are up once every goroutine is blocked).
	synctest.Wait()
	out := make([]rankOutcome, MatrixRanks)
	begin := time.Now()
	RunRanks(comms, func(c comm.Communicator) error {
		r := c.Rank()
		if r == failing {
			if s != nil {
				s.Fire(r)
				time.Sleep(2 * liveLiveness)
				if cell.When == liveFreeze {
					return nil // a frozen process calls nothing
				}
			} else {
				time.Sleep(10 * time.Minute)
			}
		}
		o := newOpRun(cell.Op, r)
		err := o.run(ctx, c)
		out[r].inOp = err != nil
		if err == nil {
			if cerr := o.check(); cerr != nil {
				err = fmt.Errorf("WRONG RESULT: %w", cerr)
			} else if cell.Fault != 0 {
				// A rank whose collective completed without the failing
				// rank learns of it in its next collective.
				err = c.Barrier(ctx)
			}
		}
		out[r].err, out[r].took = err, time.Since(begin)
		if err != nil {
			t0 := time.Now()
			out[r].after = c.Barrier(ctx)
			out[r].afterIn = time.Since(t0)
		}
		return nil
	})
	if s != nil && s.Fired() == 0 {
		t.Fatalf("no fault fired: %v", cell.liveFault())
	}
	for r, o := range out {
		if cell.Fault == 0 {
			if o.err != nil {
				t.Errorf("rank %d: %v, want success", r, o.err)
			}
			continue
		}
		if r == failing {
			continue // the failed rank itself: anything goes
		}
		checkBlame(t, r, o.err, failing)
		if o.err == nil {
			continue
		}
		if cell.When == liveClose {
			if !errors.Is(o.err, io.EOF) {
				t.Errorf("rank %d: cause is not io.EOF: %v", r, o.err)
			}
			if !strings.Contains(o.err.Error(), "process ended") {
				t.Errorf("rank %d: the error does not say the process ended: %v", r, o.err)
			}
			if o.took > time.Second {
				t.Errorf("rank %d: failed after %v, want within 1s", r, o.took)
			}
		} else {
			if !errors.Is(o.err, os.ErrDeadlineExceeded) {
				t.Errorf("rank %d: cause is not a deadline: %v", r, o.err)
			}
			if !strings.Contains(o.err.Error(), "unresponsive") {
				t.Errorf("rank %d: the error does not say unresponsive: %v", r, o.err)
			}
			if lo, hi := liveLiveness*9/10, liveLiveness+time.Second; o.took < lo || o.took > hi {
				t.Errorf("rank %d: failed after %v, want within [%v, %v]", r, o.took, lo, hi)
			}
		}
		if o.after == nil {
			t.Errorf("rank %d: a collective after the failure succeeded", r)
		} else if o.afterIn > 0 {
			t.Errorf("rank %d: the collective after the failure took %v, want at once", r, o.afterIn)
		}
	}
}
