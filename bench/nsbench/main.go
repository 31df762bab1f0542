// Command nsbench runs the standard workloads where the network is the
// limit: every rank on a host of its own (a Linux network namespace, one
// veth link each to a common bridge, see internal/netns), each link capped
// with a tc tbf qdisc, and runs the same workloads on starcomm
// (starbench), on the raw relay (starbench --raw) and on Open MPI
// (mpi_bench, ob1/tcp across the hosts), interleaved, RUNS times. It
// prints each side's medians and, for the bandwidth-bound workloads, the
// star's bound: what rank 0 must send per operation over its one capped
// link ((R-1) times the assembled buffer for an allgatherv) divided by the
// rate, and each side's time as a percentage of that bound (100% is the
// link's speed; TCP's own headers keep payload below about 96% of it).
//
// It needs root, iproute2 (ip, tc) and Open MPI's mpirun; bench/compare-netns.sh
// checks for them, builds what it needs and runs it. Usage:
//
//	nsbench -starbench PATH -mpibench PATH [-ranks 4] [-rate 1gbit] [-runs 3] [-repeats-scale 1] [-workloads NAME,...]
//
// -workloads names the workloads to run, in that order (starbench's
// --workloads; mpi_bench's second argument): by default the standard ones;
// allreduce-64MiB, whose bound is rank 0's ·64 MiB in each direction,
// runs only when named.
//
// Open MPI runs across the namespaces through a remote-shell agent that
// "logs in" to a host by entering its namespace (plm_rsh_agent), with
// mpirun itself on host 0; each host then holds one rank, so MPI is told
// to yield when idle (mpi_yield_when_idle), as it decides for itself when
// ranks share a host's cores.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/starcomm/starcomm/internal/cpuinfo"
	"github.com/starcomm/starcomm/internal/netns"
)

// Sizes of the standard workloads (cmd/starbench), in bytes per rank.
const (
	cutBytes    = 25_000 * 8
	trialBytes  = 262_144 * 8
	bigBytes    = 2_097_152 * 8
	reduceBytes = 8_388_608 * 8
	cutsPerIter = 119
	port        = 29500
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "nsbench:", err)
		os.Exit(1)
	}
}

type options struct {
	starbench, mpibench string
	ranks, runs         int
	rate                string
	scale               float64
	workloads           string
}

func run() error {
	var o options
	flag.StringVar(&o.starbench, "starbench", "", "path of a starbench binary (required)")
	flag.StringVar(&o.mpibench, "mpibench", "", "path of bench/mpi_bench.c built with mpicc (required)")
	flag.IntVar(&o.ranks, "ranks", 4, "ranks, one per host (2 to 16)")
	flag.IntVar(&o.runs, "runs", 3, "interleaved rounds of the three sides")
	flag.StringVar(&o.rate, "rate", "1gbit", `each host link's cap, in tc's units ("1gbit", "500mbit"); "none" for no cap`)
	flag.Float64Var(&o.scale, "repeats-scale", 1, "starbench's --repeats-scale (mpi_bench's argument)")
	flag.StringVar(&o.workloads, "workloads", "", "comma-separated workloads to run, in that order (default: the standard ones); allreduce-64MiB only when named")
	flag.Parse()
	switch {
	case o.starbench == "" || o.mpibench == "":
		return errors.New("-starbench and -mpibench are required")
	case o.ranks < 2 || o.ranks > 16:
		return fmt.Errorf("-ranks must be 2 to 16, got %d", o.ranks)
	case o.runs < 1:
		return fmt.Errorf("-runs must be at least 1, got %d", o.runs)
	case o.workloads != "" && !validList(o.workloads):
		return fmt.Errorf("-workloads %q: want workload names separated by commas (allgatherv-cuts,allreduce-64MiB)", o.workloads)
	}
	bps, err := parseRate(o.rate)
	if err != nil {
		return err
	}
	if err := netns.Available(); err != nil {
		return fmt.Errorf("network namespaces are not available: %w", err)
	}
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		return errors.New("mpirun not found: install Open MPI (apt-get install openmpi-bin libopenmpi-dev)")
	}
	n, err := netns.New("nsbench", o.ranks, netns.Options{})
	if err != nil {
		return err
	}
	defer n.Close()
	// Ctrl-C and kill: tear down before exiting.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if bps > 0 {
		for i := range o.ranks {
			if err := n.Limit(i, o.rate); err != nil {
				return err
			}
		}
	}
	tmp, err := os.MkdirTemp("", "nsbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	agent, err := writeAgent(tmp, n, o.ranks)
	if err != nil {
		return err
	}
	load0 := loadAvg()
	all := map[string]map[string][]float64{} // side -> workload -> medians (ns)
	var order []string
	add := func(side string, res map[string]float64, names []string) {
		if all[side] == nil {
			all[side] = map[string][]float64{}
		}
		for _, w := range names {
			all[side][w] = append(all[side][w], res[w])
			if side == "starcomm" && !slices.Contains(order, w) {
				order = append(order, w)
			}
		}
	}
	for round := 1; round <= o.runs; round++ {
		fmt.Fprintf(os.Stderr, "nsbench: round %d of %d (load average %s)\n", round, o.runs, loadAvg())
		for _, side := range []string{"starcomm", "raw relay"} {
			res, names, err := runStarbench(ctx, n, o, side == "raw relay")
			if err != nil {
				return fmt.Errorf("%s: %w", side, err)
			}
			add(side, res, names)
		}
		res, names, err := runMPI(ctx, n, o, mpirun, agent)
		if err != nil {
			return fmt.Errorf("MPI: %w", err)
		}
		add("MPI", res, names)
	}
	printTable(o, bps, all, order, load0)
	return nil
}

// parseRate reads a tc rate ("1gbit", "500mbit", "100kbit", "none") as
// bytes per second (0 for none).
func parseRate(s string) (float64, error) {
	if s == "none" {
		return 0, nil
	}
	units := []struct {
		suffix string
		bits   float64
	}{{"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}}
	for _, u := range units {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err == nil && f > 0 {
				return f * u.bits / 8, nil
			}
		}
	}
	return 0, fmt.Errorf(`-rate %q: want a number with gbit, mbit or kbit ("1gbit"), or "none"`, s)
}

// writeAgent writes the remote-shell agent through which mpirun starts
// its daemons on the other hosts: "agent HOST COMMAND..." runs COMMAND in
// HOST's namespace (HOST is an address of the Net).
func writeAgent(dir string, n *netns.Net, ranks int) (string, error) {
	ip, err := exec.LookPath("ip")
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("#!/bin/sh\n# nsbench's remote-shell agent for mpirun: enter HOST's namespace.\nhost=$1\nshift\ncase $host in\n")
	for i := range ranks {
		fmt.Fprintf(&b, "%s) ns=%s ;;\n", n.Addr(i), n.Namespace(i))
	}
	fmt.Fprintf(&b, "*) echo \"nsbench agent: unknown host $host\" >&2; exit 1 ;;\nesac\nexec %s netns exec \"$ns\" sh -c \"$*\"\n", ip)
	path := filepath.Join(dir, "agent.sh")
	return path, os.WriteFile(path, []byte(b.String()), 0o755)
}

// runStarbench runs one job of starbench, one rank per host, and returns
// rank 0's medians by workload, in order.
func runStarbench(ctx context.Context, n *netns.Net, o options, raw bool) (map[string]float64, []string, error) {
	procs := max(1, runtime.NumCPU()/o.ranks)
	args := []string{"--json", "--repeats-scale", strconv.FormatFloat(o.scale, 'g', -1, 64)}
	if raw {
		args = append(args, "--raw")
	}
	if o.workloads != "" {
		args = append(args, "--workloads", o.workloads)
	}
	outs := make([]bytes.Buffer, o.ranks)
	errs := make([]error, o.ranks)
	var wg sync.WaitGroup
	for r := range o.ranks {
		cmd := n.CommandContext(ctx, r, o.starbench, args...)
		cmd.Env = append(os.Environ(), "COBRE_COMM_BACKEND=tcp", "COBRE_TCP_COORDINATOR="+n.Addr(0),
			"COBRE_TCP_BIND_ADDR="+n.Addr(0), "COBRE_TCP_PORT="+strconv.Itoa(port),
			"COBRE_TCP_RANK="+strconv.Itoa(r), "COBRE_TCP_SIZE="+strconv.Itoa(o.ranks),
			"GOMAXPROCS="+strconv.Itoa(procs))
		cmd.Stdout, cmd.Stderr = &outs[r], &outs[r]
		wg.Go(func() { errs[r] = cmd.Run() })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			return nil, nil, fmt.Errorf("rank %d: %w\n%s", r, err, outs[r].String())
		}
	}
	var rep struct {
		Results []struct {
			Workload string  `json:"workload"`
			Median   float64 `json:"median_ns"`
		} `json:"results"`
	}
	if err := json.Unmarshal(outs[0].Bytes(), &rep); err != nil {
		return nil, nil, fmt.Errorf("rank 0's output: %w\n%s", err, outs[0].String())
	}
	res := map[string]float64{}
	var names []string
	for _, r := range rep.Results {
		res[r.Workload] = r.Median
		names = append(names, r.Workload)
	}
	return res, names, nil
}

// runMPI runs mpi_bench across the hosts and returns its medians.
func runMPI(ctx context.Context, n *netns.Net, o options, mpirun, agent string) (map[string]float64, []string, error) {
	hosts := make([]string, o.ranks)
	for i := range hosts {
		hosts[i] = n.Addr(i)
	}
	args := []string{"--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
		"--mca", "plm_rsh_agent", agent, "--host", strings.Join(hosts, ","),
		"--mca", "pml", "ob1", "--mca", "btl", "tcp,self",
		"--mca", "btl_tcp_if_include", "eth0", "--mca", "oob_tcp_if_include", "eth0",
		"--mca", "mpi_yield_when_idle", "1",
		"-np", strconv.Itoa(o.ranks), o.mpibench, strconv.FormatFloat(o.scale, 'g', -1, 64)}
	if o.workloads != "" {
		args = append(args, o.workloads)
	}
	cmd := n.CommandContext(ctx, 0, mpirun, args...)
	cmd.Env = append(os.Environ(), "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
		"OMPI_MCA_btl_base_warn_component_unused=0")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, nil, fmt.Errorf("mpirun: %w\n%s%s", err, out.String(), errb.String())
	}
	res := map[string]float64{}
	var names []string
	for _, line := range strings.Split(out.String(), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || strings.HasPrefix(line, "#") {
			continue
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			return nil, nil, fmt.Errorf("mpi_bench line %q: %w", line, err)
		}
		res[f[0]] = v
		names = append(names, f[0])
	}
	if len(names) == 0 {
		return nil, nil, fmt.Errorf("no results from mpi_bench:\n%s%s", out.String(), errb.String())
	}
	return res, names, nil
}

// starBound is the bytes rank 0 sends per operation of workload w at
// ranks R (0 for a workload that no link bounds).
func starBound(w string, r int) float64 {
	gather := func(perRank float64) float64 { return float64(r-1) * float64(r) * perRank }
	switch w {
	case "allgatherv-cuts":
		return gather(cutBytes)
	case "allgatherv-2MiB":
		return gather(trialBytes)
	case "allgatherv-16MiB":
		return gather(bigBytes)
	case "sddp-iteration":
		return gather(trialBytes) + cutsPerIter*gather(cutBytes)
	case "allreduce-64MiB":
		// Rank 0 receives every worker's contribution and sends each the
		// result: ·n each way over its full-duplex link.
		return float64(r-1) * reduceBytes
	}
	return 0
}

// validList reports whether s is a comma-separated list of names made of
// letters, digits and hyphens (what starbench and mpi_bench accept as
// workload names; they reject unknown ones themselves).
func validList(s string) bool {
	for name := range strings.SplitSeq(s, ",") {
		if name == "" || strings.TrimLeft(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-") != "" {
			return false
		}
	}
	return true
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s) == 0 {
		return math.NaN()
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func human(ns float64) string {
	switch {
	case math.IsNaN(ns):
		return "-"
	case ns < 1e6:
		return fmt.Sprintf("%.1f µs", ns/1e3)
	case ns < 1e9:
		return fmt.Sprintf("%.2f ms", ns/1e6)
	}
	return fmt.Sprintf("%.3f s", ns/1e9)
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func printTable(o options, bps float64, all map[string]map[string][]float64, order []string, load0 string) {
	fmt.Printf("# nsbench %s  ranks=%d (one per network namespace)  link cap=%s  runs=%d (interleaved)  repeats-scale=%g  %s\n",
		time.Now().UTC().Format(time.RFC3339), o.ranks, o.rate, o.runs, o.scale, runtime.Version())
	fmt.Printf("# processor: %s  cpus=%d  load average: %s at the start, %s at the end\n", cpuinfo.Model(), runtime.NumCPU(), load0, loadAvg())
	fmt.Println("# each time: the median of the runs' medians; bound: the bytes rank 0 sends per operation over its capped link / the cap; % of bound: bound / time")
	row := "%-17s %11s %11s %11s %11s %9s %9s %9s\n"
	fmt.Printf(row, "workload", "starcomm", "raw relay", "MPI", "star bound", "starcomm", "raw", "MPI")
	for _, w := range order {
		s, r, m := median(all["starcomm"][w]), median(all["raw relay"][w]), median(all["MPI"][w])
		bound := math.NaN()
		pct := func(t float64) string { return "-" }
		if b := starBound(w, o.ranks); b > 0 && bps > 0 {
			bound = b / bps * 1e9
			pct = func(t float64) string {
				if math.IsNaN(t) || t <= 0 {
					return "-"
				}
				return fmt.Sprintf("%.0f%%", 100*bound/t)
			}
		}
		fmt.Printf(row, w, human(s), human(r), human(m), human(bound), pct(s), pct(r), pct(m))
	}
}
