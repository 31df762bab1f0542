package main

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/starcomm/starcomm/comm"
)

// Sizes of the standard workloads, in elements.
const (
	cutValues       = 25_000    // one rank's cuts of one stage: 200 KB of float64
	trialValues     = 262_144   // one rank's trial points: 2 MiB of float64
	bigValues       = 2_097_152 // 16 MiB of float64
	allreduceValues = 4         // 32 B of float64
	bigReduceValues = 8_388_608 // 64 MiB of float64
	broadcastBytes  = 10_240    // 10 KiB of uint8
	cutsPerIter     = 119       // cut allgathervs in one SDDP iteration
	upperBoundStats = 3         // values of the sddp-iteration sum: count, sum, sum of squares
	float64Bytes    = 8
)

// workload is one standard benchmark: what every rank runs, how often, and
// how many bytes it moves.
type workload struct {
	// name is the workload's name on the command line and in the output.
	name string
	// about describes the workload in one line, for -h.
	about string
	// repeats is the number of timed repetitions at --repeats-scale 1.
	repeats int
	// bytesPerRank is one rank's payload per repetition (0 for barrier).
	bytesPerRank int64
	// algBytes returns the bytes that algorithm bandwidth counts for a
	// communicator of size ranks; nil means the workload has no bandwidth.
	algBytes func(size int) int64
	// cpu makes the runner measure the CPU time of the ranks whose case
	// waits (see lateCase).
	cpu bool
	// newCase allocates one rank's buffers.
	newCase func(rank, size int) benchCase
}

// benchCase is one rank's state of a workload: its buffers, the timed
// operation and its verification. A benchCase is used by one goroutine.
type benchCase interface {
	// fill prepares the send buffers (and anything the operation must
	// overwrite) for repetition rep. It is not timed.
	fill(rep int)
	// run is the timed operation.
	run(ctx context.Context, c comm.Communicator) error
	// check verifies every received element of repetition rep and returns
	// the first mismatch, or nil. It is not timed.
	check(rep int) *verifyError
}

// verifyError reports a received element that differs from what the
// repetition must produce. The runner fills Workload, Rank and Rep; the
// benchCase fills the rest.
type verifyError struct {
	Workload string
	Rank     int
	Rep      int    // 0 is the warm-up
	Buffer   string // which buffer: "recv", "cut 17 recv", "sum recv", ...
	Index    int    // element index in Buffer
	Got      string
	Want     string
}

func (e *verifyError) Error() string {
	rep := strconv.Itoa(e.Rep)
	if e.Rep == 0 {
		rep = "0 (warm-up)"
	}
	return fmt.Sprintf("verification failed: workload %s, rank %d, repetition %s: %s[%d] = %s, want %s",
		e.Workload, e.Rank, rep, e.Buffer, e.Index, e.Got, e.Want)
}

// standardWorkloads returns the standard workloads, in the
// order they run by default.
func standardWorkloads() []workload {
	return []workload{
		allgathervWorkload("allgatherv-cuts", cutValues, 50),
		allgathervWorkload("allgatherv-2MiB", trialValues, 20),
		allgathervWorkload("allgatherv-16MiB", bigValues, 8),
		{
			name:         "allreduce-32B",
			about:        "allreduce sum of 4 float64 (32 B)",
			repeats:      200,
			bytesPerRank: allreduceValues * float64Bytes,
			algBytes:     func(int) int64 { return allreduceValues * float64Bytes },
			newCase: func(rank, size int) benchCase {
				return newSumCase(rank, size, allreduceValues, "recv")
			},
		},
		{
			name:    "barrier",
			about:   "barrier",
			repeats: 200,
			newCase: func(int, int) benchCase { return barrierCase{} },
		},
		{
			name:         "broadcast-10KB",
			about:        "broadcast of 10,240 bytes (uint8) from root R-1",
			repeats:      200,
			bytesPerRank: broadcastBytes,
			algBytes:     func(int) int64 { return broadcastBytes },
			newCase: func(rank, size int) benchCase {
				return &broadcastCase{rank: rank, root: size - 1, buf: make([]uint8, broadcastBytes)}
			},
		},
		{
			name:         "sddp-iteration",
			about:        "allgatherv 2 MiB/rank + 119 allgathervs 200 KB/rank + allreduce min (1 value) + allreduce sum (3 values)",
			repeats:      3,
			bytesPerRank: (trialValues + cutsPerIter*cutValues + 1 + upperBoundStats) * float64Bytes,
			algBytes: func(size int) int64 {
				return int64(size)*(trialValues+cutsPerIter*cutValues)*float64Bytes + (1+upperBoundStats)*float64Bytes
			},
			newCase: newSDDPCase,
		},
	}
}

// largeWorkloads are the workloads that measure a large allreduce's time
// and rank 0's memory (its peak RSS, which starbench prints): at R = 4 its
// ·n is 192 MiB, so rank 0 streams it (see star's reduce.go). They run
// only when --workloads names them.
func largeWorkloads() []workload {
	return []workload{{
		name:         "allreduce-64MiB",
		about:        "allreduce sum of 8,388,608 float64 (64 MiB)",
		repeats:      5,
		bytesPerRank: bigReduceValues * float64Bytes,
		algBytes:     func(int) int64 { return bigReduceValues * float64Bytes },
		newCase: func(rank, size int) benchCase {
			return newSumCase(rank, size, bigReduceValues, "recv")
		},
	}}
}

// lateWorkloads are the workloads that measure what waiting costs: a
// barrier in which the last rank arrives late by 1 ms, 10 ms or 1 s (it
// sleeps first), while every other rank waits in it. Their result
// includes the CPU time the waiting ranks burn per collective (the most
// of any waiting rank's whole process, median over the repetitions). They
// run only when --workloads names them.
func lateWorkloads() []workload {
	var ws []workload
	for _, l := range []struct {
		name    string
		late    time.Duration
		repeats int
	}{{"late-1ms", time.Millisecond, 50}, {"late-10ms", 10 * time.Millisecond, 30}, {"late-1s", time.Second, 5}} {
		ws = append(ws, workload{
			name:    l.name,
			about:   fmt.Sprintf("barrier that the last rank enters %v late; reports the waiting ranks' CPU time", l.late),
			repeats: l.repeats,
			cpu:     true,
			newCase: func(rank, size int) benchCase { return &lateCase{late: l.late, isLate: rank == size-1} },
		})
	}
	return ws
}

// lateCase is one rank of a late workload.
type lateCase struct {
	late   time.Duration
	isLate bool
}

func (*lateCase) fill(int) {}
func (l *lateCase) run(ctx context.Context, c comm.Communicator) error {
	if l.isLate {
		time.Sleep(l.late)
	}
	return c.Barrier(ctx)
}
func (*lateCase) check(int) *verifyError { return nil }

// waits reports whether the rank waits for the late one (and so counts in
// the CPU figure).
func (l *lateCase) waits() bool { return !l.isLate }

// allgathervWorkload is an allgatherv of values float64 per rank.
func allgathervWorkload(name string, values, repeats int) workload {
	return workload{
		name:         name,
		about:        fmt.Sprintf("allgatherv of %d float64 per rank", values),
		repeats:      repeats,
		bytesPerRank: int64(values) * float64Bytes,
		algBytes:     func(size int) int64 { return int64(size) * int64(values) * float64Bytes },
		newCase: func(rank, size int) benchCase {
			g := newGather(rank, size, values, 0)
			return &gatherCase{g}
		},
	}
}

// selectWorkloads returns the workloads named in list (comma separated,
// in that order: standard, large or late ones); an empty list selects every
// standard workload.
func selectWorkloads(list string) ([]workload, error) {
	if strings.TrimSpace(list) == "" {
		return standardWorkloads(), nil
	}
	all := append(append(standardWorkloads(), largeWorkloads()...), lateWorkloads()...)
	var names []string
	for _, w := range all {
		names = append(names, w.name)
	}
	var ws []workload
	seen := map[string]bool{}
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			return nil, fmt.Errorf("--workloads %q has an empty name; give names separated by commas, e.g. barrier,allreduce-32B", list)
		}
		if seen[name] {
			return nil, fmt.Errorf("--workloads names %q twice", name)
		}
		seen[name] = true
		found := false
		for _, w := range all {
			if w.name == name {
				ws = append(ws, w)
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("--workloads: unknown workload %q; known: %s", name, strings.Join(names, ","))
		}
	}
	return ws, nil
}

// value is the float64 that rank sends as element key of repetition rep.
// Every value is an integer below 2^53, so exactly representable, and
// different ranks and repetitions (modulo 4096) give different values.
func value(rep, rank, key int) float64 {
	return float64(uint64(rep&0xfff)<<40 | uint64(rank&0xffff)<<24 | uint64(key&0xffffff))
}

// formatFloat formats a float64 exactly, for verification messages.
func formatFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// gather is one allgatherv of count float64 per rank into a packed recv.
// tag tells the values of several gathers of one case apart.
type gather struct {
	rank, count, tag int
	send, recv       []float64
	counts, displs   []int
}

// newGather allocates the buffers of one allgatherv.
func newGather(rank, size, count, tag int) *gather {
	g := &gather{
		rank: rank, count: count, tag: tag,
		send:   make([]float64, count),
		recv:   make([]float64, size*count),
		counts: make([]int, size),
		displs: make([]int, size),
	}
	for r := range size {
		g.counts[r], g.displs[r] = count, r*count
	}
	return g
}

// fill writes repetition rep's values into send.
func (g *gather) fill(rep int) {
	base := g.tag * g.count
	for i := range g.send {
		g.send[i] = value(rep, g.rank, base+i)
	}
}

// run is the allgatherv.
func (g *gather) run(ctx context.Context, c comm.Communicator) error {
	return comm.Allgatherv(ctx, c, g.send, g.recv, g.counts, g.displs)
}

// check verifies every element of recv; buffer names recv in the error.
func (g *gather) check(rep int, buffer string) *verifyError {
	base := g.tag * g.count
	for r, d := range g.displs {
		part := g.recv[d : d+g.count]
		for i, got := range part {
			if want := value(rep, r, base+i); math.Float64bits(got) != math.Float64bits(want) {
				return &verifyError{Buffer: buffer, Index: d + i, Got: formatFloat(got), Want: formatFloat(want)}
			}
		}
	}
	return nil
}

// gatherCase is a workload of one allgatherv.
type gatherCase struct{ g *gather }

func (c *gatherCase) fill(rep int) { c.g.fill(rep) }
func (c *gatherCase) run(ctx context.Context, cm comm.Communicator) error {
	return c.g.run(ctx, cm)
}
func (c *gatherCase) check(rep int) *verifyError { return c.g.check(rep, "recv") }

// reduce is one float64 allreduce; its send values depend on rank and
// repetition, and check recomputes the reduction in rank order, as the
// library does, so the comparison is exact.
type reduce struct {
	rank, size int
	op         comm.ReduceOp
	name       string // buffer name in errors
	send, recv []float64
	want       []float64
}

// sendValue is what rank sends as element i of repetition rep of a reduce.
func sendValue(rep, rank, i int) float64 {
	return float64(rank+1)*float64(i+1) + float64(rep&0xfff)*0.25
}

// newSumCase is a workload of one allreduce sum of n values.
func newSumCase(rank, size, n int, name string) *reduce {
	return &reduce{rank: rank, size: size, op: comm.Sum, name: name,
		send: make([]float64, n), recv: make([]float64, n), want: make([]float64, n)}
}

func (c *reduce) fill(rep int) {
	for i := range c.send {
		c.send[i] = sendValue(rep, c.rank, i)
	}
}

func (c *reduce) run(ctx context.Context, cm comm.Communicator) error {
	return comm.Allreduce(ctx, cm, c.send, c.recv, c.op)
}

func (c *reduce) check(rep int) *verifyError {
	for i := range c.want {
		acc := sendValue(rep, 0, i)
		for r := 1; r < c.size; r++ {
			v := sendValue(rep, r, i)
			switch c.op {
			case comm.Min:
				acc = min(acc, v)
			case comm.Max:
				acc = max(acc, v)
			default:
				acc += v
			}
		}
		if got := c.recv[i]; math.Float64bits(got) != math.Float64bits(acc) {
			return &verifyError{Buffer: c.name, Index: i, Got: formatFloat(got), Want: formatFloat(acc)}
		}
	}
	return nil
}

// barrierCase is a workload of one barrier; there is nothing to verify.
type barrierCase struct{}

func (barrierCase) fill(int) {}
func (barrierCase) run(ctx context.Context, c comm.Communicator) error {
	return c.Barrier(ctx)
}
func (barrierCase) check(int) *verifyError { return nil }

// broadcastCase is a workload of one uint8 broadcast from root.
type broadcastCase struct {
	rank, root int
	buf        []uint8
}

// bcastByte is element i of root's buffer in repetition rep.
func bcastByte(rep, root, i int) uint8 { return uint8(rep*13 + root*29 + i*7 + 1) }

// fill writes the repetition's bytes on the root and their complement
// elsewhere, so a broadcast that does not arrive is detected.
func (c *broadcastCase) fill(rep int) {
	var flip uint8
	if c.rank != c.root {
		flip = 0xff
	}
	for i := range c.buf {
		c.buf[i] = bcastByte(rep, c.root, i) ^ flip
	}
}

func (c *broadcastCase) run(ctx context.Context, cm comm.Communicator) error {
	return comm.Broadcast(ctx, cm, c.buf, c.root)
}

func (c *broadcastCase) check(rep int) *verifyError {
	for i, got := range c.buf {
		if want := bcastByte(rep, c.root, i); got != want {
			return &verifyError{Buffer: "buf", Index: i, Got: strconv.Itoa(int(got)), Want: strconv.Itoa(int(want))}
		}
	}
	return nil
}

// sddpCase is one SDDP training iteration: the trial points of the forward
// pass gathered once, then the cuts of each of 119 stages gathered into that
// stage's own pool (as a solver keeps one cut pool per stage), then the
// lower bound (min) and the upper-bound statistics (sum) reduced.
type sddpCase struct {
	trial *gather
	cuts  []*gather
	lower *reduce
	upper *reduce
}

// newSDDPCase allocates one rank's buffers of an SDDP iteration: about
// (size+1) × 25.9 MB.
func newSDDPCase(rank, size int) benchCase {
	c := &sddpCase{
		trial: newGather(rank, size, trialValues, 0),
		lower: &reduce{rank: rank, size: size, op: comm.Min, name: "lower-bound (min) recv",
			send: make([]float64, 1), recv: make([]float64, 1), want: make([]float64, 1)},
		upper: newSumCase(rank, size, upperBoundStats, "upper-bound (sum) recv"),
	}
	for k := range cutsPerIter {
		c.cuts = append(c.cuts, newGather(rank, size, cutValues, k))
	}
	return c
}

func (c *sddpCase) fill(rep int) {
	c.trial.fill(rep)
	for _, g := range c.cuts {
		g.fill(rep)
	}
	c.lower.fill(rep)
	c.upper.fill(rep)
}

func (c *sddpCase) run(ctx context.Context, cm comm.Communicator) error {
	if err := c.trial.run(ctx, cm); err != nil {
		return fmt.Errorf("trial-point allgatherv: %w", err)
	}
	for k, g := range c.cuts {
		if err := g.run(ctx, cm); err != nil {
			return fmt.Errorf("cut allgatherv %d: %w", k, err)
		}
	}
	if err := c.lower.run(ctx, cm); err != nil {
		return fmt.Errorf("allreduce min: %w", err)
	}
	if err := c.upper.run(ctx, cm); err != nil {
		return fmt.Errorf("allreduce sum: %w", err)
	}
	return nil
}

func (c *sddpCase) check(rep int) *verifyError {
	if e := c.trial.check(rep, "trial-point recv"); e != nil {
		return e
	}
	for k, g := range c.cuts {
		if e := g.check(rep, fmt.Sprintf("cut %d recv", k)); e != nil {
			return e
		}
	}
	if e := c.lower.check(rep); e != nil {
		return e
	}
	return c.upper.check(rep)
}
