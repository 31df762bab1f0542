package testkit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/star"
	"github.com/starcomm/starcomm/transport/faulty"
)

// The time rows of the failure matrix. The fault rows above strike at a
// byte of a frame; these put time into a job, on the fake clock:
//
//   - when=after-idle (every fault of the collective rows): the links idle
//     for 1.5 timeouts after the warm-up before the collective and its
//     fault. Nothing from before the idle may count against the
//     collective.
//   - idle: no fault; the links idle for 3 timeouts, then the collective
//     succeeds on every rank.
//   - compute-most: the failing rank computes for 90% of the timeout
//     before the collective; every rank succeeds.
//   - compute-over: it computes for 1.5 timeouts; every other rank fails
//     naming it, within [timeout, timeout + 1 s], with a cause satisfying
//     errors.Is(err, os.ErrDeadlineExceeded).
//   - late-join (a worker): its process starts ConnectTimeout/2 late, past
//     the coordinator's HandshakeTimeout; every rank starts and the
//     collective succeeds.
//   - exit-after-failure (a worker): it passes a wrong length, and every
//     rank's process exits the instant its collective fails (all its
//     connections close at once): every survivor names it (in a broadcast
//     from root 0, where only the worker sees the mismatch, every rank
//     names the rank whose frame disagreed: 0).
const (
	timeAfterIdle   = "after-idle"
	timeIdle        = "idle"
	timeComputeMost = "compute-most"
	timeComputeOver = "compute-over"
	timeLateJoin    = "late-join"
	timeExit        = "exit-after-failure"
)

// matrixConnect is the coordinator's connect timeout in the time rows:
// the default, so that HandshakeTimeout (10 s) < a late join (15 s).
const matrixConnect = 30 * time.Second

// timeCells returns the time rows of every collective.
func timeCells() []Cell {
	var cells []Cell
	for _, op := range []string{OpAllgatherv, OpAllreduce, OpBroadcastRoot0, OpBroadcastWorker, OpBarrier} {
		for _, side := range []string{"worker", "coordinator"} {
			for _, k := range []faulty.Kind{faulty.Crash, faulty.Hang, faulty.Reset, faulty.Deadline, faulty.SysTimeout, faulty.CorruptTag} {
				if k == faulty.CorruptTag && side == "worker" && op == OpBroadcastRoot0 {
					continue // a worker sends nothing to corrupt there
				}
				cells = append(cells, Cell{k, op, side, timeAfterIdle})
			}
			for _, when := range []string{timeIdle, timeComputeMost, timeComputeOver} {
				cells = append(cells, Cell{0, op, side, when})
			}
		}
		cells = append(cells, Cell{0, op, "worker", timeLateJoin})
		if op != OpBarrier { // a barrier has no length to get wrong
			cells = append(cells, Cell{0, op, "worker", timeExit})
		}
	}
	return cells
}

// isTimeRow reports whether a cell is a time row without a fault.
func (c Cell) isTimeRow() bool { return c.Fault == 0 }

// runTimeCell runs a time row without a fault.
func runTimeCell(t *testing.T, cell Cell, p matrixParams) {
	failing := cell.failing()
	var exitScript *faulty.Script
	comms, err := StartStar(context.Background(), NewPipeNetwork(), MatrixRanks, func(cfg *star.Config) {
		cfg.Timeout, cfg.ShutdownTimeout, cfg.ConnectTimeout = p.timeout, matrixShutdown, matrixConnect
		cfg.Liveness = -1 // the spec's wire alone
		if cell.When == timeLateJoin && cfg.Rank == failing {
			cfg.Dialer = LateDialer{Dialer: cfg.Dialer, Delay: matrixConnect / 2}
		}
		if cell.When == timeExit {
			if exitScript == nil {
				// Every rank's process can exit at once: all its ends close.
				var fs []faulty.Fault
				for r := range MatrixRanks {
					fs = append(fs, faulty.Fault{Kind: faulty.Crash, Rank: r, Link: -1, Manual: true, WholeRank: true})
				}
				exitScript = newScript(t, fs...)
			}
			if cfg.Listener != nil {
				cfg.Listener = exitScript.WrapListener(cfg.Listener)
			}
			if cfg.Dialer != nil {
				cfg.Dialer = exitScript.WrapDialer(cfg.Dialer, cfg.Rank)
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
	if cell.When == timeIdle {
		time.Sleep(3 * p.timeout)
	}
	out := make([]rankOutcome, MatrixRanks)
	begin := time.Now()
	RunRanks(comms, func(c comm.Communicator) error {
		r := c.Rank()
		if r == failing {
			switch cell.When {
			case timeComputeMost:
				time.Sleep(p.timeout * 9 / 10)
			case timeComputeOver:
				time.Sleep(p.timeout * 3 / 2)
			}
		}
		o := newOpRun(cell.Op, r)
		if cell.When == timeExit && r == failing {
			o = wrongLength(cell.Op, r)
		}
		err := o.run(ctx, c)
		if err == nil {
			if cerr := o.check(); cerr != nil {
				err = fmt.Errorf("WRONG RESULT: %w", cerr)
			} else if cell.When == timeComputeOver || cell.When == timeExit {
				// A rank whose collective completed learns of the
				// failure at its next collective.
				err = c.Barrier(ctx)
			}
		}
		out[r].took = time.Since(begin)
		out[r].err = err
		if cell.When == timeExit && err != nil {
			exitScript.Fire(r) // the process exits the instant it sees the error
		}
		return nil
	})
	switch cell.When {
	case timeIdle, timeComputeMost, timeLateJoin:
		for r, o := range out {
			if o.err != nil {
				t.Errorf("rank %d: %v, want success", r, o.err)
			}
		}
	case timeComputeOver:
		for r, o := range out {
			if r == failing {
				continue
			}
			checkBlame(t, r, o.err, failing)
			if !errors.Is(o.err, os.ErrDeadlineExceeded) {
				t.Errorf("rank %d: cause is not a deadline: %v", r, o.err)
			}
			if o.took < p.timeout || o.took > p.timeout+time.Second {
				t.Errorf("rank %d: failed after %v, want within [%v, %v]", r, o.took, p.timeout, p.timeout+time.Second)
			}
		}
	case timeExit:
		blamed := failing
		if cell.Op == OpBroadcastRoot0 {
			// Only the worker sees the mismatch, in the coordinator's
			// frame, and names the rank that sent it (one mismatch cannot
			// tell whose arguments are wrong): every rank names rank 0.
			blamed = 0
		}
		for r, o := range out {
			if r == failing {
				continue
			}
			var ibs *comm.InvalidBufferSizeError
			if errors.As(o.err, &ibs) {
				// The coordinator read the wrong frame itself.
				if !strings.Contains(ibs.Detail, fmt.Sprintf("from rank %d", failing)) {
					t.Errorf("rank %d: %v does not name rank %d", r, o.err, failing)
				}
				continue
			}
			checkBlame(t, r, o.err, blamed)
		}
	}
}

// checkBlame asserts err is a CollectiveFailedError (code 0) naming rank.
func checkBlame(t *testing.T, r int, err error, rank int) {
	t.Helper()
	var cf *comm.CollectiveFailedError
	switch {
	case !errors.As(err, &cf):
		t.Errorf("rank %d: %T %v, want CollectiveFailed naming rank %d", r, err, err, rank)
	case cf.Rank != rank || cf.Code != 0:
		t.Errorf("rank %d: names rank %d (code %d), want %d: %v", r, cf.Rank, cf.Code, rank, err)
	}
}

// wrongLength is the collective of newOpRun(op, rank) with one element
// too many: the rank disagrees with the others on the length.
func wrongLength(op string, rank int) *opRun {
	o := newOpRun(op, rank)
	switch op {
	case OpAllgatherv:
		counts, displs := make([]int, MatrixRanks), make([]int, MatrixRanks)
		for r := range counts {
			counts[r], displs[r] = matrixElems, r*matrixElems
		}
		counts[rank]++
		send := make([]float64, matrixElems+1)
		recv := make([]float64, MatrixRanks*matrixElems+1)
		o.run = func(ctx context.Context, c comm.Communicator) error {
			return comm.Allgatherv(ctx, c, send, recv, counts, displs)
		}
	case OpAllreduce:
		o.run = func(ctx context.Context, c comm.Communicator) error {
			return comm.Allreduce(ctx, c, make([]float64, matrixReduce+1), make([]float64, matrixReduce+1), comm.Sum)
		}
	case OpBroadcastRoot0, OpBroadcastWorker:
		root := 0
		if op == OpBroadcastWorker {
			root = MatrixRanks - 1
		}
		o.run = func(ctx context.Context, c comm.Communicator) error {
			return comm.Broadcast(ctx, c, make([]float64, matrixElems+1), root)
		}
	}
	o.check = func() error { return nil }
	o.sendCopy = o.send
	return o
}
