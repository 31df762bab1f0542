#!/usr/bin/env bash
# compare-netns.sh: run the standard workloads where the network is the
# limit. Every rank gets a host of its own (a Linux network namespace with
# one veth link to a common bridge), each link capped with a tc tbf qdisc
# (1 Gbit/s by default), and the same workloads run on starcomm
# (cmd/starbench), on the raw relay (starbench --raw) and on Open MPI
# (bench/mpi_bench.c over TCP across the hosts), RUNS times interleaved.
# The table gives each side's median and, for the bandwidth-bound
# workloads, the star's bound: what rank 0 must send per operation over its
# one capped link ((R-1) times the assembled buffer for an allgatherv)
# divided by the rate, and each side's time against it (100% is the link's
# speed; TCP's own headers keep payload below about 96% of it).
#
# Usage (from anywhere, as root):
#   bash bench/compare-netns.sh
#   RANKS=8 RATE=500mbit RUNS=5 bash bench/compare-netns.sh
#
# Environment:
#   RANKS          ranks, one per host, 2 to 16 (default 4)
#   RATE           each host link's cap in tc's units (default 1gbit);
#                  "none" for no cap
#   RUNS           interleaved rounds of the three sides, >= 1 (default 3)
#   REPEATS_SCALE  multiply every workload's repeats by this (default 1)
#   WORKLOADS      comma-separated workloads, run in that order (default:
#                  the standard ones); allreduce-64MiB (a streamed
#                  allreduce, bound (R-1)·64 MiB each way over rank 0's
#                  link) runs only when named:
#                  WORKLOADS=allreduce-64MiB bash bench/compare-netns.sh
#
# Needs root (network namespaces), iproute2 (ip, tc), Go, and Open MPI
# (mpicc, mpirun); installs the missing Debian packages with apt-get. The
# namespaces (named stnet-<pid>.<start>-<n>-nsbench-<host>) and the bridge
# are removed on exit, also after an interrupt. This is not part of the
# test suite.
set -euo pipefail

die() {
	echo "compare-netns.sh: $*" >&2
	exit 1
}

RANKS=${RANKS:-4}
RATE=${RATE:-1gbit}
RUNS=${RUNS:-3}
REPEATS_SCALE=${REPEATS_SCALE:-1}
WORKLOADS=${WORKLOADS:-}
[[ $RANKS =~ ^[0-9]+$ ]] && ((10#$RANKS >= 2 && 10#$RANKS <= 16)) ||
	die "RANKS must be a whole number from 2 to 16, got '$RANKS'"
[[ $RUNS =~ ^[0-9]+$ ]] && ((10#$RUNS >= 1)) ||
	die "RUNS must be a whole number >= 1, got '$RUNS'"
[[ $RATE == none || $RATE =~ ^[0-9]+(\.[0-9]+)?([kmg]?bit|[kmg]?bps)$ ]] ||
	die "RATE must be a tc rate such as 1gbit or 500mbit, or none; got '$RATE'"

[[ -z $WORKLOADS || $WORKLOADS =~ ^[A-Za-z0-9-]+(,[A-Za-z0-9-]+)*$ ]] ||
	die "WORKLOADS must be workload names separated by commas (allgatherv-cuts,allreduce-64MiB), got '$WORKLOADS'"
[[ ,$WORKLOADS, != *,late-* ]] ||
	die "WORKLOADS: the late-* workloads have no MPI side; run them with starbench alone (starbench -n 4 --workloads late-1ms)"

((EUID == 0)) || die "needs root (it creates network namespaces); run it as root"
[[ $(uname -s) == Linux ]] || die "needs Linux network namespaces"

script_dir=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
repo_root=$(cd -- "$script_dir/.." && pwd)
[[ -f $repo_root/go.mod && -d $repo_root/cmd/starbench ]] ||
	die "cannot find the starcomm module (go.mod, cmd/starbench) in $repo_root"

apt_updated=0
apt_install() {
	command -v apt-get >/dev/null 2>&1 || die "need $* but apt-get is not available; install them and rerun"
	echo "compare-netns.sh: installing $* with apt-get" >&2
	if ((apt_updated == 0)); then
		apt-get update -qq || die "apt-get update failed"
		apt_updated=1
	fi
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >&2 ||
		die "apt-get install $* failed"
}

command -v ip >/dev/null 2>&1 && command -v tc >/dev/null 2>&1 || apt_install iproute2
command -v ip >/dev/null 2>&1 && command -v tc >/dev/null 2>&1 || die "ip or tc still not found after installing iproute2"
ip netns list >/dev/null 2>&1 || die "'ip netns' does not work here (no network namespace support?)"
if ! command -v mpicc >/dev/null 2>&1 || ! command -v mpirun >/dev/null 2>&1; then
	apt_install openmpi-bin libopenmpi-dev
	command -v mpicc >/dev/null 2>&1 && command -v mpirun >/dev/null 2>&1 ||
		die "mpicc or mpirun still not found after installing openmpi-bin libopenmpi-dev"
fi
mpi_cc=$(mpicc --showme:command 2>/dev/null || echo gcc)
command -v "$mpi_cc" >/dev/null 2>&1 || apt_install gcc libc6-dev
if ! command -v go >/dev/null 2>&1; then
	[[ -x /usr/local/go/bin/go ]] || die "go not found in PATH (or /usr/local/go/bin); install Go 1.26"
	PATH=/usr/local/go/bin:$PATH
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/compare-netns.XXXXXX") || die "cannot create a temporary directory"
trap 'rm -rf -- "$tmp"' EXIT

echo "compare-netns.sh: building mpi_bench, starbench and nsbench" >&2
mpicc -O2 -o "$tmp/mpi_bench" "$script_dir/mpi_bench.c" -lm || die "mpicc failed to build mpi_bench.c"
(cd -- "$repo_root" && go build -o "$tmp/starbench" ./cmd/starbench && go build -o "$tmp/nsbench" ./bench/nsbench) ||
	die "go build failed"

echo "compare-netns.sh: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
# nsbench sets up and removes the namespaces itself (also on SIGINT/SIGTERM).
"$tmp/nsbench" -starbench "$tmp/starbench" -mpibench "$tmp/mpi_bench" \
	-ranks "$RANKS" -rate "$RATE" -runs "$RUNS" -repeats-scale "$REPEATS_SCALE" -workloads "$WORKLOADS"
