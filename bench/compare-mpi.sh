#!/usr/bin/env bash
# compare-mpi.sh: run the standard workloads (the standard workloads of cmd/starbench) on
# starcomm (cmd/starbench) and on Open MPI (bench/mpi_bench.c) on this host
# and print one table: workload, the medians of starcomm over TCP, of the
# raw relay (starbench --raw: the same bytes through the same sockets via
# rank 0, no framing, checks or polling), of MPI over TCP, of starcomm's
# shm backend (starbench --backend shm) and of MPI's shared-memory
# transport (vader), and the ratios starcomm/raw, starcomm/MPI and
# shm/MPI shm. Under the table, for the barrier and broadcast-10KB, the
# floor of a star on this host: bench/star_floor.c, a star in C that only
# reads, writes and yields, run in the same rounds, against Open MPI and
# against starcomm.
#
# Usage (from anywhere):
#   bash bench/compare-mpi.sh
#   RANKS=8 RUNS=5 SHM=0 bash bench/compare-mpi.sh
#
# Environment:
#   RANKS          number of ranks, >= 1 (default 4)
#   RUNS           rounds, >= 1 (default 3): each round runs every side once,
#                  in turn, so the sides interleave and share the machine's
#                  moods; each cell is the median of the rounds' medians,
#                  with the smallest and largest in brackets; with 2 or
#                  more, the paired columns give the median over the rounds
#                  of each round's own ratio, which the machine's swings
#                  between rounds do not move
#   SHM            1 (default) also runs the shared-memory columns; 0 not
#   FLOOR          1 (default) also runs the C star (bench/star_floor.c,
#                  built with mpicc's C compiler) for barrier and
#                  broadcast-10KB when they run, 2 <= RANKS <= 64; 0 not
#   REPEATS_SCALE  multiply every workload's repeats by this, 0 < F <= 1000
#                  (default 1; starbench's --repeats-scale)
#   WORKLOADS      comma-separated workloads, run in that order on every
#                  side (starbench's --workloads; default: the standard
#                  ones); allreduce-64MiB runs only when named:
#                  WORKLOADS=barrier,allreduce-64MiB bash bench/compare-mpi.sh
#
# The header names the processor (the first "model name" of
# /proc/cpuinfo, with its family and model numbers) and the load average at the start and the end: figures
# from different processors (AMD EPYC, Intel Xeon) are not comparable.
# It also names the system's TCP congestion control, which Open MPI and
# the C star use on loopback; starcomm and the raw relay use cubic on
# links within a host (transport/tcp's OnHostCongestion). Where the
# system's is bbr, its pacing slows loopback transfers; to give every
# side cubic, run `sysctl -w net.ipv4.tcp_congestion_control=cubic`
# (as root) first.
#
# Both sides run R processes on this host. Over TCP loopback:
# starbench with -n R (a star through rank 0); MPI with the tcp and self
# BTLs only (the ob1 PML, no shared memory, no UCX), restricted to the lo
# interface. Through shared memory: starbench -n R --backend shm; MPI with
# the vader (shared memory) and self BTLs of the ob1 PML. MPI runs unbound,
# as the Go processes are. Both time each repetition the same way:
# barrier, time the operation on every rank, take the slowest rank's time;
# the median over the repetitions is reported.
#
# Needs Go, and mpicc/mpirun: when those are missing, installs Debian's
# openmpi-bin and libopenmpi-dev with apt-get (as root, or through sudo).
set -euo pipefail

die() {
	echo "compare-mpi.sh: $*" >&2
	exit 1
}

RANKS=${RANKS:-4}
REPEATS_SCALE=${REPEATS_SCALE:-1}
RUNS=${RUNS:-3}
SHM=${SHM:-1}
FLOOR=${FLOOR:-1}
WORKLOADS=${WORKLOADS:-}
[[ $RUNS =~ ^[0-9]+$ ]] && ((10#$RUNS >= 1)) ||
	die "RUNS must be a whole number >= 1, got '$RUNS'"
RUNS=$((10#$RUNS))
[[ $SHM == 0 || $SHM == 1 ]] || die "SHM must be 0 or 1, got '$SHM'"
[[ $FLOOR == 0 || $FLOOR == 1 ]] || die "FLOOR must be 0 or 1, got '$FLOOR'"
[[ -z $WORKLOADS || $WORKLOADS =~ ^[A-Za-z0-9-]+(,[A-Za-z0-9-]+)*$ ]] ||
	die "WORKLOADS must be workload names separated by commas (allgatherv-cuts,allreduce-64MiB), got '$WORKLOADS'"
[[ ,$WORKLOADS, != *,late-* ]] ||
	die "WORKLOADS: the late-* workloads have no MPI side; run them with starbench alone (starbench -n 4 --workloads late-1ms)"
# The workload selection, for starbench's command line and mpi_bench's.
star_sel=()
mpi_sel=()
if [[ -n $WORKLOADS ]]; then
	star_sel=(--workloads "$WORKLOADS")
	mpi_sel=("$WORKLOADS")
fi
load_start=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?')
[[ $RANKS =~ ^[0-9]+$ ]] && ((10#$RANKS >= 1)) ||
	die "RANKS must be a whole number >= 1, got '$RANKS'"
RANKS=$((10#$RANKS))
awk -v s="$REPEATS_SCALE" 'BEGIN { exit !(s ~ /^([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$/ && s + 0 > 0 && s + 0 <= 1000) }' ||
	die "REPEATS_SCALE must be a number > 0 and at most 1000, got '$REPEATS_SCALE'"

script_dir=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
repo_root=$(cd -- "$script_dir/.." && pwd)
[[ -f $repo_root/go.mod && -d $repo_root/cmd/starbench ]] ||
	die "cannot find the starcomm module (go.mod, cmd/starbench) in $repo_root"
[[ -f $script_dir/mpi_bench.c ]] || die "missing $script_dir/mpi_bench.c"
# The C star's workloads: barrier and broadcast-10KB, where they run.
floor_sel=()
if ((FLOOR)); then
	[[ -f $script_dir/star_floor.c ]] || die "missing $script_dir/star_floor.c (FLOOR=0 runs without the C star)"
	for w in barrier broadcast-10KB; do
		[[ -z $WORKLOADS || ,$WORKLOADS, == *,$w,* ]] && floor_sel+=("$w")
	done
	if ((${#floor_sel[@]} > 0 && (RANKS < 2 || RANKS > 64))); then
		echo "compare-mpi.sh: the C star runs 2 to 64 ranks, not $RANKS: no floor" >&2
		floor_sel=()
	fi
fi
# Its repetitions: 2000 per unit of REPEATS_SCALE (10 times starbench's
# 200, as it is quicker), at least 200, at most 200000.
floor_n=$(awk -v s="$REPEATS_SCALE" 'BEGIN { n = int(2000 * s); if (n < 200) n = 200; if (n > 200000) n = 200000; print n }')

# --- tools -----------------------------------------------------------------

apt_updated=0
apt_install() {
	local sudo=()
	if ((EUID != 0)); then
		command -v sudo >/dev/null 2>&1 ||
			die "need to install $* but not root and no sudo; install them (apt-get install $*) and rerun"
		sudo=(sudo)
	fi
	command -v apt-get >/dev/null 2>&1 ||
		die "need $* but apt-get is not available; install Open MPI (mpicc, mpirun) and rerun"
	echo "compare-mpi.sh: installing $* with apt-get" >&2
	if ((apt_updated == 0)); then
		"${sudo[@]}" apt-get update -qq || die "apt-get update failed"
		apt_updated=1
	fi
	"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -qq --no-install-recommends "$@" >&2 ||
		die "apt-get install $* failed"
}

if ! command -v mpicc >/dev/null 2>&1 || ! command -v mpirun >/dev/null 2>&1; then
	apt_install openmpi-bin libopenmpi-dev
	command -v mpicc >/dev/null 2>&1 && command -v mpirun >/dev/null 2>&1 ||
		die "mpicc or mpirun still not found after installing openmpi-bin libopenmpi-dev"
fi
# mpicc wraps a C compiler; without recommends it may be absent.
mpi_cc=$(mpicc --showme:command 2>/dev/null || echo gcc)
if ! command -v "$mpi_cc" >/dev/null 2>&1; then
	apt_install gcc libc6-dev
	command -v "$mpi_cc" >/dev/null 2>&1 || die "mpicc's compiler '$mpi_cc' not found"
fi
if ! command -v go >/dev/null 2>&1; then
	[[ -x /usr/local/go/bin/go ]] || die "go not found in PATH (or /usr/local/go/bin); install Go 1.26"
	PATH=/usr/local/go/bin:$PATH
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/compare-mpi.XXXXXX") || die "cannot create a temporary directory"
trap 'rm -rf -- "$tmp"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- build -----------------------------------------------------------------

echo "compare-mpi.sh: building mpi_bench and starbench" >&2
mpicc -O2 -o "$tmp/mpi_bench" "$script_dir/mpi_bench.c" -lm ||
	die "mpicc failed to build $script_dir/mpi_bench.c"
if ((${#floor_sel[@]} > 0)); then
	"$mpi_cc" -O2 -o "$tmp/star_floor" "$script_dir/star_floor.c" ||
		die "$mpi_cc failed to build $script_dir/star_floor.c (FLOOR=0 runs without the C star)"
fi
(cd -- "$repo_root" && go build -o "$tmp/starbench" ./cmd/starbench) ||
	die "go build ./cmd/starbench failed"

# --- run -------------------------------------------------------------------

# Open MPI refuses to run as root without these; the rest keeps it quiet
# and on loopback TCP.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_base_warn_component_unused=0
mpirun_args=(
	--allow-run-as-root --oversubscribe --bind-to none
	--mca pml ob1 --mca btl tcp,self
	--mca btl_tcp_if_include lo --mca oob_tcp_if_include lo
	-np "$RANKS"
)
mpirun_shm_args=(
	--allow-run-as-root --oversubscribe --bind-to none
	--mca pml ob1 --mca btl vader,self
	--mca oob_tcp_if_include lo
	-np "$RANKS"
)

# One round runs every side once, in this order; RUNS rounds interleave
# them, so that a change in the machine's load (a noisy neighbour, a
# frequency change) hits every side alike.
for ((run = 1; run <= RUNS; run++)); do
	echo "compare-mpi.sh: round $run of $RUNS (load average: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?'))" >&2
	(cd -- "$repo_root" && "$tmp/starbench" -n "$RANKS" --json --repeats-scale "$REPEATS_SCALE" "${star_sel[@]}") \
		>"$tmp/star.$run.json" || die "starbench -n $RANKS failed (exit $?); see the messages above"
	(cd -- "$repo_root" && "$tmp/starbench" -n "$RANKS" --raw --json --repeats-scale "$REPEATS_SCALE" "${star_sel[@]}") \
		>"$tmp/raw.$run.json" || die "starbench --raw failed (exit $?); see the messages above"
	mpirun "${mpirun_args[@]}" "$tmp/mpi_bench" "$REPEATS_SCALE" "${mpi_sel[@]}" >"$tmp/mpi.$run.txt" ||
		die "mpirun ${mpirun_args[*]} mpi_bench failed (exit $?); see the messages above"
	if ((SHM)); then
		(cd -- "$repo_root" && "$tmp/starbench" -n "$RANKS" --backend shm --json --repeats-scale "$REPEATS_SCALE" "${star_sel[@]}") \
			>"$tmp/shm.$run.json" || die "starbench --backend shm failed (exit $?); see the messages above"
		mpirun "${mpirun_shm_args[@]}" "$tmp/mpi_bench" "$REPEATS_SCALE" "${mpi_sel[@]}" >"$tmp/mpi_shm.$run.txt" ||
			die "mpirun ${mpirun_shm_args[*]} mpi_bench failed (exit $?); see the messages above"
	fi
	: >"$tmp/floor.$run.txt"
	for w in "${floor_sel[@]}"; do
		bytes=()
		[[ $w == broadcast-10KB ]] && bytes=(10240)
		"$tmp/star_floor" "$RANKS" "$floor_n" "${bytes[@]}" >"$tmp/floor.out" ||
			die "star_floor $RANKS $floor_n ${bytes[*]} failed (exit $?); see the messages above"
		# its last line: "slowest rank per repetition: median 12.2 us p10 ..."
		awk -v w="$w" '/^slowest rank per repetition: median / { printf "floor %s %d\n", w, $6 * 1000 + 0.5; found = 1 }
			END { exit !found }' "$tmp/floor.out" >>"$tmp/floor.$run.txt" ||
			die "no median in star_floor's output: $(head -c 500 "$tmp/floor.out")"
	done
done

# --- table -----------------------------------------------------------------

# starbench's JSON: one "key": value per pair; split on , { } [ ] so each
# pair is on its own line whatever the indentation.
medians() {
	tr ',{}[]' '\n\n\n\n\n' <"$1" |
		awk '
			/"workload"[ \t]*:/ { v = $0; sub(/^[^:]*:[ \t]*"/, "", v); sub(/".*$/, "", v); name = v }
			/"median_ns"[ \t]*:/ { v = $0; sub(/^[^:]*:[ \t]*/, "", v); gsub(/[ \t\r]/, "", v); print name, v }
		' >"$2"
	[[ -s $2 ]] || die "no results in starbench's output: $(head -c 500 "$1")"
}
# Every run's medians, as "side workload ns" lines.
: >"$tmp/all.txt"
for ((run = 1; run <= RUNS; run++)); do
	medians "$tmp/star.$run.json" "$tmp/m" && sed 's/^/star /' "$tmp/m" >>"$tmp/all.txt"
	medians "$tmp/raw.$run.json" "$tmp/m" && sed 's/^/raw /' "$tmp/m" >>"$tmp/all.txt"
	grep -v '^#' "$tmp/mpi.$run.txt" | awk '{ print "mpi", $1, $2 }' >>"$tmp/all.txt" ||
		die "no results in mpi_bench's output: $(head -c 500 "$tmp/mpi.$run.txt")"
	if ((SHM)); then
		medians "$tmp/shm.$run.json" "$tmp/m" && sed 's/^/shm /' "$tmp/m" >>"$tmp/all.txt"
		grep -v '^#' "$tmp/mpi_shm.$run.txt" | awk '{ print "mpishm", $1, $2 }' >>"$tmp/all.txt" ||
			die "no results in mpi_bench's (vader) output: $(head -c 500 "$tmp/mpi_shm.$run.txt")"
	fi
	cat "$tmp/floor.$run.txt" >>"$tmp/all.txt"
done

mpi_lib=$(sed -n 's/^# mpi_bench .*library=//p' "$tmp/mpi.1.txt")
cpus=$(nproc 2>/dev/null || echo '?')
cpu_model=$(sed -n 's/^model name[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo 2>/dev/null | head -n 1)
[[ -n $cpu_model ]] || cpu_model=$(uname -m)
# The family and model numbers tell apart two processors of one name
# ("Intel(R) Xeon(R) Processor" covers several generations).
cpu_family=$(sed -n 's/^cpu family[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo 2>/dev/null | head -n 1)
cpu_number=$(sed -n 's/^model[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo 2>/dev/null | head -n 1)
[[ -n $cpu_family && -n $cpu_number ]] && cpu_model="$cpu_model (family $cpu_family, model $cpu_number)"
load_end=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?')
echo "# compare-mpi $(date -u +%Y-%m-%dT%H:%M:%SZ)  ranks=$RANKS  runs=$RUNS (interleaved)  repeats-scale=$REPEATS_SCALE  $(go env GOVERSION)  ${mpi_lib:-MPI} (tcp,self on lo; vader,self)"
echo "# processor: $cpu_model  cpus=$cpus  load average: $load_start at the start, $load_end at the end"
echo "# tcp congestion control: $(cat /proc/sys/net/ipv4/tcp_congestion_control 2>/dev/null || echo unknown) (the system's: Open MPI, the C star); cubic on starcomm's and the raw relay's links within this host"
echo "# each cell: the median of the $RUNS runs' medians [the smallest - the largest]; ratios: median over median"
((RUNS < 2)) || echo "# paired: the median of the runs' own ratios (each run's sides share the machine's mood of that moment, which moves between runs)"
awk -v shm="$SHM" -v runs="$RUNS" '
	function human(ns) {
		if (ns == "") return "-"
		if (ns < 1e3) return sprintf("%d ns", ns)
		if (ns < 1e6) return sprintf("%.1f µs", ns / 1e3)
		if (ns < 1e9) return sprintf("%.2f ms", ns / 1e6)
		return sprintf("%.3f s", ns / 1e9)
	}
	# a number without its unit, in the unit human() picks for ref
	function bare(ns, ref) {
		if (ref < 1e3) return sprintf("%d", ns)
		if (ref < 1e6) return sprintf("%.1f", ns / 1e3)
		if (ref < 1e9) return sprintf("%.2f", ns / 1e6)
		return sprintf("%.3f", ns / 1e9)
	}
	{
		key = $1 SUBSEP $2
		v[key, ++count[key]] = $3 + 0
		if ($1 == "star" && !($2 in seen)) { order[++n] = $2; seen[$2] = 1 }
		if ($1 == "mpi" && !($2 in mpiseen)) { mpiorder[++nm] = $2; mpiseen[$2] = 1 }
	}
	function med(side, w,    key, c, i, j, t, a) {
		key = side SUBSEP w
		c = count[key]
		if (c == 0) return ""
		for (i = 1; i <= c; i++) a[i] = v[key, i]
		for (i = 2; i <= c; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
		lo[key] = a[1]; hi[key] = a[c]
		return (c % 2) ? a[(c + 1) / 2] : (a[c / 2] + a[c / 2 + 1]) / 2
	}
	function cell(side, w,    m, key) {
		m = med(side, w)
		if (m == "") return "-"
		key = side SUBSEP w
		if (count[key] == 1) return human(m)
		return human(m) " [" bare(lo[key], m) "-" bare(hi[key], m) "]"
	}
	function ratio(a, b) {
		return (a != "" && b != "" && a > 0 && b > 0) ? sprintf("%.2f", a / b) : "-"
	}
	# the median over the runs of the ratio of side a to side b in each run ("-"
	# unless both sides have a positive figure from every run)
	function paired(a, b, w,    ka, kb, c, i, j, t, r) {
		ka = a SUBSEP w; kb = b SUBSEP w
		c = count[ka]
		if (c < 2 || count[kb] != c) return "-"
		for (i = 1; i <= c; i++) {
			if (!(v[ka, i] > 0 && v[kb, i] > 0)) return "-"
			r[i] = v[ka, i] / v[kb, i]
		}
		for (i = 2; i <= c; i++) for (j = i; j > 1 && r[j - 1] > r[j]; j--) { t = r[j]; r[j] = r[j - 1]; r[j - 1] = t }
		return sprintf("%.2f", (c % 2) ? r[(c + 1) / 2] : (r[c / 2] + r[c / 2 + 1]) / 2)
	}
	# right-align s in width columns; "µ" is one column but two bytes
	# to a byte-counting awk (mawk), so widen by length("µ") - 1
	function pad(s, width,    k, t, extra) {
		extra = 0; t = s
		while ((k = index(t, "µ")) > 0) { extra += length("µ") - 1; t = substr(t, k + length("µ")) }
		return sprintf("%" (width + extra) "s", s)
	}
	function frow(cols, ncols,    i, line) {
		line = sprintf("%-17s", cols[1])
		for (i = 2; i <= ncols; i++) line = line " " pad(cols[i], i == 2 ? 26 : 15)
		print line
	}
	function row(cols, ncols,    i, line) {
		line = sprintf("%-17s", cols[1])
		for (i = 2; i <= ncols; i++) line = line " " pad(cols[i], i <= (shm ? 6 : 4) ? 26 : 13)
		print line
	}
	END {
		h[1] = "workload"; h[2] = "starcomm"; h[3] = "raw relay"; h[4] = "MPI"
		nc = 4
		if (shm) { h[5] = "starcomm shm"; h[6] = "MPI shm"; nc = 6 }
		h[++nc] = "starcomm/raw"; h[++nc] = "starcomm/MPI"
		if (shm) h[++nc] = "shm/MPI shm"
		if (runs > 1) { h[++nc] = "paired s/raw"; h[++nc] = "paired s/MPI" }
		row(h, nc)
		for (i = 1; i <= n; i++) {
			w = order[i]
			delete c
			c[1] = w; c[2] = cell("star", w); c[3] = cell("raw", w); c[4] = cell("mpi", w)
			k = 4
			if (shm) { c[5] = cell("shm", w); c[6] = cell("mpishm", w); k = 6 }
			c[++k] = ratio(med("star", w), med("raw", w))
			c[++k] = ratio(med("star", w), med("mpi", w))
			if (shm) c[++k] = ratio(med("shm", w), med("mpishm", w))
			if (runs > 1) { c[++k] = paired("star", "raw", w); c[++k] = paired("star", "mpi", w) }
			row(c, k)
		}
		for (i = 1; i <= nm; i++) if (!(mpiorder[i] in seen)) print mpiorder[i] ": in the MPI results only"
		nf = 0
		for (i = 1; i <= n; i++) if (count["floor" SUBSEP order[i]] > 0) fl[++nf] = order[i]
		if (nf == 0) exit
		print "# the floor of a star on this host: bench/star_floor.c (non-blocking reads and writes, sched_yield, nothing else), in the same rounds"
		f[1] = "workload"; f[2] = "C star"; f[3] = "C star/MPI"; f[4] = "starcomm/C star"; k = 4
		if (runs > 1) { f[++k] = "paired c/MPI"; f[++k] = "paired s/c" }
		frow(f, k)
		for (i = 1; i <= nf; i++) {
			w = fl[i]
			delete c
			c[1] = w; c[2] = cell("floor", w)
			c[3] = ratio(med("floor", w), med("mpi", w))
			c[4] = ratio(med("star", w), med("floor", w))
			k = 4
			if (runs > 1) { c[++k] = paired("floor", "mpi", w); c[++k] = paired("star", "floor", w) }
			frow(c, k)
		}
	}
' "$tmp/all.txt"
