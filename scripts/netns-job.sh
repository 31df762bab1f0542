#!/usr/bin/env bash
# Run a job across "hosts" on this machine: HOSTS network namespaces, each
# with one interface (eth0) on a bridge (veth pairs to a switch namespace),
# an address of its own and a hosts file naming every host (node0, node1,
# ...; looked up in files only), and one process per host: rank r runs
# COMMAND on host r with the environment of a TCP job whose coordinator is
# node0:
#
#   COBRE_COMM_BACKEND=tcp COBRE_TCP_COORDINATOR=node0 COBRE_TCP_PORT=PORT
#   COBRE_TCP_RANK=r COBRE_TCP_SIZE=HOSTS NETNS_HOST=r NETNS_HOSTS=HOSTS
#
# (with -6: node names map to IPv6 addresses only, and rank 0 binds its
# IPv6 address, COBRE_TCP_BIND_ADDR). A wrapper COMMAND can map NETNS_HOST
# and NETNS_HOSTS to another launcher's variables. Every rank is a separate
# OS process talking real TCP through its own interface. The script waits
# for every rank, prints each rank's output after the others' ("[rank r]"
# before each line; -q: only rank 0's, unprefixed), and exits 0 if every
# rank exited 0, else 1 after naming the ranks that did not. It deletes the
# namespaces and their files on exit, whatever happens (and the leftovers
# of runs that were killed).
#
#   scripts/netns-job.sh [-n HOSTS] [-6] [-p PORT] [-q] [--] [COMMAND [ARGS...]]
#
# Without COMMAND it builds cmd/starbench and runs its small workloads
# (starbench --workloads allgatherv-cuts,allreduce-32B,barrier,broadcast-10KB).
# Examples:
#
#   scripts/netns-job.sh                          # 4 ranks on 4 hosts, starbench
#   scripts/netns-job.sh -n 3 -6 -- ./myprogram   # 3 hosts, IPv6 only
#
# Needs: Linux, root, iproute2 (Debian: apt-get install iproute2).
# The tests (scripts/multihost.sh, TestMultihost*) build the same hosts with
# internal/netns; this script is the same topology for any command.
set -euo pipefail
# The ranks run in the directory the script was started from, so that a
# relative COMMAND (./myprogram) is the caller's; the script itself works
# from the checkout's root.
caller=$PWD
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/sbin:/sbin"

hosts=4 ipv6=0 port=29500 quiet=0
usage() { sed -n '/^#   scripts\/netns-job.sh \[/p' "$0" | sed 's/^#   /usage: /' >&2; exit 2; }
while [ $# -gt 0 ]; do
	case "$1" in
	-n) [ $# -ge 2 ] || usage; hosts=$2; shift 2 ;;
	-6) ipv6=1; shift ;;
	-p) [ $# -ge 2 ] || usage; port=$2; shift 2 ;;
	-q) quiet=1; shift ;;
	--) shift; break ;;
	-h|--help) usage ;;
	-*) echo "netns-job: unknown option $1" >&2; usage ;;
	*) break ;;
	esac
done
case "$hosts" in ''|*[!0-9]*) echo "netns-job: -n $hosts: want a number of hosts from 1 to 250" >&2; exit 2 ;; esac
if [ "$hosts" -lt 1 ] || [ "$hosts" -gt 250 ]; then
	echo "netns-job: -n $hosts: want a number of hosts from 1 to 250" >&2; exit 2
fi
case "$port" in ''|*[!0-9]*) echo "netns-job: -p $port: want a TCP port from 1 to 65535" >&2; exit 2 ;; esac
if [ "$port" -lt 1 ] || [ "$port" -gt 65535 ]; then
	echo "netns-job: -p $port: want a TCP port from 1 to 65535" >&2; exit 2
fi
if [ "$(uname -s)" != Linux ]; then
	echo "netns-job: needs Linux network namespaces; this is $(uname -s)" >&2; exit 1
fi
if [ "$(id -u)" != 0 ]; then
	echo "netns-job: needs root (network namespaces, veth pairs, a bridge); run: sudo $0 $*" >&2; exit 1
fi
if ! command -v ip >/dev/null 2>&1; then
	echo "netns-job: the ip command (iproute2) is not installed; Debian: apt-get install iproute2" >&2; exit 1
fi

# Names as internal/netns makes them, stnet-<pid>.<start>-<seq>-<name>-<role>,
# so that either cleans up what the other's killed runs left behind: a
# namespace whose creator (pid and start time) no longer runs is deleted.
start_of() { sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f20; }
owner="$$.$(start_of $$)"
ns_sw="stnet-$owner-1-job-sw"
ns_host() { echo "stnet-$owner-1-job-h$1"; }

sweep() {
	local ns pid start
	for ns in $(ip netns list | cut -d' ' -f1) $(ls /etc/netns 2>/dev/null); do
		case "$ns" in stnet-*-job-*) ;; *) continue ;; esac
		pid=${ns#stnet-}; pid=${pid%%-*}; start=${pid#*.}; pid=${pid%%.*}
		if [ -n "$pid" ] && [ "$(start_of "$pid")" = "$start" ]; then
			continue # its creator still runs
		fi
		ip netns del "$ns" 2>/dev/null || true
		rm -rf "/etc/netns/$ns"
	done
}

pids=()
cleanup() {
	local p i
	for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	for ((i = 0; i < hosts; i++)); do
		# Anything still in a host (started just before a signal came).
		for p in $(ip netns pids "$(ns_host "$i")" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
		ip netns del "$(ns_host "$i")" 2>/dev/null || true
		rm -rf "/etc/netns/$(ns_host "$i")"
	done
	ip netns del "$ns_sw" 2>/dev/null || true
	[ -z "${tmp:-}" ] || rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
sweep
tmp=$(mktemp -d "${TMPDIR:-/tmp}/netns-job.XXXXXX")
tmp=$(cd -- "$tmp" && pwd) # absolute: the ranks run in $caller

if [ $# -eq 0 ]; then
	echo "netns-job: building cmd/starbench" >&2
	go build -o "$tmp/starbench" ./cmd/starbench
	set -- "$tmp/starbench" --workloads allgatherv-cuts,allreduce-32B,barrier,broadcast-10KB
fi

addr4() { echo "10.233.0.$(($1 + 1))"; }
addr6() { echo "fd53:7463:6e65:ffff::$(printf %x $(($1 + 1)))"; }
addr() { if [ "$ipv6" = 1 ]; then addr6 "$1"; else addr4 "$1"; fi; }

# The switch: a namespace with a bridge, layer 2 only.
ip netns add "$ns_sw"
ip netns exec "$ns_sw" sh -c 'echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6; echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6' 2>/dev/null || true
ip -n "$ns_sw" link add br0 type bridge stp_state 0
ip -n "$ns_sw" link set br0 up

hostsfile="$tmp/hosts"
{
	echo "# hosts of a netns-job.sh run"
	printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n'
	for ((i = 0; i < hosts; i++)); do printf '%s\tnode%d\n' "$(addr "$i")" "$i"; done
} >"$hostsfile"
nsswitch="$tmp/nsswitch.conf"
{ grep -v '^[[:space:]]*hosts:' /etc/nsswitch.conf 2>/dev/null || true; echo "hosts: files"; } >"$nsswitch"

for ((i = 0; i < hosts; i++)); do
	ns=$(ns_host "$i")
	mkdir -p "/etc/netns/$ns"
	cp "$hostsfile" "/etc/netns/$ns/hosts" # ip netns exec mounts them over /etc
	cp "$nsswitch" "/etc/netns/$ns/nsswitch.conf"
	ip netns add "$ns"
	ip netns exec "$ns" sh -c 'echo 0 > /proc/sys/net/ipv6/conf/default/accept_dad' 2>/dev/null || true
	ip -n "$ns_sw" link add "h$i" type veth peer name eth0 netns "$ns"
	ip -n "$ns_sw" link set "h$i" master br0
	ip -n "$ns_sw" link set "h$i" up
	ip -n "$ns" link set lo up
	ip -n "$ns" addr add "$(addr4 "$i")/24" dev eth0
	if [ "$ipv6" = 1 ]; then ip -n "$ns" addr add "$(addr6 "$i")/64" dev eth0 nodad; fi
	ip -n "$ns" link set eth0 up
done

# Wait until every link carries traffic: eth0 up, its addresses not
# tentative, the switch port forwarding.
for ((i = 0; i < hosts; i++)); do
	ns=$(ns_host "$i")
	for ((try = 0; ; try++)); do
		if ip -n "$ns" -br link show dev eth0 | grep -q ' UP ' &&
			! ip -n "$ns" addr show dev eth0 | grep -q tentative &&
			ip -n "$ns_sw" -d link show dev "h$i" | grep -q 'state forwarding'; then
			break
		fi
		if [ "$try" -ge 100 ]; then
			echo "netns-job: host $i's link did not come up within 10 s:" >&2
			ip -n "$ns" addr show dev eth0 >&2
			exit 1
		fi
		sleep 0.1
	done
done

bind=()
if [ "$ipv6" = 1 ]; then bind=("COBRE_TCP_BIND_ADDR=$(addr6 0)"); fi
echo "netns-job: $hosts hosts (node0..node$((hosts - 1)), $(addr 0) ...), rank 0 on node0 port $port: $*" >&2
for ((i = 0; i < hosts; i++)); do
	extra=()
	if [ "$i" = 0 ]; then extra=("${bind[@]}"); fi
	(cd -- "$caller" && exec ip netns exec "$(ns_host "$i")" env COBRE_COMM_BACKEND=tcp COBRE_TCP_COORDINATOR=node0 \
		COBRE_TCP_PORT="$port" COBRE_TCP_RANK="$i" COBRE_TCP_SIZE="$hosts" \
		NETNS_HOST="$i" NETNS_HOSTS="$hosts" ${extra[@]+"${extra[@]}"} "$@") \
		>"$tmp/rank$i.out" 2>&1 </dev/null &
	pids+=($!)
done

failed=()
for ((i = 0; i < hosts; i++)); do
	code=0
	wait "${pids[$i]}" || code=$?
	if [ "$code" != 0 ]; then failed+=("rank $i exited with code $code"); fi
done
pids=()
if [ "$quiet" = 1 ] && [ ${#failed[@]} -eq 0 ]; then
	cat "$tmp/rank0.out"
else
	for ((i = 0; i < hosts; i++)); do sed "s/^/[rank $i] /" "$tmp/rank$i.out"; done
fi
if [ ${#failed[@]} -gt 0 ]; then
	printf 'netns-job: %s\n' "${failed[@]}" >&2
	exit 1
fi
echo "netns-job: every rank exited 0" >&2
