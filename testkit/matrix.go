package testkit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/star"
	"github.com/starcomm/starcomm/transport/faulty"
)

// The failure matrix: every fault, in every
// collective plus start-up and shutdown, on a worker's link or on the
// coordinator, before a collective's frame, in the middle of it, or between
// collectives. Each cell runs 4 ranks over pipes wrapped by transport/faulty
// inside a synctest bubble, so the spec's 60 s timeout costs nothing and
// detection times are exact, and asserts on every surviving rank: the error
// type (CollectiveFailed with code 0, or InvalidBufferSize for a bad LEN,
// as the README's "Errors" table says), the cause via errors.Is, the rank named,
// the time to fail, fail-stop afterwards, a prompt Close, the caller's send
// buffers unchanged, a correct result where a rank succeeded, and no
// goroutine left (synctest.Test fails otherwise).

// Matrix parameters.
const (
	MatrixRanks    = 4
	MatrixTimeout  = 60 * time.Second
	matrixShutdown = time.Second
	matrixElems    = 1000 // float64 elements per rank in allgatherv and broadcast
	// matrixRelayElems: float64 elements per rank in the relayed
	// allgatherv (320 kB per rank, 1.28 MB in all: the coordinator relays
	// an AllgathervRecv of 1 MiB or more).
	matrixRelayElems = 40000
	// matrixPolledRelayElems: float64 elements per rank in the relayed
	// allgatherv whose regions can be polled (262,144 bytes, the most that
	// is polled, 1 MiB in all).
	matrixPolledRelayElems = 32768
	matrixReduce           = 100 // float64 elements in allreduce
	matrixDelay            = 3 * time.Second
)

// Matrix operations.
const (
	OpAllgatherv = "allgatherv"
	// OpAllgathervRelayed is an allgatherv large enough for the coordinator
	// to relay it (see package star), run with the control sessions on
	// (with a liveness timeout of ten collective timeouts, so the
	// collective's own timeout detects hangs first): a failure in the
	// middle of a region cuts every worker's frame short, and the Abort
	// goes out of band.
	OpAllgathervRelayed = "allgatherv-relayed"
	// OpAllgathervPolledRelay is a relayed allgatherv whose regions are
	// small enough to poll (256 KiB per rank, 1 MiB in all): the
	// coordinator polls the frames first, for at most 1 ms, and stores
	// and forwards the result if all are in by then, relaying the rest
	// from where polling left it otherwise (control sessions on, as for
	// OpAllgathervRelayed).
	OpAllgathervPolledRelay = "allgatherv-polled-relay"
	OpAllreduce             = "allreduce"
	// OpAllreduceSessions is OpAllreduce with the control sessions on (as
	// for OpAllgathervRelayed): a coordinator that streams the reduction
	// (see package star) then overlaps the replies with it, and a failure
	// in the middle cuts the replies short, the Abort going out of band.
	OpAllreduceSessions = "allreduce-sessions"
	OpBroadcastRoot0    = "broadcast-root0"
	OpBroadcastWorker   = "broadcast-worker"
	OpBarrier           = "barrier"
	OpHandshake         = "handshake"
	OpShutdown          = "shutdown"
)

// Cell is one cell of the failure matrix.
type Cell struct {
	Fault faulty.Kind
	Op    string
	// Side is "worker" (the last rank's link fails) or "coordinator".
	Side string
	// When is "before" (at the start of the collective's frame), "mid"
	// (inside it) or "between" (fired between two collectives).
	When string
}

// Name is the cell's subtest name.
func (c Cell) Name() string {
	fault := c.Fault.String()
	if c.Fault == 0 {
		fault = "none"
	}
	return fmt.Sprintf("op=%s/side=%s/fault=%s/when=%s", c.Op, c.Side, fault, c.When)
}

// failing is the rank whose failure the cell simulates.
func (c Cell) failing() int {
	if c.Side == "coordinator" {
		return 0
	}
	return MatrixRanks - 1
}

// MatrixCells returns every cell of the matrix.
func MatrixCells() []Cell {
	var cells []Cell
	ops := []string{OpAllgatherv, OpAllgathervRelayed, OpAllgathervPolledRelay, OpAllreduce, OpAllreduceSessions, OpBroadcastRoot0, OpBroadcastWorker, OpBarrier}
	corrupt := []faulty.Kind{faulty.CorruptTag, faulty.LenTooLarge, faulty.LenTooSmall}
	for _, op := range ops {
		for _, side := range []string{"worker", "coordinator"} {
			for _, k := range []faulty.Kind{faulty.Crash, faulty.Hang, faulty.Reset, faulty.Deadline, faulty.SysTimeout} {
				for _, when := range []string{"before", "mid", "between"} {
					cells = append(cells, Cell{k, op, side, when})
				}
			}
			// A worker sends nothing in a broadcast from root 0, so it
			// cannot corrupt a frame there.
			if !(side == "worker" && op == OpBroadcastRoot0) {
				for _, k := range corrupt {
					for _, when := range []string{"before", "between"} {
						cells = append(cells, Cell{k, op, side, when})
					}
				}
			}
			cells = append(cells, Cell{faulty.Delay, op, side, "before"})
		}
	}
	for _, side := range []string{"worker", "coordinator"} {
		// Network faults on the link to the last rank are the worker-side
		// cells; the coordinator side is its crash or hang.
		kinds := []faulty.Kind{faulty.Crash, faulty.Hang}
		if side == "worker" {
			kinds = append(kinds, faulty.Reset, faulty.Deadline, faulty.SysTimeout, faulty.CorruptTag, faulty.LenTooLarge, faulty.LenTooSmall, faulty.RefuseDial)
		}
		for _, k := range kinds {
			cells = append(cells, Cell{k, OpHandshake, side, "before"})
			if k == faulty.Crash && side == "worker" {
				cells = append(cells, Cell{k, OpHandshake, side, "mid"})
			}
		}
		for _, k := range []faulty.Kind{faulty.Crash, faulty.Hang, faulty.Reset} {
			cells = append(cells, Cell{k, OpShutdown, side, "between"})
		}
	}
	return append(append(cells, timeCells()...), liveCells()...)
}

// observerFault reports whether the fault is a network event seen by the
// healthy side (reset, deadline, the system's timeout) rather than something
// the failing side does (crash, hang, corrupt, delay).
func observerFault(k faulty.Kind) bool {
	return k == faulty.Reset || k == faulty.Deadline || k == faulty.SysTimeout
}

// payloadLen is the payload of the op's frame on the failing link.
func payloadLen(op string) int {
	switch op {
	case OpAllgatherv, OpBroadcastRoot0, OpBroadcastWorker:
		return 8 * matrixElems
	case OpAllgathervRelayed:
		return 8 * matrixRelayElems
	case OpAllgathervPolledRelay:
		return 8 * matrixPolledRelayElems
	case OpAllreduce, OpAllreduceSessions:
		return 8*matrixReduce + 1
	}
	return 0
}

// faults places the cell's faults. Frame 2 of each direction is the
// collective under test (frame 0: Handshake/Ack; frame 1: the warm-up
// barrier).
func (c Cell) faults() []faulty.Fault {
	k := c.Fault
	offset := 0
	if c.When == "mid" {
		offset = 5 + payloadLen(c.Op)/2
		if payloadLen(c.Op) == 0 {
			offset = 2 // inside the header
		}
	}
	mk := func(rank, link int, dir faulty.Dir) faulty.Fault {
		f := faulty.Fault{Kind: k, Rank: rank, Link: link, Dir: dir, Frame: 2, Offset: offset,
			Manual: c.When == "between", Delay: matrixDelay,
			WholeRank: k == faulty.Crash || k == faulty.Hang}
		return f
	}
	last := MatrixRanks - 1
	var fs []faulty.Fault
	switch {
	case c.Side == "worker" && !observerFault(k):
		dir := faulty.Write
		if c.Op == OpBroadcastRoot0 {
			dir = faulty.Read // it only receives
		}
		fs = append(fs, mk(last, 0, dir))
	case c.Side == "worker": // the coordinator sees its link to the last rank fail
		dir := faulty.Read
		if c.Op == OpBroadcastRoot0 {
			dir = faulty.Write
		}
		fs = append(fs, mk(0, last, dir))
	case !observerFault(k): // the coordinator fails on its replies
		for r := 1; r < MatrixRanks; r++ {
			if c.Op == OpBroadcastWorker && r == last {
				continue // the root's link carries no reply
			}
			fs = append(fs, mk(0, r, faulty.Write))
		}
	default: // every worker sees its link to the coordinator fail
		for r := 1; r < MatrixRanks; r++ {
			dir := faulty.Read
			if c.Op == OpBroadcastWorker && r == last {
				dir = faulty.Write // the root only sends
			}
			fs = append(fs, mk(r, 0, dir))
		}
	}
	return fs
}

// wantCause reports whether err carries the cause the cell's fault must
// produce (on the rank that saw it, or through an Abort on the others).
func (c Cell) wantCause(err error) bool {
	switch c.Fault {
	case faulty.Crash:
		return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
			errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)
	case faulty.Hang, faulty.Deadline, faulty.SysTimeout:
		// Every no-progress failure, the system's own (ETIMEDOUT)
		// included, is a deadline.
		return errors.Is(err, os.ErrDeadlineExceeded)
	case faulty.Reset:
		return errors.Is(err, syscall.ECONNRESET)
	case faulty.CorruptTag:
		return errors.Is(err, star.ErrUnexpectedTag)
	}
	return true // LEN faults: the type is the check
}

// RunMatrix runs every matrix cell as a subtest, each in a synctest
// bubble: a fake clock, exact times, and a failure if any goroutine is left.
func RunMatrix(t *testing.T) {
	cells := MatrixCells()
	t.Logf("failure matrix: %d cells", len(cells))
	for _, cell := range cells {
		t.Run(cell.Name(), func(t *testing.T) { RunMatrixCell(t, cell) })
	}
}

// RunMatrixCell runs one matrix cell in a synctest bubble.
func RunMatrixCell(t *testing.T, cell Cell) {
	SyncTest(t, func(t *testing.T) {
		runCell(t, cell, matrixParams{timeout: MatrixTimeout})
	})
}

// RealClockTimeout is the collective timeout of RunMatrixRealClock.
const RealClockTimeout = 2 * time.Second

// RunMatrixRealClock runs the collective cells of the matrix that keep
// accept (nil: all) on the real clock with a 2 s timeout, checks for
// leaked goroutines, and returns every survivor's time to fail, per fault,
// and every survivor's Close time after the failure, so a test can report
// real detection and Close times.
func RunMatrixRealClock(t *testing.T, accept func(Cell) bool) (times map[faulty.Kind][]time.Duration, closes []time.Duration) {
	times = map[faulty.Kind][]time.Duration{}
	for _, cell := range MatrixCells() {
		if cell.Op == OpHandshake || cell.Op == OpShutdown || cell.Op == OpAllgathervRelayed || cell.Op == OpAllgathervPolledRelay || cell.Op == OpAllreduceSessions || cell.Fault == faulty.Delay || cell.isTimeRow() || cell.isLiveRow() || cell.When == timeAfterIdle || (accept != nil && !accept(cell)) {
			continue
		}
		t.Run(cell.Name(), func(t *testing.T) {
			CheckGoroutines(t)
			p := matrixParams{timeout: RealClockTimeout, real: true, times: map[int]time.Duration{}, closes: &closes}
			runCell(t, cell, p)
			for _, d := range p.times {
				times[cell.Fault] = append(times[cell.Fault], d)
			}
		})
	}
	return times, closes
}

type matrixParams struct {
	timeout time.Duration
	real    bool                  // on the real clock: bounds get slack for scheduling
	times   map[int]time.Duration // survivors' times to fail, when not nil
	closes  *[]time.Duration      // survivors' Close times after the failure, when not nil
}

func runCell(t *testing.T, cell Cell, p matrixParams) {
	if cell.isLiveRow() {
		runLiveCell(t, cell)
		return
	}
	if cell.isTimeRow() {
		runTimeCell(t, cell, p)
		return
	}
	switch cell.Op {
	case OpHandshake:
		runHandshakeCell(t, cell)
	case OpShutdown:
		runShutdownCell(t, cell)
	default:
		runOpCell(t, cell, p)
	}
}

// startFaulty starts the ranks with the script's faults attached.
func startFaulty(t *testing.T, s *faulty.Script) ([]comm.Communicator, error) {
	return startFaultyWith(t, s, MatrixTimeout)
}

func startFaultyWith(t *testing.T, s *faulty.Script, timeout time.Duration) ([]comm.Communicator, error) {
	return startFaultyOp(t, s, timeout, "")
}

// sessionsOn reports whether op's cells run with the control sessions on.
func sessionsOn(op string) bool {
	return op == OpAllgathervRelayed || op == OpAllgathervPolledRelay || op == OpAllreduceSessions
}

// startFaultyOp starts the ranks for a cell of op: the control sessions
// are off, except for the relayed allgatherv, which needs them, and
// OpAllreduceSessions.
func startFaultyOp(t *testing.T, s *faulty.Script, timeout time.Duration, op string) ([]comm.Communicator, error) {
	return StartStar(context.Background(), NewPipeNetwork(), MatrixRanks, func(cfg *star.Config) {
		cfg.Timeout = timeout
		cfg.ShutdownTimeout = matrixShutdown
		cfg.Liveness = -1 // the spec's wire alone: the liveness rows have their own cells
		if sessionsOn(op) {
			cfg.Liveness = 10 * timeout
		}
		if cfg.Listener != nil {
			cfg.Listener = s.WrapListener(cfg.Listener)
		}
		if cfg.Dialer != nil {
			cfg.Dialer = s.WrapDialer(cfg.Dialer, cfg.Rank)
		}
	})
}

// opRun is one rank's collective with its inputs and a check of its output.
type opRun struct {
	send, recv, sendCopy []float64
	run                  func(ctx context.Context, c comm.Communicator) error
	check                func() error
}

func newOpRun(op string, rank int) *opRun {
	o := &opRun{}
	val := func(r, i int) float64 { return float64(r*100000 + i) }
	switch op {
	case OpAllgatherv, OpAllgathervRelayed, OpAllgathervPolledRelay:
		n := matrixElems
		switch op {
		case OpAllgathervRelayed:
			n = matrixRelayElems
		case OpAllgathervPolledRelay:
			n = matrixPolledRelayElems
		}
		counts, displs := make([]int, MatrixRanks), make([]int, MatrixRanks)
		for r := range counts {
			counts[r], displs[r] = n, r*n
		}
		o.send = make([]float64, n)
		for i := range o.send {
			o.send[i] = val(rank, i)
		}
		o.recv = make([]float64, MatrixRanks*n)
		o.run = func(ctx context.Context, c comm.Communicator) error {
			return comm.Allgatherv(ctx, c, o.send, o.recv, counts, displs)
		}
		o.check = func() error {
			for i, v := range o.recv {
				if v != val(i/n, i%n) {
					return fmt.Errorf("recv[%d] = %v, want %v", i, v, val(i/n, i%n))
				}
			}
			return nil
		}
	case OpAllreduce, OpAllreduceSessions:
		o.send = make([]float64, matrixReduce)
		for i := range o.send {
			o.send[i] = val(rank, i)
		}
		o.recv = make([]float64, matrixReduce)
		o.run = func(ctx context.Context, c comm.Communicator) error {
			return comm.Allreduce(ctx, c, o.send, o.recv, comm.Sum)
		}
		o.check = func() error {
			want := ReduceInRankOrder(MatrixRanks, func(r int) []float64 {
				d := make([]float64, matrixReduce)
				for i := range d {
					d[i] = val(r, i)
				}
				return d
			})
			return same("allreduce", o.recv, want)
		}
	case OpBroadcastRoot0, OpBroadcastWorker:
		root := 0
		if op == OpBroadcastWorker {
			root = MatrixRanks - 1
		}
		o.recv = make([]float64, matrixElems)
		if rank == root {
			for i := range o.recv {
				o.recv[i] = val(root, i)
			}
			o.send = o.recv // the root's buffer is its input
		}
		o.run = func(ctx context.Context, c comm.Communicator) error {
			return comm.Broadcast(ctx, c, o.recv, root)
		}
		o.check = func() error {
			for i, v := range o.recv {
				if v != val(root, i) {
					return fmt.Errorf("buf[%d] = %v, want %v", i, v, val(root, i))
				}
			}
			return nil
		}
	default:
		o.run = func(ctx context.Context, c comm.Communicator) error { return c.Barrier(ctx) }
		o.check = func() error { return nil }
	}
	o.sendCopy = slices.Clone(o.send)
	return o
}

type rankOutcome struct {
	err     error         // the first error: of the collective, or of the probe after it
	inOp    bool          // err came from the collective itself
	took    time.Duration // from the collective's start to err (or to success)
	after   error         // a collective after the failure (fail-stop)
	afterIn time.Duration
}

// newScript returns a script of faults, failing t if one of them can never
// fire (a cell that injects nothing would pass for the wrong reason).
func newScript(t testing.TB, faults ...faulty.Fault) *faulty.Script {
	t.Helper()
	s := faulty.NewScript(faults...)
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	return s
}

func runOpCell(t *testing.T, cell Cell, p matrixParams) {
	s := newScript(t, cell.faults()...)
	comms, err := startFaultyOp(t, s, p.timeout, cell.Op)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	ctx := context.Background()
	// Warm-up: one barrier, so frame 2 is the collective under test.
	for r, err := range RunRanks(comms, func(c comm.Communicator) error { return c.Barrier(ctx) }) {
		if err != nil {
			t.Fatalf("warm-up barrier on rank %d: %v", r, err)
		}
	}
	if sessionsOn(cell.Op) {
		// The control sessions open in the background at the warm-up's
		// reply; on the fake clock they are up once every goroutine is
		// blocked.
		synctest.Wait()
	}
	switch cell.When {
	case "between":
		fireAll(s, cell.faults())
	case timeAfterIdle:
		time.Sleep(p.timeout * 3 / 2) // every link idles longer than the timeout
	}
	runs := make([]*opRun, MatrixRanks)
	out := make([]rankOutcome, MatrixRanks)
	begin := time.Now()
	RunRanks(comms, func(c comm.Communicator) error {
		r := c.Rank()
		o := newOpRun(cell.Op, r)
		runs[r] = o
		err := o.run(ctx, c)
		out[r].inOp = err != nil
		if err == nil {
			if cerr := o.check(); cerr != nil {
				out[r].err = fmt.Errorf("WRONG RESULT: %w", cerr)
				return nil
			}
			// A rank whose collective completed learns of the failure at
			// its next collective.
			err = c.Barrier(ctx)
		}
		out[r].err, out[r].took = err, time.Since(begin)
		if err != nil {
			t0 := time.Now()
			out[r].after = c.Barrier(ctx)
			out[r].afterIn = time.Since(t0)
		}
		return nil
	})
	if s.Fired() == 0 {
		t.Fatalf("no fault fired: %v", cell.faults())
	}
	// Every survivor's Close, after the failure: prompt (its Aborts went
	// out when the collective failed; Close only closes).
	closeTook := make([]time.Duration, MatrixRanks)
	RunRanks(comms, func(c comm.Communicator) error {
		begin := time.Now()
		err := c.Close()
		closeTook[c.Rank()] = time.Since(begin)
		return err
	})
	for r, d := range closeTook {
		switch {
		case cell.Fault == faulty.Delay: // no failure: the graceful shutdown
			if d > matrixShutdown+slack(p) {
				t.Errorf("rank %d: Close took %v, want <= %v", r, d, matrixShutdown)
			}
		case !p.real && d > 0:
			// After a failure Close only closes: on the fake clock it
			// takes no time at all.
			t.Errorf("rank %d: Close after the failure took %v, want at once", r, d)
		case d > slack(p):
			t.Errorf("rank %d: Close after the failure took %v, want at once (<= %v)", r, d, slack(p))
		}
		if p.closes != nil && r != cell.failing() && cell.Fault != faulty.Delay {
			*p.closes = append(*p.closes, d)
		}
	}

	failing := cell.failing()
	for r := range MatrixRanks {
		o := runs[r]
		if !slices.Equal(o.send, o.sendCopy) && !(cell.Op == OpBroadcastWorker && r == MatrixRanks-1 && !out[r].inOp) {
			t.Errorf("rank %d: the caller's send buffer changed", r)
		}
		if r == failing {
			continue // the failed rank itself: anything goes
		}
		checkSurvivor(t, cell, r, out[r], p)
		if p.times != nil {
			p.times[r] = out[r].took
		}
	}
}

// slack is the scheduling allowance on the real clock (none on the fake).
func slack(p matrixParams) time.Duration {
	if p.real {
		return 500 * time.Millisecond
	}
	return 100 * time.Millisecond
}

// fireAll fires the manual faults of every rank that carries one.
func fireAll(s *faulty.Script, fs []faulty.Fault) {
	seen := map[int]bool{}
	for _, f := range fs {
		if !seen[f.Rank] {
			seen[f.Rank] = true
			s.Fire(f.Rank)
		}
	}
}

func checkSurvivor(t *testing.T, cell Cell, r int, o rankOutcome, p matrixParams) {
	t.Helper()
	err := o.err
	if cell.Fault == faulty.Delay {
		if err != nil {
			t.Errorf("rank %d: a delay is not a failure, got %v", r, err)
		}
		return
	}
	if err == nil {
		t.Errorf("rank %d: no error after the fault", r)
		return
	}
	if strings.HasPrefix(err.Error(), "WRONG RESULT") {
		t.Errorf("rank %d: %v", r, err)
		return
	}
	if err == io.EOF || err == io.ErrClosedPipe || err == io.ErrUnexpectedEOF {
		t.Errorf("rank %d: bare %v escaped the API", r, err)
	}
	var cf *comm.CollectiveFailedError
	var ibs *comm.InvalidBufferSizeError
	switch {
	case errors.As(err, &ibs):
		if cell.Fault != faulty.LenTooLarge && cell.Fault != faulty.LenTooSmall {
			t.Errorf("rank %d: InvalidBufferSize for a %v fault: %v", r, cell.Fault, err)
		}
	case errors.As(err, &cf):
		if cf.Code != 0 {
			t.Errorf("rank %d: code %d, want 0", r, cf.Code)
		}
		// When the network around the coordinator fails, a survivor that
		// learns it from the coordinator's Abort gets the coordinator's
		// view: the worker whose link it saw die first, and how.
		var ab *star.AbortError
		relayed := cell.Side == "coordinator" && observerFault(cell.Fault) && errors.As(err, &ab) &&
			cf.Rank > 0 && slices.ContainsFunc(cell.faults(), func(f faulty.Fault) bool { return f.Rank == cf.Rank })
		if cf.Rank != cell.failing() && !relayed {
			t.Errorf("rank %d: names rank %d, want %d: %v", r, cf.Rank, cell.failing(), err)
		}
		crashLike := Cell{Fault: faulty.Crash}
		if !cell.wantCause(err) && !(relayed && crashLike.wantCause(err)) {
			t.Errorf("rank %d: cause of %v fault not found by errors.Is in %v", r, cell.Fault, err)
		}
	default:
		t.Errorf("rank %d: %T %v, want CollectiveFailed or InvalidBufferSize", r, err, err)
	}
	// Time to fail: a hang within [timeout, timeout + 1 s]; anything else
	// far below the timeout (exactly 0 on the fake clock, where only timers
	// move time).
	if cell.Fault == faulty.Hang {
		if o.took < p.timeout || o.took > p.timeout+time.Second {
			t.Errorf("rank %d: hang detected after %v, want within [%v, %v]", r, o.took, p.timeout, p.timeout+time.Second)
		}
	} else if o.took > p.timeout/4 {
		t.Errorf("rank %d: failed after %v, want far below the %v timeout", r, o.took, p.timeout)
	}
	// Fail-stop: the next call fails at once.
	if o.after == nil {
		t.Errorf("rank %d: a collective after the failure succeeded", r)
	} else if o.afterIn > slack(p)/10 {
		t.Errorf("rank %d: the collective after the failure took %v, want at once", r, o.afterIn)
	}
}

// runHandshakeCell injects the fault in the last rank's start-up (or the
// coordinator's answer to it) and checks that every rank fails start-up or
// its first collective, naming the right rank, and that nothing hangs.
func runHandshakeCell(t *testing.T, cell Cell) {
	last := MatrixRanks - 1
	f := faulty.Fault{Kind: cell.Fault, Rank: last, Link: 0, Dir: faulty.Write, Frame: 0}
	switch {
	case cell.Side == "coordinator":
		f.Rank, f.Link, f.WholeRank = 0, last, true // the coordinator fails answering
	case observerFault(cell.Fault):
		f.Dir = faulty.Read
	}
	if cell.When == "mid" {
		f.Offset = 7
	}
	s := newScript(t, f)
	network := NewPipeNetwork()
	ln, err := network.Listen()
	if err != nil {
		t.Fatal(err)
	}
	const connect = 30 * time.Second
	comms := make([]comm.Communicator, MatrixRanks)
	errs := make([]error, MatrixRanks)
	took := make([]time.Duration, MatrixRanks)
	begin := time.Now()
	RunRanks(comms, func(comm.Communicator) error { return nil }) // (shape only)
	done := make(chan struct{})
	for r := range MatrixRanks {
		go func() {
			defer func() { done <- struct{}{} }()
			cfg := star.DefaultConfig()
			cfg.Rank, cfg.Size, cfg.Timeout, cfg.ConnectTimeout, cfg.ShutdownTimeout = r, MatrixRanks, MatrixTimeout, connect, matrixShutdown
			cfg.Liveness = -1
			cfg.HandshakeTimeout = 5 * time.Second
			if r == 0 {
				cfg.Listener = s.WrapListener(ln)
			} else {
				cfg.Dialer, cfg.Addr = s.WrapDialer(network.Dialer(), r), ln.Addr()
			}
			c, err := star.New(context.Background(), cfg)
			if err == nil {
				comms[r] = c
				err = c.Barrier(context.Background())
			}
			errs[r], took[r] = err, time.Since(begin)
		}()
	}
	for range MatrixRanks {
		<-done
	}
	_ = CloseAll(comms)
	if s.Fired() == 0 {
		t.Fatalf("no fault fired: %v", f)
	}
	failing := cell.failing()
	for r := range MatrixRanks {
		err := errs[r]
		if r == failing {
			continue
		}
		if err == nil {
			t.Errorf("rank %d: start-up and first barrier succeeded despite the fault", r)
			continue
		}
		var ife *comm.InitializationFailedError
		var cf *comm.CollectiveFailedError
		switch {
		case errors.As(err, &ife):
			if r == 0 && !strings.Contains(err.Error(), fmt.Sprintf("missing ranks [%d]", last)) {
				t.Errorf("rank 0: start-up error does not name missing rank %d: %v", last, err)
			}
		case errors.As(err, &cf):
			if cf.Rank != failing {
				t.Errorf("rank %d: names rank %d, want %d: %v", r, cf.Rank, failing, err)
			}
		default:
			t.Errorf("rank %d: %T %v, want InitializationFailed or CollectiveFailed", r, err, err)
		}
		if took[r] > connect+MatrixTimeout+time.Second {
			t.Errorf("rank %d: failed after %v", r, took[r])
		}
	}
	if cell.Side == "worker" && errs[last] == nil {
		t.Errorf("rank %d (the failing one) started and ran a barrier", last)
	}
}

// runShutdownCell fails a rank between its last collective and Close, and
// checks the protocol's graceful shutdown as every other rank
// sees it: a healthy worker's Close returns nil once it has the Shutdown;
// the coordinator's Close names a worker that could not take its Shutdown;
// a worker's Close names a coordinator that ended without sending it (at
// once when it crashed or reset, after the timeout when it hung). Every
// Close returns within its bound, and every call afterwards is
// ErrInvalidCommunicator.
func runShutdownCell(t *testing.T, cell Cell) {
	cell2 := cell
	cell2.Op = OpBarrier
	s := newScript(t, cell2.faults()...)
	comms, err := startFaulty(t, s)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	for r, err := range RunRanks(comms, func(c comm.Communicator) error { return c.Barrier(context.Background()) }) {
		if err != nil {
			t.Fatalf("barrier on rank %d: %v", r, err)
		}
	}
	fireAll(s, cell2.faults())
	failing := cell.failing()
	begin := time.Now()
	took := make([]time.Duration, MatrixRanks)
	errs := RunRanks(comms, func(c comm.Communicator) error {
		err := c.Close()
		took[c.Rank()] = time.Since(begin)
		return err
	})
	for r, err := range errs {
		if r == failing {
			continue // the failed rank itself: anything goes
		}
		bound := matrixShutdown + 100*time.Millisecond
		wantBlame := -1 // nil error
		switch {
		case r == 0:
			wantBlame = failing // the worker that could not take its Shutdown
		case failing == 0:
			wantBlame = 0 // the coordinator that sent none
			if cell.Fault == faulty.Hang {
				bound = MatrixTimeout + time.Second // silence: the timeout tells
			}
		}
		if took[r] > bound {
			t.Errorf("rank %d: Close took %v, want <= %v", r, took[r], bound)
		}
		if wantBlame < 0 {
			if err != nil {
				t.Errorf("rank %d: Close: %v, want nil (it got its Shutdown)", r, err)
			}
			continue
		}
		var cf *comm.CollectiveFailedError
		if !errors.As(err, &cf) || cf.Operation != star.OpClose || cf.Rank != wantBlame {
			t.Errorf("rank %d: Close = %v, want a CollectiveFailedError of %q naming rank %d", r, err, star.OpClose, wantBlame)
		}
	}
	for r, c := range comms {
		if err := c.Barrier(context.Background()); !errors.Is(err, comm.ErrInvalidCommunicator) {
			t.Errorf("rank %d: barrier after Close = %v, want ErrInvalidCommunicator", r, err)
		}
	}
}
