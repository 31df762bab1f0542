package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// runInfo describes the run for the header line and the JSON document.
type runInfo struct {
	Date         time.Time
	GoVersion    string // runtime.Version()
	GOOS, GOARCH string
	CPUs         int    // runtime.NumCPU() of rank 0
	CPUModel     string // rank 0's processor (internal/cpuinfo); "": not known
	Backend      string
	Ranks        int
	RepeatsScale float64
	// PeakRSS is rank 0's (the coordinator's) peak resident set size in
	// bytes over the whole run (Linux VmHWM), or 0 where unknown.
	PeakRSS int64
}

// report is the JSON document --json prints.
type report struct {
	Date         string   `json:"date"`
	Go           string   `json:"go"`
	GOOS         string   `json:"goos"`
	GOARCH       string   `json:"goarch"`
	Ranks        int      `json:"ranks"`
	Backend      string   `json:"backend"`
	CPUs         int      `json:"cpus"`
	CPUModel     string   `json:"cpu_model,omitempty"`
	RepeatsScale float64  `json:"repeats_scale"`
	PeakRSS      int64    `json:"coordinator_peak_rss_bytes,omitempty"`
	Results      []result `json:"results"`
}

// writeJSON writes info and results as one indented JSON document.
func writeJSON(w io.Writer, info runInfo, results []result) error {
	if results == nil {
		results = []result{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(report{
		Date:         info.Date.UTC().Format(time.RFC3339),
		Go:           info.GoVersion,
		GOOS:         info.GOOS,
		GOARCH:       info.GOARCH,
		Ranks:        info.Ranks,
		Backend:      info.Backend,
		CPUs:         info.CPUs,
		CPUModel:     info.CPUModel,
		RepeatsScale: info.RepeatsScale,
		PeakRSS:      info.PeakRSS,
		Results:      results,
	})
}

// headerLine is the table's first line: when, on what, with what.
func headerLine(info runInfo) string {
	return fmt.Sprintf("# starbench %s  %s %s/%s  cpus=%d  backend=%s  ranks=%d  repeats-scale=%g",
		info.Date.UTC().Format(time.RFC3339), info.GoVersion, info.GOOS, info.GOARCH,
		info.CPUs, info.Backend, info.Ranks, info.RepeatsScale)
}

// writeTable writes the header line and one row per result.
func writeTable(w io.Writer, info runInfo, results []result) error {
	var b strings.Builder
	b.WriteString(headerLine(info))
	b.WriteByte('\n')
	if info.CPUModel != "" {
		// Figures from different processors are not comparable.
		fmt.Fprintf(&b, "# processor: %s\n", info.CPUModel)
	}
	const row = "%-17s %5s %11s %7s %11s %12s\n"
	fmt.Fprintf(&b, row, "workload", "ranks", "bytes/rank", "repeats", "median", "algbw")
	for _, r := range results {
		bw := "-"
		if r.AlgBW != nil {
			bw = humanRate(*r.AlgBW)
		}
		fmt.Fprintf(&b, row, r.Workload, fmt.Sprint(r.Ranks), humanBytes(r.BytesPerRank),
			fmt.Sprint(r.Repeats), humanDuration(r.Median), bw)
	}
	for _, r := range results {
		if r.WaitCPU != nil {
			fmt.Fprintf(&b, "# %s: a waiting rank's process burns %s of CPU per collective (median)\n", r.Workload, humanDuration(*r.WaitCPU))
		}
	}
	if info.PeakRSS > 0 {
		fmt.Fprintf(&b, "# rank 0 (coordinator) peak RSS: %s\n", humanBytes(info.PeakRSS))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// humanBytes formats a byte count the way the workloads are named: "-" for
// none, whole MiB or KiB when exact ("2 MiB", "10 KiB"), whole decimal KB
// when exact ("200 KB"), else bytes below 1000 and one decimal above
// ("24.7 MiB").
func humanBytes(n int64) string {
	const kib, mib = 1 << 10, 1 << 20
	switch {
	case n <= 0:
		return "-"
	case n%mib == 0:
		return fmt.Sprintf("%d MiB", n/mib)
	case n%kib == 0:
		return fmt.Sprintf("%d KiB", n/kib)
	case n < 1000:
		return fmt.Sprintf("%d B", n)
	case n%1000 == 0 && n < 1_000_000:
		return fmt.Sprintf("%d KB", n/1000)
	case n < mib:
		return fmt.Sprintf("%.1f KiB", float64(n)/kib)
	default:
		return fmt.Sprintf("%.1f MiB", float64(n)/mib)
	}
}

// humanDuration formats a time with about four significant digits in ns,
// µs, ms or s.
func humanDuration(d time.Duration) string {
	switch {
	case d < time.Microsecond:
		return fmt.Sprintf("%d ns", d.Nanoseconds())
	case d < time.Millisecond:
		return fmt.Sprintf("%.1f µs", float64(d)/float64(time.Microsecond))
	case d < time.Second:
		return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.3f s", d.Seconds())
	}
}

// humanRate formats bytes per second in decimal units (B/s, KB/s, MB/s,
// GB/s), as network bandwidth is usually given.
func humanRate(bps float64) string {
	switch {
	case bps < 1e3:
		return fmt.Sprintf("%.0f B/s", bps)
	case bps < 1e6:
		return fmt.Sprintf("%.1f KB/s", bps/1e3)
	case bps < 1e9:
		return fmt.Sprintf("%.1f MB/s", bps/1e6)
	default:
		return fmt.Sprintf("%.2f GB/s", bps/1e9)
	}
}
