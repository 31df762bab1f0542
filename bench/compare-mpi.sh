#!/usr/bin/env bash
# compare-mpi.sh: run the standard workloads (the standard workloads of cmd/starbench) on
# starcomm (cmd/starbench) and on Open MPI (bench/mpi_bench.c) on this host
# and print one table: workload, the medians of starcomm over TCP, of the
# raw relay (starbench --raw: the same bytes through the same sockets via
# rank 0, no framing, checks or polling), of MPI over TCP, of starcomm's
# shm backend (starbench --backend shm) and of MPI's shared-memory
# transport (vader), and the ratios starcomm/raw, starcomm/MPI and
# shm/MPI shm.
#
# Usage (from anywhere):
#   bash bench/compare-mpi.sh
#   RANKS=2 REPEATS_SCALE=0.25 bash bench/compare-mpi.sh
#
# Environment:
#   RANKS          number of ranks, >= 1 (default 4)
#   REPEATS_SCALE  multiply every workload's repeats by this, 0 < F <= 1000
#                  (default 1; starbench's --repeats-scale)
#
# Both sides run R processes on this host, twice. Over TCP loopback:
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

echo "compare-mpi.sh: starcomm: starbench -n $RANKS --json --repeats-scale $REPEATS_SCALE" >&2
(cd -- "$repo_root" && "$tmp/starbench" -n "$RANKS" --json --repeats-scale "$REPEATS_SCALE") \
	>"$tmp/star.json" || die "starbench failed (exit $?); see the messages above"

echo "compare-mpi.sh: raw relay: starbench -n $RANKS --raw --json --repeats-scale $REPEATS_SCALE" >&2
(cd -- "$repo_root" && "$tmp/starbench" -n "$RANKS" --raw --json --repeats-scale "$REPEATS_SCALE") \
	>"$tmp/raw.json" || die "starbench --raw failed (exit $?); see the messages above"

echo "compare-mpi.sh: MPI: mpirun ${mpirun_args[*]} mpi_bench $REPEATS_SCALE" >&2
mpirun "${mpirun_args[@]}" "$tmp/mpi_bench" "$REPEATS_SCALE" >"$tmp/mpi.txt" ||
	die "mpirun mpi_bench failed (exit $?); see the messages above"

echo "compare-mpi.sh: starcomm shm: starbench -n $RANKS --backend shm --json --repeats-scale $REPEATS_SCALE" >&2
(cd -- "$repo_root" && "$tmp/starbench" -n "$RANKS" --backend shm --json --repeats-scale "$REPEATS_SCALE") \
	>"$tmp/shm.json" || die "starbench --backend shm failed (exit $?); see the messages above"

echo "compare-mpi.sh: MPI shared memory: mpirun ${mpirun_shm_args[*]} mpi_bench $REPEATS_SCALE" >&2
mpirun "${mpirun_shm_args[@]}" "$tmp/mpi_bench" "$REPEATS_SCALE" >"$tmp/mpi_shm.txt" ||
	die "mpirun mpi_bench (vader) failed (exit $?); see the messages above"

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
medians "$tmp/star.json" "$tmp/star.txt"
medians "$tmp/raw.json" "$tmp/raw.txt"
medians "$tmp/shm.json" "$tmp/shm.txt"
grep -v '^#' "$tmp/mpi.txt" >"$tmp/mpi.res" || die "no results in mpi_bench's output: $(head -c 500 "$tmp/mpi.txt")"
grep -v '^#' "$tmp/mpi_shm.txt" >"$tmp/mpi_shm.res" || die "no results in mpi_bench's (vader) output: $(head -c 500 "$tmp/mpi_shm.txt")"

mpi_lib=$(sed -n 's/^# mpi_bench .*library=//p' "$tmp/mpi.txt")
cpus=$(nproc 2>/dev/null || echo '?')
echo "# compare-mpi $(date -u +%Y-%m-%dT%H:%M:%SZ)  ranks=$RANKS  repeats-scale=$REPEATS_SCALE  cpus=$cpus  $(go env GOVERSION)  ${mpi_lib:-MPI} (tcp,self on lo; vader,self)"
awk '
	function human(ns) {
		if (ns == "") return "-"
		if (ns < 1e3) return sprintf("%d ns", ns)
		if (ns < 1e6) return sprintf("%.1f µs", ns / 1e3)
		if (ns < 1e9) return sprintf("%.2f ms", ns / 1e6)
		return sprintf("%.3f s", ns / 1e9)
	}
	FILENAME == ARGV[1] { mpi[$1] = $2; next }
	FILENAME == ARGV[2] { raw[$1] = $2; next }
	FILENAME == ARGV[3] { mpishm[$1] = $2; next }
	FILENAME == ARGV[4] { shm[$1] = $2; next }
	{ order[++n] = $1; star[$1] = $2; seen[$1] = 1 }
	# right-align s in width columns; "µ" is one column but two bytes
	# to a byte-counting awk (mawk), so widen by length("µ") - 1
	function pad(s, width) {
		return sprintf("%" (width + (index(s, "µ") > 0) * (length("µ") - 1)) "s", s)
	}
	function ratio(a, b) {
		return (a > 0 && b > 0) ? sprintf("%.2f", a / b) : "-"
	}
	function row(w, s, r, m, h, hm, sr, sm, hh) {
		printf "%-17s %s %s %s %s %s %s %s %s\n", w, pad(s, 11), pad(r, 11), pad(m, 11), pad(h, 13), pad(hm, 11),
			pad(sr, 13), pad(sm, 13), pad(hh, 12)
	}
	END {
		row("workload", "starcomm", "raw relay", "MPI", "starcomm shm", "MPI shm", "starcomm/raw", "starcomm/MPI", "shm/MPI shm")
		for (i = 1; i <= n; i++) {
			w = order[i]
			row(w, human(star[w]), human(w in raw ? raw[w] : ""), human(w in mpi ? mpi[w] : ""),
				human(w in shm ? shm[w] : ""), human(w in mpishm ? mpishm[w] : ""),
				ratio(star[w], raw[w]), ratio(star[w], mpi[w]), ratio(shm[w], mpishm[w]))
		}
		for (w in mpi) if (!(w in seen)) row(w, "-", "-", human(mpi[w]), "-", "-", "-", "-", "-")
	}
' "$tmp/mpi.res" "$tmp/raw.txt" "$tmp/mpi_shm.res" "$tmp/shm.txt" "$tmp/star.txt"
