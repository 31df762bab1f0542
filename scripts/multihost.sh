#!/usr/bin/env bash
# Multi-host tests: every rank a separate OS process on a "host" of its own
# (a network namespace, joined to the others by veth pairs and a bridge:
# internal/netns), over real TCP, host names resolved through each host's
# hosts file. They also run in `go test ./...` wherever root and iproute2
# are available (CI runs as root); elsewhere they skip, saying why. This
# script runs just them, verbosely, after saying what is missing.
#
#   scripts/multihost.sh [go test flags...]     e.g. -count=3, -run TestMultihostLinkCut
#
# Needs: Linux, root, iproute2 (ip), and iptables (iptables, ip6tables) for
# the firewall cases (Debian: apt-get install iproute2 iptables).
set -euo pipefail
cd "$(dirname "$0")/.."

have() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] || [ -x "/sbin/$1" ]; }

if [ "$(uname -s)" != Linux ]; then
	echo "multihost: these tests need Linux network namespaces; this is $(uname -s)" >&2
	exit 1
fi
if [ "$(id -u)" != 0 ]; then
	echo "multihost: these tests need root (network namespaces, veth pairs, bridges, iptables); run: sudo $0 $*" >&2
	exit 1
fi
if ! have ip; then
	echo "multihost: the ip command (iproute2) is not installed; Debian: apt-get install iproute2" >&2
	exit 1
fi
if ! have iptables || ! have ip6tables; then
	echo "multihost: iptables is not installed: the iptables cases of TestMultihostLinkCut will be skipped; Debian: apt-get install iptables" >&2
fi

set -x
go test -race -count=1 -timeout=60m -v -run '^(TestMultihost|TestLivenessCut)' "$@" .
