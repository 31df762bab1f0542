package main

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"slices"
	"time"

	"github.com/starcomm/starcomm/comm"
)

// result is one workload's measurement. Every rank computes the same result
// (the times are the slowest rank's, agreed by an allreduce).
type result struct {
	Workload     string        `json:"workload"`
	Ranks        int           `json:"ranks"`
	BytesPerRank int64         `json:"bytes_per_rank"`
	Repeats      int           `json:"repeats"` // timed repetitions, without the warm-up
	Median       time.Duration `json:"median_ns"`
	Min          time.Duration `json:"min_ns"`
	Max          time.Duration `json:"max_ns"`
	// AlgBytes is what algorithm bandwidth counts (see the package doc);
	// 0 when the workload has no bandwidth.
	AlgBytes int64 `json:"alg_bytes"`
	// AlgBW is AlgBytes / Median in bytes per second; nil (JSON null) when
	// the workload has no bandwidth.
	AlgBW *float64 `json:"algbw_bytes_per_sec"`
	// WaitCPU is, for a late workload, the CPU time the waiting ranks burn
	// per collective: each repetition's most of any waiting rank's whole
	// process, median over the repetitions; nil (absent) otherwise.
	WaitCPU *time.Duration `json:"wait_cpu_ns,omitempty"`
}

// repeatsFor scales a workload's repetitions, rounding to the nearest
// integer and never going below 1.
func repeatsFor(repeats int, scale float64) int {
	return max(1, int(math.Round(float64(repeats)*scale)))
}

// runWorkloads runs ws in order on this rank of c, every rank calling it
// with the same ws and scale, and returns one result per workload. Each
// workload runs one untimed warm-up repetition and then
// repeatsFor(w.repeats, scale) timed ones; each repetition is fill (untimed),
// Barrier, the timed operation, an untimed Allreduce(Max) of every rank's
// time, and a full check of what this rank received (untimed).
//
// The first failure ends the run: a collective's error wrapped with the
// workload's name, or a *verifyError when this rank received a wrong
// element. The other ranks are then left inside a collective; the caller
// closes c (or exits), which fails them.
func runWorkloads(ctx context.Context, c comm.Communicator, ws []workload, scale float64) ([]result, error) {
	results := make([]result, 0, len(ws))
	for _, w := range ws {
		r, err := runWorkload(ctx, c, w, repeatsFor(w.repeats, scale))
		if err != nil {
			return results, err
		}
		results = append(results, r)
	}
	return results, nil
}

// runWorkload runs one workload: a warm-up (repetition 0) and repeats timed
// repetitions (1..repeats).
func runWorkload(ctx context.Context, c comm.Communicator, w workload, repeats int) (result, error) {
	bc := w.newCase(c.Rank(), c.Size())
	// Start each workload from a clean heap so a collection left over from
	// the previous workload's buffers does not land in a timed region.
	runtime.GC()
	mine, slowest := make([]float64, 2), make([]float64, 2)
	times := make([]time.Duration, 0, repeats)
	var cpus []time.Duration
	waiter, _ := bc.(interface{ waits() bool })
	for rep := 0; rep <= repeats; rep++ {
		bc.fill(rep)
		if err := c.Barrier(ctx); err != nil {
			return result{}, fmt.Errorf("workload %s, repetition %d: barrier before the timed operation: %w", w.name, rep, err)
		}
		var cpu0 time.Duration
		if w.cpu {
			cpu0 = processCPU()
		}
		start := time.Now()
		err := bc.run(ctx, c)
		elapsed := time.Since(start)
		mine[1] = 0
		if w.cpu && waiter != nil && waiter.waits() {
			mine[1] = (processCPU() - cpu0).Seconds()
		}
		if err != nil {
			return result{}, fmt.Errorf("workload %s, repetition %d: %w", w.name, rep, err)
		}
		mine[0] = elapsed.Seconds()
		if err := comm.Allreduce(ctx, c, mine, slowest, comm.Max); err != nil {
			return result{}, fmt.Errorf("workload %s, repetition %d: allreduce of the times: %w", w.name, rep, err)
		}
		if ve := bc.check(rep); ve != nil {
			ve.Workload, ve.Rank, ve.Rep = w.name, c.Rank(), rep
			return result{}, ve
		}
		if rep > 0 {
			times = append(times, time.Duration(math.Round(slowest[0]*1e9)))
			cpus = append(cpus, time.Duration(math.Round(slowest[1]*1e9)))
		}
	}

	res := result{
		Workload:     w.name,
		Ranks:        c.Size(),
		BytesPerRank: w.bytesPerRank,
		Repeats:      repeats,
		Median:       median(times),
		Min:          slices.Min(times),
		Max:          slices.Max(times),
	}
	if w.cpu {
		m := median(cpus)
		res.WaitCPU = &m
	}
	if w.algBytes != nil {
		res.AlgBytes = w.algBytes(c.Size())
		if res.Median > 0 {
			bw := float64(res.AlgBytes) / res.Median.Seconds()
			res.AlgBW = &bw
		}
	}
	return res, nil
}

// median returns the median of ds (the mean of the two middle values for an
// even count); ds must not be empty. ds is not modified.
func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
