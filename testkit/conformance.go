package testkit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/starcomm/starcomm/comm"
)

// Env is what a conformance case gets on each rank.
type Env struct {
	// Comm is this rank's communicator.
	Comm comm.Communicator
	// Dir is a directory shared by every rank of the run (the barrier cases
	// leave marks in it).
	Dir string
}

// Case is one conformance case, run on every rank of a fresh communicator.
type Case struct {
	// Name is "<Method>_<Scenario>".
	Name string
	// Sizes, when set, limits the case to communicators whose size it
	// accepts (e.g. a mismatch needs two ranks).
	Sizes func(size int) bool
	// Run executes the case on one rank and returns what went wrong there.
	Run func(ctx context.Context, e Env) error
	// Breaks is true when the case leaves the communicator failed (the
	// mismatch cases) or closed; nothing may run on it afterwards.
	Breaks bool
}

// StartFunc starts size ranks and returns their communicators by rank.
type StartFunc func(t testing.TB, size int) []comm.Communicator

// RunConformance runs every case of Cases, for each size in sizes, each on
// fresh communicators from start, with a watchdog that turns a hang into a
// failure, and checks that no goroutine outlives the communicators.
// Subtests are named "ranks=R/<Case>".
func RunConformance(t *testing.T, sizes []int, start StartFunc) {
	for _, size := range sizes {
		t.Run(fmt.Sprintf("ranks=%d", size), func(t *testing.T) {
			for _, tc := range Cases() {
				if tc.Sizes != nil && !tc.Sizes(size) {
					continue
				}
				t.Run(tc.Name, func(t *testing.T) {
					CheckGoroutines(t)
					comms := start(t, size)
					t.Cleanup(func() { _ = CloseAll(comms) })
					dir := t.TempDir()
					ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
					defer cancel()
					done := make(chan []error, 1)
					go func() {
						done <- RunRanks(comms, func(c comm.Communicator) error {
							return tc.Run(ctx, Env{Comm: c, Dir: dir})
						})
					}()
					select {
					case errs := <-done:
						for r, err := range errs {
							if err != nil {
								t.Errorf("rank %d: %v", r, err)
							}
						}
					case <-time.After(90 * time.Second):
						_ = CloseAll(comms)
						t.Fatalf("watchdog: case did not finish within 90 s (a hang)")
					}
				})
			}
		})
	}
}

// Cases returns the cases of the conformance suite every backend passes,
// in a fixed order.
func Cases() []Case {
	var cs []Case
	cs = append(cs, allgathervCases()...)
	cs = append(cs, allreduceCases()...)
	cs = append(cs, broadcastCases()...)
	cs = append(cs, barrierCases()...)
	cs = append(cs, sequencingCases()...)
	cs = append(cs, sharedMemoryCases()...)
	return cs
}

// CaseByName returns the named case.
func CaseByName(name string) (Case, bool) {
	for _, c := range Cases() {
		if c.Name == name {
			return c, true
		}
	}
	return Case{}, false
}

func atLeast(n int) func(int) bool { return func(s int) bool { return s >= n } }
func exactly(n int) func(int) bool { return func(s int) bool { return s == n } }

// same reports a difference between got and want, or nil.
func same[T any](what string, got, want T) error {
	if d := cmp.Diff(want, got); d != "" {
		return fmt.Errorf("%s mismatch (-want +got):\n%s", what, d)
	}
	return nil
}

// sameBits compares float64 slices bit for bit (NaN payloads and signed
// zeros included).
func sameBits(what string, got, want []float64) error {
	if len(got) != len(want) {
		return fmt.Errorf("%s: length %d, want %d", what, len(got), len(want))
	}
	for i := range got {
		if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
			return fmt.Errorf("%s[%d] = %v (bits %#x), want %v (bits %#x)", what, i, got[i], math.Float64bits(got[i]), want[i], math.Float64bits(want[i]))
		}
	}
	return nil
}

// wantErr checks that err is of type *E and returns it.
func wantErr[E error](what string, err error) (E, error) {
	var target E
	if err == nil {
		return target, fmt.Errorf("%s: got no error, want %T", what, target)
	}
	if !errors.As(err, &target) {
		return target, fmt.Errorf("%s: got %T (%v), want %T", what, err, err, target)
	}
	return target, nil
}

// prefix returns the exclusive prefix sums of counts (packed displs).
func prefix(counts []int) ([]int, int) {
	displs := make([]int, len(counts))
	total := 0
	for i, c := range counts {
		displs[i] = total
		total += c
	}
	return displs, total
}

// syncCheck runs a known-good allgatherv, proving the ranks are still in
// step after local precondition errors.
func syncCheck(ctx context.Context, c comm.Communicator) error {
	size := c.Size()
	counts := make([]int, size)
	for i := range counts {
		counts[i] = 2
	}
	displs, total := prefix(counts)
	send := []float64{float64(c.Rank()), float64(c.Rank()) + 0.5}
	recv := make([]float64, total)
	if err := comm.Allgatherv(ctx, c, send, recv, counts, displs); err != nil {
		return fmt.Errorf("allgatherv after precondition errors: %w", err)
	}
	want := make([]float64, total)
	for r := range size {
		want[2*r], want[2*r+1] = float64(r), float64(r)+0.5
	}
	return same("allgatherv after precondition errors", recv, want)
}

func allgathervCases() []Case {
	return []Case{
		{Name: "Allgatherv_Heterogeneous", Run: func(ctx context.Context, e Env) error {
			c := e.Comm
			size, rank := c.Size(), c.Rank()
			counts := make([]int, size)
			for r := range size {
				switch r {
				case 0:
					counts[r] = 3
				case 1:
					counts[r] = 5
				default:
					counts[r] = r + 3
				}
			}
			displs, total := prefix(counts)
			want := make([]float64, total)
			for i := range want {
				want[i] = float64(i + 1)
			}
			send := append([]float64(nil), want[displs[rank]:displs[rank]+counts[rank]]...)
			recv := make([]float64, total)
			if err := comm.Allgatherv(ctx, c, send, recv, counts, displs); err != nil {
				return err
			}
			return same("recv", recv, want)
		}},
		{Name: "Allgatherv_SizeOneIdentity", Sizes: exactly(1), Run: func(ctx context.Context, e Env) error {
			send := []float64{10, 20, 30}
			recv := make([]float64, 3)
			if err := comm.Allgatherv(ctx, e.Comm, send, recv, []int{3}, []int{0}); err != nil {
				return err
			}
			return same("recv", recv, send)
		}},
		{Name: "Allgatherv_EmptySend", Run: func(ctx context.Context, e Env) error {
			c := e.Comm
			size, rank := c.Size(), c.Rank()
			empty := size - 1 // this rank contributes nothing
			counts := make([]int, size)
			for r := range size {
				if r != empty {
					counts[r] = 2
				}
			}
			displs, total := prefix(counts)
			// The empty rank's displacement points at a sentinel past the data.
			displs[empty] = total
			recv := make([]float64, total+1)
			for i := range recv {
				recv[i] = -1
			}
			send := []float64{}
			if rank != empty {
				send = []float64{float64(rank), float64(rank) + 0.25}
			}
			if err := comm.Allgatherv(ctx, c, send, recv, counts, displs); err != nil {
				return err
			}
			want := make([]float64, total+1)
			for r := range size {
				if r != empty {
					want[displs[r]], want[displs[r]+1] = float64(r), float64(r)+0.25
				}
			}
			want[total] = -1
			return same("recv", recv, want)
		}},
		{Name: "Allgatherv_OneElementEach", Run: func(ctx context.Context, e Env) error {
			c := e.Comm
			size := c.Size()
			counts := make([]int, size)
			want := make([]float64, size)
			for r := range size {
				counts[r] = 1
				want[r] = float64(r)
			}
			displs, _ := prefix(counts)
			recv := make([]float64, size)
			if err := comm.Allgatherv(ctx, c, []float64{float64(c.Rank())}, recv, counts, displs); err != nil {
				return err
			}
			return same("recv", recv, want)
		}},
		{Name: "Allgatherv_Large", Run: func(ctx context.Context, e Env) error {
			const n = 100_000
			c := e.Comm
			size := c.Size()
			counts := make([]int, size)
			for r := range counts {
				counts[r] = n
			}
			displs, total := prefix(counts)
			send := make([]float64, n)
			for i := range send {
				send[i] = float64(c.Rank())
			}
			recv := make([]float64, total)
			if err := comm.Allgatherv(ctx, c, send, recv, counts, displs); err != nil {
				return err
			}
			for i, v := range recv {
				if v != float64(i/n) {
					return fmt.Errorf("recv[%d] = %v, want %v", i, v, float64(i/n))
				}
			}
			return nil
		}},
		{Name: "Allgatherv_NonContiguousDispls", Run: func(ctx context.Context, e Env) error {
			c := e.Comm
			size, rank := c.Size(), c.Rank()
			const cnt, gap = 3, 2
			counts := make([]int, size)
			displs := make([]int, size)
			for r := range size {
				counts[r] = cnt
				displs[r] = gap + r*(cnt+gap)
			}
			recv := make([]float64, gap+size*(cnt+gap))
			for i := range recv {
				recv[i] = -7
			}
			want := append([]float64(nil), recv...)
			for r := range size {
				for k := range cnt {
					want[displs[r]+k] = float64(100*r + k)
				}
			}
			send := append([]float64(nil), want[displs[rank]:displs[rank]+cnt]...)
			if err := comm.Allgatherv(ctx, c, send, recv, counts, displs); err != nil {
				return err
			}
			return same("recv (gaps must stay -7)", recv, want)
		}},
		{Name: "Allgatherv_MismatchedCounts", Sizes: atLeast(2), Breaks: true, Run: func(ctx context.Context, e Env) error {
			// The last rank believes rank 0 sends 3 elements, the others 2.
			c := e.Comm
			size, rank := c.Size(), c.Rank()
			counts := make([]int, size)
			for r := range counts {
				counts[r] = 2
			}
			if rank == size-1 {
				counts[0] = 3
			}
			displs, total := prefix(counts)
			send := make([]float64, counts[rank])
			err := comm.Allgatherv(ctx, c, send, make([]float64, total), counts, displs)
			if rank == size-1 || err != nil {
				// The disagreeing rank sees the AllgathervRecv length at once.
				return wantMismatch(err)
			}
			// The wire cannot show the others a disagreement about a third
			// rank's count: they learn it at their next collective.
			return wantMismatch(c.Barrier(ctx))
		}},
		{Name: "Allgatherv_PreconditionErrors", Run: func(ctx context.Context, e Env) error {
			c := e.Comm
			size, rank := c.Size(), c.Rank()
			counts := make([]int, size)
			for r := range counts {
				counts[r] = 2
			}
			displs, total := prefix(counts)
			send := []float64{1, 2}
			recv := make([]float64, total)
			type bad struct {
				name string
				err  error
				kind string // "size" or "arg"
			}
			overlap := append([]int(nil), displs...)
			if size > 1 {
				overlap[1] = 1 // rank 1's region [1,3) overlaps rank 0's [0,2)
			}
			cases := []bad{
				{"len(counts) != size", comm.Allgatherv(ctx, c, send, recv, counts[:size-1], displs), "size"},
				{"len(displs) != size", comm.Allgatherv(ctx, c, send, recv, counts, append(displs, 0)), "size"},
				{"len(send) != counts[rank]", comm.Allgatherv(ctx, c, []float64{1, 2, 3}, recv, counts, displs), "size"},
				{"recv too small", comm.Allgatherv(ctx, c, send, recv[:total-1], counts, displs), "size"},
				{"send and recv types differ", c.Allgatherv(ctx, comm.ViewOf(send), comm.ViewOf(make([]float32, total)), counts, displs), "arg"},
			}
			if size > 1 {
				cases = append(cases, bad{"overlapping regions", comm.Allgatherv(ctx, c, send, recv, counts, overlap), "arg"})
			}
			for _, b := range cases {
				var err error
				if b.kind == "size" {
					_, err = wantErr[*comm.InvalidBufferSizeError](b.name, b.err)
				} else {
					_, err = wantErr[*comm.InvalidArgumentError](b.name, b.err)
				}
				if err != nil {
					return fmt.Errorf("rank %d: %w", rank, err)
				}
			}
			return syncCheck(ctx, c)
		}},
	}
}

func allreduceCases() []Case {
	sumOf := func(ctx context.Context, c comm.Communicator, send []float64, op comm.ReduceOp) ([]float64, error) {
		recv := make([]float64, len(send))
		err := comm.Allreduce(ctx, c, send, recv, op)
		return recv, err
	}
	return []Case{
		{Name: "Allreduce_Sum", Run: func(ctx context.Context, e Env) error {
			got, err := sumOf(ctx, e.Comm, []float64{1, 2, 3, 4}, comm.Sum)
			if err != nil {
				return err
			}
			R := float64(e.Comm.Size())
			return same("recv", got, []float64{R, 2 * R, 3 * R, 4 * R})
		}},
		{Name: "Allreduce_Min", Run: func(ctx context.Context, e Env) error {
			r, R := float64(e.Comm.Rank()), float64(e.Comm.Size())
			got, err := sumOf(ctx, e.Comm, []float64{r, R - r}, comm.Min)
			if err != nil {
				return err
			}
			return same("recv", got, []float64{0, 1})
		}},
		{Name: "Allreduce_Max", Run: func(ctx context.Context, e Env) error {
			r, R := float64(e.Comm.Rank()), float64(e.Comm.Size())
			got, err := sumOf(ctx, e.Comm, []float64{r, R - 1 - r}, comm.Max)
			if err != nil {
				return err
			}
			return same("recv", got, []float64{R - 1, R - 1})
		}},
		{Name: "Allreduce_SingleElement", Run: func(ctx context.Context, e Env) error {
			got, err := sumOf(ctx, e.Comm, []float64{float64(e.Comm.Rank())}, comm.Sum)
			if err != nil {
				return err
			}
			R := e.Comm.Size()
			return same("recv", got, []float64{float64(R * (R - 1) / 2)})
		}},
		{Name: "Allreduce_SizeOneIdentity", Sizes: exactly(1), Run: func(ctx context.Context, e Env) error {
			got, err := sumOf(ctx, e.Comm, []float64{42, 99}, comm.Sum)
			if err != nil {
				return err
			}
			return same("recv", got, []float64{42, 99})
		}},
		{Name: "Allreduce_Determinism", Run: func(ctx context.Context, e Env) error {
			c := e.Comm
			const n = 257
			data := func(r int) []float64 { return RandomFloats(uint64(1000+r), n) }
			want := ReduceInRankOrder(c.Size(), data)
			for run := range 3 {
				got, err := sumOf(ctx, c, data(c.Rank()), comm.Sum)
				if err != nil {
					return err
				}
				if err := sameBits(fmt.Sprintf("run %d recv", run), got, want); err != nil {
					return err
				}
			}
			return nil
		}},
		{Name: "Allreduce_BitwiseOr", Run: func(ctx context.Context, e Env) error {
			c := e.Comm
			r, R := c.Rank(), c.Size()
			recv := make([]uint64, 1)
			if err := comm.Allreduce(ctx, c, []uint64{1 << r}, recv, comm.BitwiseOr); err != nil {
				return err
			}
			if err := same("uint64 recv", recv, []uint64{1<<R - 1}); err != nil {
				return err
			}
			recv8 := make([]uint8, 2)
			if err := comm.Allreduce(ctx, c, []uint8{1 << r, 0x80}, recv8, comm.BitwiseOr); err != nil {
				return err
			}
			return same("uint8 recv", recv8, []uint8{uint8(1<<R - 1), 0x80})
		}},
		{Name: "Allreduce_BitwiseOrOnFloat", Run: func(ctx context.Context, e Env) error {
			err := comm.Allreduce(ctx, e.Comm, []float64{1}, make([]float64, 1), comm.BitwiseOr)
			if _, err := wantErr[*comm.InvalidArgumentError]("bitwise-or on float64", err); err != nil {
				return err
			}
			err = comm.Allreduce(ctx, e.Comm, []float32{1}, make([]float32, 1), comm.BitwiseOr)
			if _, err := wantErr[*comm.InvalidArgumentError]("bitwise-or on float32", err); err != nil {
				return err
			}
			return syncCheck(ctx, e.Comm)
		}},
		{Name: "Allreduce_EveryElementType", Run: func(ctx context.Context, e Env) error {
			c := e.Comm
			r, R := c.Rank(), c.Size()
			tri := R * (R - 1) / 2
			return errors.Join(
				typedSum(ctx, c, []float64{float64(r), 0.5}, []float64{float64(tri), 0.5 * float64(R)}),
				typedSum(ctx, c, []float32{float32(r), 0.5}, []float32{float32(tri), 0.5 * float32(R)}),
				typedSum(ctx, c, []int64{int64(r), -1}, []int64{int64(tri), int64(-R)}),
				typedSum(ctx, c, []int32{int32(r), -1}, []int32{int32(tri), int32(-R)}),
				typedSum(ctx, c, []uint64{uint64(r), math.MaxUint64}, []uint64{uint64(tri), uint64(math.MaxUint64) * uint64(R)}), // wraps
				typedSum(ctx, c, []uint32{uint32(r), 1}, []uint32{uint32(tri), uint32(R)}),
				typedSum(ctx, c, []uint8{uint8(r), 200}, []uint8{uint8(tri), uint8(200 * R)}), // wraps
			)
		}},
		{Name: "Allreduce_MinMaxSpecialValues", Run: func(ctx context.Context, e Env) error {
			c := e.Comm
			// -0 < +0 and NaN propagates, as Go's min and max define.
			send := []float64{0, 1, 5}
			if c.Rank() == c.Size()-1 {
				send = []float64{math.Copysign(0, -1), math.NaN(), 5}
			}
			gotMin, err := sumOf(ctx, c, send, comm.Min)
			if err != nil {
				return err
			}
			wantMin := []float64{math.Copysign(0, -1), math.NaN(), 5}
			if c.Size() == 1 {
				wantMin = send
			}
			return sameBits("min", gotMin, wantMin)
		}},
		{Name: "Allreduce_PreconditionErrors", Run: func(ctx context.Context, e Env) error {
			c := e.Comm
			err := comm.Allreduce(ctx, c, []float64{1, 2, 3}, make([]float64, 2), comm.Sum)
			ibs, werr := wantErr[*comm.InvalidBufferSizeError]("len(send) != len(recv)", err)
			if werr != nil {
				return werr
			}
			if ibs.Expected != 3 || ibs.Actual != 2 {
				return fmt.Errorf("InvalidBufferSize{Expected: %d, Actual: %d}, want {3, 2}", ibs.Expected, ibs.Actual)
			}
			err = comm.Allreduce(ctx, c, []float64{}, []float64{}, comm.Sum)
			if _, werr := wantErr[*comm.InvalidBufferSizeError]("empty buffers", err); werr != nil {
				return werr
			}
			err = comm.Allreduce(ctx, c, []float64{1}, make([]float64, 1), comm.ReduceOp(9))
			if _, werr := wantErr[*comm.InvalidArgumentError]("unknown op", err); werr != nil {
				return werr
			}
			return syncCheck(ctx, c)
		}},
		{Name: "Allreduce_MismatchedOp", Sizes: atLeast(2), Breaks: true, Run: func(ctx context.Context, e Env) error {
			op := comm.Sum
			if e.Comm.Rank() == e.Comm.Size()-1 {
				op = comm.Max
			}
			_, err := sumOf(ctx, e.Comm, []float64{1, 2}, op)
			return wantMismatch(err)
		}},
		{Name: "Allreduce_MismatchedLength", Sizes: atLeast(2), Breaks: true, Run: func(ctx context.Context, e Env) error {
			n := 4
			if e.Comm.Rank() == e.Comm.Size()-1 {
				n = 3
			}
			_, err := sumOf(ctx, e.Comm, make([]float64, n), comm.Sum)
			return wantMismatch(err)
		}},
	}
}

// wantMismatch accepts the errors a cross-rank mismatch may produce.
func wantMismatch(err error) error {
	var cf *comm.CollectiveFailedError
	var ibs *comm.InvalidBufferSizeError
	if errors.As(err, &cf) || errors.As(err, &ibs) {
		return nil
	}
	return fmt.Errorf("got %v (%T), want CollectiveFailed or InvalidBufferSize", err, err)
}

func typedSum[T comm.Elem](ctx context.Context, c comm.Communicator, send, want []T) error {
	recv := make([]T, len(send))
	if err := comm.Allreduce(ctx, c, send, recv, comm.Sum); err != nil {
		return fmt.Errorf("%T: %w", send, err)
	}
	return same(fmt.Sprintf("%T sum", send), recv, want)
}

func broadcastCases() []Case {
	bcast := func(ctx context.Context, c comm.Communicator, root int, data []float64) error {
		buf := make([]float64, len(data))
		if c.Rank() == root {
			copy(buf, data)
		}
		if err := comm.Broadcast(ctx, c, buf, root); err != nil {
			return err
		}
		return same(fmt.Sprintf("buf from root %d", root), buf, data)
	}
	return []Case{
		{Name: "Broadcast_Root0", Run: func(ctx context.Context, e Env) error {
			return bcast(ctx, e.Comm, 0, []float64{3.14, 2.72, 1.41})
		}},
		{Name: "Broadcast_RootLast", Run: func(ctx context.Context, e Env) error {
			return bcast(ctx, e.Comm, e.Comm.Size()-1, []float64{100, 200})
		}},
		{Name: "Broadcast_EveryRoot", Run: func(ctx context.Context, e Env) error {
			for root := range e.Comm.Size() {
				if err := bcast(ctx, e.Comm, root, []float64{float64(root), -float64(root)}); err != nil {
					return err
				}
			}
			return nil
		}},
		{Name: "Broadcast_Integrity", Run: func(ctx context.Context, e Env) error {
			data := make([]float64, 10_000)
			for i := range data {
				data[i] = float64(i)
			}
			return bcast(ctx, e.Comm, 0, data)
		}},
		{Name: "Broadcast_InvalidRoot", Run: func(ctx context.Context, e Env) error {
			c := e.Comm
			for _, root := range []int{c.Size(), -1} {
				err := comm.Broadcast(ctx, c, make([]float64, 2), root)
				ir, werr := wantErr[*comm.InvalidRootError](fmt.Sprintf("root %d", root), err)
				if werr != nil {
					return werr
				}
				if ir.Root != root || ir.Size != c.Size() {
					return fmt.Errorf("InvalidRoot{Root: %d, Size: %d}, want {%d, %d}", ir.Root, ir.Size, root, c.Size())
				}
			}
			return syncCheck(ctx, c)
		}},
	}
}

func barrierCases() []Case {
	// barrierRound: mark "entered" before barrier k, check everyone's marks
	// after it.
	barrierRound := func(ctx context.Context, e Env, k int) error {
		c := e.Comm
		mark := filepath.Join(e.Dir, fmt.Sprintf("barrier%d-rank%d", k, c.Rank()))
		if err := os.WriteFile(mark, []byte("x"), 0o644); err != nil {
			return err
		}
		if err := c.Barrier(ctx); err != nil {
			return fmt.Errorf("barrier %d: %w", k, err)
		}
		for r := range c.Size() {
			if _, err := os.Stat(filepath.Join(e.Dir, fmt.Sprintf("barrier%d-rank%d", k, r))); err != nil {
				return fmt.Errorf("after barrier %d, rank %d's mark is missing: rank left before all entered", k, r)
			}
		}
		return nil
	}
	return []Case{
		{Name: "Barrier_WriteBeforeReadAfter", Run: func(ctx context.Context, e Env) error {
			return barrierRound(ctx, e, 0)
		}},
		{Name: "Barrier_ThreeInARow", Run: func(ctx context.Context, e Env) error {
			for k := 1; k <= 3; k++ {
				if err := barrierRound(ctx, e, k); err != nil {
					return err
				}
			}
			return nil
		}},
	}
}

func sequencingCases() []Case {
	return []Case{
		{Name: "RankSize_Permutation", Run: func(ctx context.Context, e Env) error {
			c := e.Comm
			size := c.Size()
			if c.Rank() < 0 || c.Rank() >= size {
				return fmt.Errorf("rank %d outside 0..%d", c.Rank(), size-1)
			}
			counts := make([]int, size)
			for i := range counts {
				counts[i] = 2
			}
			displs, total := prefix(counts)
			recv := make([]int64, total)
			if err := comm.Allgatherv(ctx, c, []int64{int64(c.Rank()), int64(size)}, recv, counts, displs); err != nil {
				return err
			}
			seen := make([]bool, size)
			for r := range size {
				got, gotSize := recv[2*r], recv[2*r+1]
				if gotSize != int64(size) {
					return fmt.Errorf("rank %d reports size %d, this rank has %d", r, gotSize, size)
				}
				if got < 0 || got >= int64(size) || seen[got] {
					return fmt.Errorf("gathered ranks %v are not a permutation of 0..%d", recv, size-1)
				}
				seen[got] = true
			}
			return nil
		}},
		{Name: "Sequencing_NilContext", Run: func(ctx context.Context, e Env) error {
			// A nil context is a bad argument of every collective (an
			// InvalidArgumentError on every rank, nothing sent), never
			// a panic; the communicator stays usable.
			c := e.Comm
			var none context.Context
			one := []float64{1}
			counts := make([]int, c.Size())
			for r := range counts {
				counts[r] = 1
			}
			displs, total := prefix(counts)
			calls := map[string]func() error{
				comm.OpAllgatherv: func() error {
					return comm.Allgatherv(none, c, one, make([]float64, total), counts, displs)
				},
				comm.OpAllreduce: func() error { return comm.Allreduce(none, c, one, make([]float64, 1), comm.Sum) },
				comm.OpBroadcast: func() error { return comm.Broadcast(none, c, one, 0) },
				comm.OpBarrier:   func() error { return c.Barrier(none) },
			}
			for op, call := range calls {
				ia, werr := wantErr[*comm.InvalidArgumentError](op+" with a nil context", call())
				if werr != nil {
					return werr
				}
				if ia.Operation != op || !strings.Contains(ia.Message, "nil context") {
					return fmt.Errorf("%s with a nil context: %v, want an InvalidArgumentError naming %s and the nil context", op, ia, op)
				}
			}
			return syncCheck(ctx, c)
		}},
		{Name: "Sequencing_Mixed", Run: func(ctx context.Context, e Env) error {
			c := e.Comm
			size, rank := c.Size(), c.Rank()
			counts := make([]int, size)
			for i := range counts {
				counts[i] = 1
			}
			displs, _ := prefix(counts)
			recv := make([]float64, size)
			if err := comm.Allgatherv(ctx, c, []float64{float64(rank)}, recv, counts, displs); err != nil {
				return err
			}
			want := make([]float64, size)
			for r := range want {
				want[r] = float64(r)
			}
			if err := same("first allgatherv", recv, want); err != nil {
				return err
			}
			sum := make([]float64, 1)
			if err := comm.Allreduce(ctx, c, []float64{1}, sum, comm.Sum); err != nil {
				return err
			}
			if err := same("allreduce", sum, []float64{float64(size)}); err != nil {
				return err
			}
			if err := c.Barrier(ctx); err != nil {
				return err
			}
			if err := comm.Allgatherv(ctx, c, []float64{float64(rank) * 10}, recv, counts, displs); err != nil {
				return err
			}
			for r := range want {
				want[r] = float64(r) * 10
			}
			return same("second allgatherv (no stale data)", recv, want)
		}},
		{Name: "Sequencing_ThousandMixed", Run: func(ctx context.Context, e Env) error {
			return MixedOps(ctx, e.Comm, 42, 1000)
		}},
		{Name: "Sequencing_OverlapRejected", Sizes: atLeast(2), Run: overlapRejected},
		{Name: "Close_ThenAnyCall", Breaks: true, Run: func(ctx context.Context, e Env) error {
			// After Close, every collective returns
			// ErrInvalidCommunicator, whatever its arguments (a nil
			// context, a root out of range, counts of the wrong
			// length), and Close again returns nil.
			c := e.Comm
			if err := c.Close(); err != nil {
				return fmt.Errorf("close: %w", err)
			}
			var none context.Context
			one := []float64{1}
			calls := map[string]error{
				"allgatherv, nil context":      comm.Allgatherv(none, c, one, make([]float64, c.Size()), nil, nil),
				"allgatherv, wrong counts":     comm.Allgatherv(ctx, c, one, nil, []int{1, 2, 3, 4, 5, 6, 7, 8, 9}, nil),
				"allreduce, nil context":       comm.Allreduce(none, c, one, make([]float64, 1), comm.Sum),
				"allreduce, lengths differ":    comm.Allreduce(ctx, c, one, nil, comm.Sum),
				"broadcast, nil context":       comm.Broadcast(none, c, one, 0),
				"broadcast, root -1":           comm.Broadcast(ctx, c, one, -1),
				"broadcast, root out of range": comm.Broadcast(ctx, c, one, c.Size()),
				"barrier, nil context":         c.Barrier(none),
				"barrier":                      c.Barrier(ctx),
			}
			for what, err := range calls {
				if !errors.Is(err, comm.ErrInvalidCommunicator) {
					return fmt.Errorf("%s after Close: %v, want comm.ErrInvalidCommunicator", what, err)
				}
			}
			if err := c.Close(); err != nil {
				return fmt.Errorf("second close: %w", err)
			}
			return nil
		}},
	}
}

// overlapRejected is the case Sequencing_OverlapRejected. Rank 0 runs a
// barrier from one goroutine, which cannot end before the other ranks
// enter theirs, and calls from another: every call it makes then must fail
// at once with comm.ErrConcurrentCall, naming the barrier, and do nothing.
// The other ranks enter the barrier only when rank 0 has seen that (a mark
// in Dir), and then the barrier and the next collective work on every rank.
//
// Until the barrier holds the communicator, rank 0's probe (a broadcast
// from root -1, refused before it sends anything) may take it first: the
// probe then fails with InvalidRootError, and the barrier, if it found the
// probe running, is called again.
func overlapRejected(ctx context.Context, e Env) error {
	c := e.Comm
	mark := filepath.Join(e.Dir, "overlap-seen")
	if c.Rank() != 0 {
		for {
			if _, err := os.Stat(mark); err == nil {
				break
			}
			if ctx.Err() != nil {
				return fmt.Errorf("rank 0 never saw its overlapping calls refused: %w", ctx.Err())
			}
			time.Sleep(time.Millisecond)
		}
		if err := c.Barrier(ctx); err != nil {
			return fmt.Errorf("barrier: %w", err)
		}
		return syncCheck(ctx, c)
	}
	first := make(chan error, 1)
	go func() {
		for {
			err := c.Barrier(ctx)
			if !errors.Is(err, comm.ErrConcurrentCall) {
				first <- err
				return
			}
		}
	}()
	one := []float64{1}
	for {
		err := comm.Broadcast(ctx, c, one, -1)
		if errors.Is(err, comm.ErrConcurrentCall) {
			if !strings.Contains(err.Error(), "broadcast called while barrier runs") {
				return fmt.Errorf("the overlapping broadcast's error %q does not name both calls", err)
			}
			break
		}
		var ir *comm.InvalidRootError
		if !errors.As(err, &ir) {
			return fmt.Errorf("broadcast from root -1 beside a barrier: %v, want InvalidRootError or comm.ErrConcurrentCall", err)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("a barrier from another goroutine never made the other calls fail: %w", ctx.Err())
		}
	}
	// The barrier holds the communicator until the other ranks enter:
	// every call, with good arguments or bad, fails at once.
	calls := map[string]error{
		"allgatherv":          comm.Allgatherv(ctx, c, one, make([]float64, c.Size()), nil, nil),
		"allreduce":           comm.Allreduce(ctx, c, one, make([]float64, 1), comm.Sum),
		"broadcast":           comm.Broadcast(ctx, c, one, 0),
		"barrier":             c.Barrier(ctx),
		"allreduce, bad args": comm.Allreduce(ctx, c, one, nil, comm.Sum),
	}
	for what, err := range calls {
		if !errors.Is(err, comm.ErrConcurrentCall) {
			return fmt.Errorf("%s during a barrier from another goroutine: %v, want comm.ErrConcurrentCall", what, err)
		}
	}
	if err := os.WriteFile(mark, []byte("x"), 0o644); err != nil {
		return err
	}
	if err := <-first; err != nil {
		return fmt.Errorf("the barrier beside the refused calls: %w", err)
	}
	return syncCheck(ctx, c)
}

// MixedOps runs n collectives chosen and sized by a generator seeded with
// seed (the same on every rank), checking every result.
func MixedOps(ctx context.Context, c comm.Communicator, seed uint64, n int) error {
	rng := rand.New(rand.NewPCG(seed, 7))
	size, rank := c.Size(), c.Rank()
	val := func(i, r, k int) float64 { return float64(i*1_000_000 + r*1000 + k) }
	for i := range n {
		switch kind := rng.IntN(4); kind {
		case 0: // allgatherv with random counts
			counts := make([]int, size)
			for r := range counts {
				counts[r] = rng.IntN(17)
			}
			displs, total := prefix(counts)
			send := make([]float64, counts[rank])
			for k := range send {
				send[k] = val(i, rank, k)
			}
			recv := make([]float64, total)
			if err := comm.Allgatherv(ctx, c, send, recv, counts, displs); err != nil {
				return fmt.Errorf("op %d allgatherv: %w", i, err)
			}
			for r := range size {
				for k := range counts[r] {
					if recv[displs[r]+k] != val(i, r, k) {
						return fmt.Errorf("op %d allgatherv: recv[%d] = %v, want %v", i, displs[r]+k, recv[displs[r]+k], val(i, r, k))
					}
				}
			}
		case 1: // allreduce over a random op
			m := 1 + rng.IntN(9)
			ops := []comm.ReduceOp{comm.Sum, comm.Min, comm.Max, comm.BitwiseOr}
			op := ops[rng.IntN(len(ops))]
			data := func(r int) []int64 {
				d := make([]int64, m)
				for k := range d {
					d[k] = int64(i*31+r*7+k) % 97
				}
				return d
			}
			recv := make([]int64, m)
			if err := comm.Allreduce(ctx, c, data(rank), recv, op); err != nil {
				return fmt.Errorf("op %d allreduce %v: %w", i, op, err)
			}
			want := data(0)
			for r := 1; r < size; r++ {
				comm.Reduce(comm.Int64, op, comm.ViewOf(want).Bytes, comm.ViewOf(data(r)).Bytes)
			}
			if err := same(fmt.Sprintf("op %d allreduce %v", i, op), recv, want); err != nil {
				return err
			}
		case 2: // broadcast from a random root
			root := rng.IntN(size)
			m := rng.IntN(33)
			buf := make([]float64, m)
			if rank == root {
				for k := range buf {
					buf[k] = val(i, root, k)
				}
			}
			if err := comm.Broadcast(ctx, c, buf, root); err != nil {
				return fmt.Errorf("op %d broadcast: %w", i, err)
			}
			for k := range buf {
				if buf[k] != val(i, root, k) {
					return fmt.Errorf("op %d broadcast from %d: buf[%d] = %v", i, root, k, buf[k])
				}
			}
		default:
			if err := c.Barrier(ctx); err != nil {
				return fmt.Errorf("op %d barrier: %w", i, err)
			}
		}
	}
	return nil
}

// RandomFloats returns n float64 values of mixed sign and magnitude from a
// generator seeded with seed, so float sums depend on their order.
func RandomFloats(seed uint64, n int) []float64 {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	out := make([]float64, n)
	for i := range out {
		out[i] = (rng.Float64() - 0.5) * math.Pow(10, float64(rng.IntN(30)-15))
	}
	return out
}

// ReduceInRankOrder is the reference reduction: a plain left-to-right sum of
// data(0), data(1), ..., data(size-1), element by element.
func ReduceInRankOrder(size int, data func(r int) []float64) []float64 {
	acc := append([]float64(nil), data(0)...)
	for r := 1; r < size; r++ {
		d := data(r)
		for i := range acc {
			acc[i] = acc[i] + d[i]
		}
	}
	return acc
}
