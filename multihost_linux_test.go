//go:build linux

package starcomm_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/internal/netns"
)

// Ranks on separate hosts: each rank a separate OS process (this test
// binary) in a network namespace of its own, one "host" each, the hosts
// joined by veth pairs to a bridge (internal/netns), over real TCP. Host
// names resolve through each host's hosts file, as a cluster's DNS would
// resolve them. These tests need root, iproute2 and, for iptables, the
// iptables package; they skip with the reason where any is missing.
// scripts/multihost.sh runs them (and says what is missing);
// scripts/netns-job.sh runs any job on such hosts from the shell.

// multihostPort is rank 0's port in the namespace tests: every Net is a
// closed world, so a fixed port cannot collide with anything.
const multihostPort = 29500

// skipUnlessNetns skips t where network namespaces cannot be used (not
// root, no ip command), and, with block, where iptables cannot.
func skipUnlessNetns(t *testing.T, block bool) {
	t.Helper()
	skipUnlessChaos(t)
	if err := netns.Available(); err != nil {
		t.Skipf("multi-host test skipped: network namespaces are not available here: %v", err)
	}
	if block {
		if err := netns.BlockAvailable(); err != nil {
			t.Skipf("multi-host test skipped: iptables cannot be used here: %v", err)
		}
	}
}

// hostNames are the names of the hosts of a job of size ranks: node0,
// node1, ...
func hostNames(size int) []string {
	names := make([]string, size)
	for i := range names {
		names[i] = "node" + strconv.Itoa(i)
	}
	return names
}

// newHosts makes a Net for t, closed when t ends (after its child
// processes are reaped: Cleanups run last-registered first).
func newHosts(t *testing.T, hosts int, opts netns.Options) *netns.Net {
	t.Helper()
	n, err := netns.New(t.Name(), hosts, opts)
	require.NoError(t, err, "network namespaces")
	t.Cleanup(func() { assert.NoError(t, n.Close()) })
	return n
}

// hostEnv is the environment of a rank on a host: a TCP job whose
// coordinator is coordinator (a name or an address), on multihostPort,
// plus env.
func hostEnv(coordinator string, env ...string) []string {
	return append(append(os.Environ(),
		"COBRE_COMM_BACKEND=tcp", "COBRE_TCP_COORDINATOR="+coordinator,
		"COBRE_TCP_PORT="+strconv.Itoa(multihostPort)), env...)
}

// TestMultihostConformance runs the conformance suite at R=4 with rank r
// on host r, each case a job of its own on port multihostPort + its index
// (envPortPerCase: a rank leaving a failing case early cannot reach that
// case's coordinator):
//   - ipv4: the workers find the coordinator by its name, node0, which
//     every host's hosts file maps to its address; the coordinator binds
//     every interface (COBRE_TCP_BIND_ADDR unset: 0.0.0.0), as in the
//     README's example;
//   - ipv6: the coordinator binds its IPv6 address only, so every
//     connection is IPv6; rank 1 dials that address (COBRE_TCP_COORDINATOR
//     an IPv6 literal), ranks 2 and 3 the name node0, which has an AAAA
//     record only.
func TestMultihostConformance(t *testing.T) {
	skipUnlessNetns(t, false)
	const size = 4
	exe, err := os.Executable()
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		ipv6 bool
	}{{"ipv4", false}, {"ipv6", true}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var n *netns.Net
			var bind []string
			if tc.ipv6 {
				n = newHosts(t, size, netns.Options{IPv6: true})
				require.NoError(t, n.AddName("node0", n.Addr6(0)))
				bind = []string{"COBRE_TCP_BIND_ADDR=" + n.Addr6(0)}
			} else {
				n = newHosts(t, size, netns.Options{Names: hostNames(size)})
			}
			conformanceProcs(t, size, func(r int) *exec.Cmd {
				coordinator := "node0"
				if tc.ipv6 && r == 1 {
					coordinator = n.Addr6(0)
				}
				cmd := n.CommandContext(ctx, r, exe)
				cmd.Env = append(hostEnv(coordinator, bind...), envPortPerCase+"=1")
				return cmd
			})
		})
	}
}

// Bounds of the time to fail after a link is cut, for each mode: the lower
// bound counts from the start of the cut, the upper from its end (cutting
// takes a while, more on a loaded machine: ip, then the carrier's loss or
// the rules' insertion, and the silence begins somewhere in between).
const (
	// With the control session on (COBRE_TCP_LIVENESS_SECS=2, collective
	// timeout an hour): within the liveness timeout + 1 s, and not before
	// 0.8 of it (silence counts from the last heartbeat heard).
	cutLiveness = 2 * time.Second
	// With it off (COBRE_TCP_LIVENESS_SECS=0): the collective timeout,
	// 2 s, decides: between 3/4 of it and it + 1.5 s (the workers' margin
	// on the coordinator's link is min(timeout/2, 500 ms)).
	cutTimeout = 2 * time.Second
)

// TestMultihostLinkCut cuts one host off in the middle of a loop of
// collectives, 4 ranks on 4 hosts, coordinator found by name: every other
// rank fails with CollectiveFailed naming the cut rank, within the bound
// of the mode, and so does the cut rank itself (naming rank 0, or itself
// when it is rank 0 and the control session finds every worker silent):
//   - cut: the link pulled (ip link set down at the switch: no RST, no
//     FIN, the peers hear nothing);
//   - iptables: DROP rules for everything in and out of the host (its
//     link stays up);
//
// each with the control session on (liveness 2 s, collective timeout an
// hour: found by the missing heartbeats) and off (liveness 0, collective
// timeout 2 s: found by the collective's timeout, TCP_USER_TIMEOUT and
// the coordinator's Abort).
func TestMultihostLinkCut(t *testing.T) {
	skipUnlessNetns(t, false)
	const size = 4
	for _, tc := range []struct {
		how    string // "cut" or "iptables"
		live   bool
		op     string
		victim int
	}{
		{"cut", true, comm.OpAllreduce, 3},
		{"cut", false, comm.OpBarrier, 0},
		{"iptables", true, comm.OpAllgatherv, 0},
		{"iptables", false, comm.OpAllgatherv, 2},
	} {
		mode := map[bool]string{true: "liveness=on", false: "liveness=off"}[tc.live]
		t.Run(fmt.Sprintf("%s/%s/victim=%d/op=%s", tc.how, mode, tc.victim, tc.op), func(t *testing.T) {
			if tc.how == "iptables" {
				skipUnlessNetns(t, true)
			}
			n := newHosts(t, size, netns.Options{Names: hostNames(size)})
			ctx := chaosWatchdog(t)
			env := []string{"COBRE_TCP_TIMEOUT_SECS=3600", "COBRE_TCP_LIVENESS_SECS=" + strconv.Itoa(int(cutLiveness/time.Second))}
			lower, upper := cutLiveness*8/10, cutLiveness+time.Second
			if !tc.live {
				env = []string{"COBRE_TCP_TIMEOUT_SECS=" + strconv.Itoa(int(cutTimeout/time.Second)), "COBRE_TCP_LIVENESS_SECS=0"}
				lower, upper = cutTimeout*3/4, cutTimeout+1500*time.Millisecond
			}
			// Ready after enough iterations for every control session to be up
			// (see TestLivenessCut).
			ready := map[string]int{comm.OpAllgatherv: 3, comm.OpAllreduce: 200, comm.OpBarrier: 200}[tc.op]
			procs := startChaosCmds(t, repeat(tc.op, size), func(r int) *exec.Cmd {
				cmd := n.SelfCommand(r)
				cmd.Env = hostEnv("node0")
				return cmd
			}, append(env, envChaosReady+"="+strconv.Itoa(ready))...)
			for _, p := range procs {
				p.await(t, ctx, "READY ")
			}
			begin := time.Now()
			if tc.how == "cut" {
				require.NoError(t, n.Cut(tc.victim), "cut host %d", tc.victim)
			} else {
				require.NoError(t, n.Block(tc.victim), "block host %d", tc.victim)
			}
			end := time.Now()
			for _, p := range procs {
				if p.rank == tc.victim {
					continue
				}
				res := parseResult(t, p.await(t, ctx, "RESULT "))
				t.Logf("detection how=%s %s rank=%d ms=%.1f (cutting took %.1f ms) named=%s deadline=%s msg=%q",
					tc.how, mode, p.rank, ms(res.at.Sub(end)), ms(end.Sub(begin)), res.fields["rank"], res.fields["deadline"], res.msg)
				assertFailedNaming(t, p, res, tc.victim)
				assert.GreaterOrEqual(t, res.at.Sub(begin), lower, "rank %d failed before the bound", p.rank)
				assert.LessOrEqual(t, res.at.Sub(end), upper, "rank %d detected the cut late", p.rank)
				if tc.live {
					assert.Contains(t, res.msg, "unresponsive", "rank %d", p.rank)
					assert.Equal(t, "true", res.fields["deadline"], "rank %d: errors.Is(err, os.ErrDeadlineExceeded): %s", p.rank, res.msg)
				}
			}
			// The cut host hears nobody either: it fails too, within the
			// same bound. A cut worker names rank 0, the only rank it
			// talks to; a cut rank 0 names itself with the control session
			// (silence from every worker: its own link was cut), else the
			// worker whose link timed out first.
			victim := procs[tc.victim]
			res := parseResult(t, victim.await(t, ctx, "RESULT "))
			t.Logf("the cut rank %d: ms=%.1f named=%s msg=%q", tc.victim, ms(res.at.Sub(end)), res.fields["rank"], res.msg)
			assert.Equal(t, "CollectiveFailed", res.fields["type"], "the cut rank %d: %s", tc.victim, res.msg)
			switch {
			case tc.victim == 0 && tc.live:
				assert.Equal(t, 0, res.int(t, "rank"), "the cut rank 0 names itself: %s", res.msg)
				assert.Contains(t, res.msg, "its own link was cut")
			case tc.victim == 0:
				assert.Contains(t, []int{1, 2, 3}, res.int(t, "rank"), "the cut rank 0 names a worker: %s", res.msg)
			default:
				assert.Equal(t, 0, res.int(t, "rank"), "the cut rank %d names rank 0: %s", tc.victim, res.msg)
			}
			assert.GreaterOrEqual(t, res.at.Sub(begin), lower, "the cut rank %d failed before the bound", tc.victim)
			assert.LessOrEqual(t, res.at.Sub(end), upper, "the cut rank %d detected the cut late", tc.victim)
			for _, p := range procs {
				assert.Equal(t, chaosExitExpected, p.wait(t, ctx), "rank %d exit: %v\n%s", p.rank, p.state, p.dump())
			}
		})
	}
}

// TestMultihostSessionlessCut: a worker without a control session (rank
// 2, COBRE_TCP_LIVENESS_SECS=0 on it alone: as a spec-only worker, or one
// cut off before its session came up) is held to the liveness timeout by
// its data link's system (TCP_USER_TIMEOUT and keep-alive; see
// coordinator.setPeerTimeout). Its host is cut off in the middle of a loop
// of allreduces, collective timeout an hour: ranks 0 and 1 fail naming it
// within the liveness timeout and a second, not after the hour.
func TestMultihostSessionlessCut(t *testing.T) {
	skipUnlessNetns(t, false)
	const size, victim = 3, 2
	n := newHosts(t, size, netns.Options{Names: hostNames(size)})
	ctx := chaosWatchdog(t)
	live := "COBRE_TCP_LIVENESS_SECS=" + strconv.Itoa(int(cutLiveness/time.Second))
	procs := startChaosCmds(t, repeat(comm.OpAllreduce, size), func(r int) *exec.Cmd {
		cmd := n.SelfCommand(r)
		cmd.Env = hostEnv("node0", live)
		if r == victim {
			cmd.Env = hostEnv("node0", "COBRE_TCP_LIVENESS_SECS=0")
		}
		return cmd
	}, "COBRE_TCP_TIMEOUT_SECS=3600", envChaosReady+"=200", envChaosSessions+"=1")
	for _, p := range procs {
		p.await(t, ctx, "READY ")
	}
	begin := time.Now()
	require.NoError(t, n.Cut(victim), "cut host %d", victim)
	end := time.Now()
	for _, p := range procs[:victim] {
		res := parseResult(t, p.await(t, ctx, "RESULT "))
		t.Logf("rank %d: ms=%.1f (cutting took %.1f ms) named=%s msg=%q", p.rank, ms(res.at.Sub(end)), ms(end.Sub(begin)), res.fields["rank"], res.msg)
		assertFailedNaming(t, p, res, victim)
		assert.GreaterOrEqual(t, res.at.Sub(begin), cutLiveness*8/10, "rank %d failed before the bound", p.rank)
		assert.LessOrEqual(t, res.at.Sub(end), cutLiveness+time.Second, "rank %d detected the cut late", p.rank)
		assert.Contains(t, res.msg, "the system gave up on the connection", "rank %d", p.rank)
		assert.Equal(t, chaosExitExpected, p.wait(t, ctx), "rank %d exit: %v\n%s", p.rank, p.state, p.dump())
	}
}

// TestMultihostSlowRankStreamed: a loop of streamed allreduces (24 MiB per
// rank, so ·n is 72 MiB) over four hosts, collective timeout 2 s,
// control sessions up; then rank 1's host link is capped at 10 Mbit/s
// (its 24 MiB take about 20 s each way). Rank 0 takes the other workers'
// frames, and sends the replies, only as fast as rank 1's data comes, but
// every link moves within the timeout: two more allreduces complete on
// every rank, each result checked. Workers that wrote their frame in
// calls of up to 4 MiB waited in one call through several of rank 1's
// megabytes, and failed naming rank 0 in the first capped allreduce; and
// at 10 Mbit/s rank 1's own write, which wakes only once a third of its
// socket buffer is free (2.7 MiB, 2.2 s), outlasted its deadline until a
// write whose link still moves went on (link.slowWrite).
func TestMultihostSlowRankStreamed(t *testing.T) {
	// Two allreduces under the cap take about 45 s.
	slowRankUnderCap(t, modeStreamed, 2, "10mbit")
}

// slowRankUnderCap runs the chaos loop of mode on 4 hosts with the given
// collective timeout (seconds) and a liveness of 10 s, caps rank 1's link
// at rate (tc's notation) once every rank is READY, and requires two iterations to
// end under the cap on every rank (the first may have begun before it),
// each checked, none failed. env adds variables for every rank.
func slowRankUnderCap(t *testing.T, mode string, timeout int, rate string, env ...string) {
	t.Helper()
	skipUnlessNetns(t, false)
	const size, slow = 4, 1
	n := newHosts(t, size, netns.Options{Names: hostNames(size)})
	// More than chaosWatchdog gives.
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	procs := startChaosCmds(t, repeat(mode, size), func(r int) *exec.Cmd {
		cmd := n.SelfCommand(r)
		cmd.Env = hostEnv("node0", "COBRE_TCP_LIVENESS_SECS=10")
		return cmd
	}, append([]string{"COBRE_TCP_TIMEOUT_SECS=" + strconv.Itoa(timeout), envChaosReady + "=2", envChaosIters + "=1"}, env...)...)
	for _, p := range procs {
		p.await(t, ctx, "READY ")
	}
	require.NoError(t, n.Limit(slow, rate), "cap host %d at %s", slow, rate)
	capped := time.Now()
	for _, p := range procs {
		// The first iteration that ends after the cap may have begun
		// before it; the second began under it.
		for done := 0; done < 2; {
			l := p.await(t, ctx, "")
			if strings.HasPrefix(l.text, "RESULT ") {
				res := parseResult(t, l)
				t.Fatalf("rank %d failed under the cap %v, naming rank %s: %s\n%s", p.rank, env, res.fields["rank"], res.msg, p.dump())
			}
			var i, ms int
			if _, err := fmt.Sscanf(l.text, "ITER %d ms=%d", &i, &ms); err != nil || !l.at.After(capped) {
				continue
			}
			done++
			t.Logf("rank %d: iteration %d ended under the cap after %d ms", p.rank, i, ms)
		}
	}
}

// TestMultihostSlowRankRunAhead: as TestMultihostSlowRankStreamed, with a
// loop of relayed allgathervs (4 MiB per rank, a 16 MiB result), each
// followed by a small allreduce. Under the cap rank 0 sends rank 1 its
// result for several seconds, while ranks 2 and 3, which have theirs,
// wait for rank 0 in the allreduce: rank 0 tells them on their control
// sessions that it is still in the allgatherv, and two more iterations
// complete on every rank, each result checked. Before, ranks 2 and 3
// waited a timeout from their arrival in the allreduce and failed it
// naming rank 0, and then every rank did. The timeout is 2 s, while rank
// 1's 16 MiB take 6.7 s: rank 0's writes to rank 1 wake only once a third
// of the socket buffer has gone, up to 2 s apart under this cap, and go on
// past their deadline while the link moves (link.slowWrite); rank 0 then
// waits for rank 1's allreduce frame while rank 1 still reads the rest of
// its result, which the socket buffers hold, and reads on while its data
// still goes out (link.moving), telling ranks 2 and 3, which wait in the
// allreduce, that it is still in it. Before (a 4 s timeout was needed),
// rank 0 failed rank 1 at a write's deadline, then at the allreduce's
// read, and then ranks 2 and 3 failed naming rank 0.
func TestMultihostSlowRankRunAhead(t *testing.T) {
	// Two iterations under the cap take 7 to 12 s.
	slowRankUnderCap(t, modeGatherReduce, 2, "20mbit")
}

// TestMultihostSlowRankRunAheadLarge: TestMultihostSlowRankRunAhead with
// a 24 MiB allreduce after each allgatherv: ranks 2 and 3, which have the
// allgatherv's result, write their 24 MiB frames of the allreduce to rank
// 0 while it still sends rank 1 its result under the cap, and rank 0
// keeps their windows closed. Rank 0's word that it is busy moves their
// deadlines and holds off their system's own timeout (TCP_USER_TIMEOUT)
// as long; without the latter they met ETIMEDOUT a timeout after their
// arrival, and every rank named rank 0 (3 of 3 runs). With a 2 s timeout
// (a 4 s one was needed before) rank 0 also waits in the allreduce for
// rank 1, which still reads its result, telling ranks 2 and 3, whose
// frames it leaves unread meanwhile, that it is still in it (see
// TestMultihostSlowRankRunAhead).
func TestMultihostSlowRankRunAheadLarge(t *testing.T) {
	// Two iterations under the cap take 20 to 40 s.
	slowRankUnderCap(t, modeGatherBigReduce, 2, "20mbit")
}

// TestMultihostSlowRankStopped: TestMultihostSlowRankRunAhead's loop, rank
// 1's link capped at 20 Mbit/s, and then, once an iteration has ended under
// the cap, rank 1's process stopped (SIGSTOP): a slow link must not hide
// a hung rank. Its host still takes rank 0's bytes until its receive
// buffer is full, and then closes its window; rank 0's I/O that goes on
// while the link moves (link.slowWrite, link.moving) then stops going on,
// and every other rank fails naming rank 1, a timeout after the link last
// moved: within the timeout, the time the cap takes to fill rank 1's
// socket buffers (8 MiB: 3.4 s) and two and a half seconds. Measured: 2.1
// s when the stop came before a collective's frames, 5.3 to 5.4 s in the
// middle of rank 1's result.
func TestMultihostSlowRankStopped(t *testing.T) {
	const slow, timeout = 1, 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	_, procs, _ := slowStopJob(t, ctx)
	stopped := procs[slow].signal(t, sigStop)
	bound := timeout + 3400*time.Millisecond + 2500*time.Millisecond
	for _, p := range procs {
		if p.rank == slow {
			continue
		}
		res := parseResult(t, p.await(t, ctx, "RESULT "))
		detect := res.at.Sub(stopped)
		t.Logf("rank %d: failed %.1f ms after the stop, naming %s: %s", p.rank, ms(detect), res.fields["rank"], res.msg)
		assertFailedNaming(t, p, res, slow)
		assert.GreaterOrEqual(t, detect, timeout*3/4, "rank %d failed before the timeout", p.rank)
		assert.LessOrEqual(t, detect, bound, "rank %d detected the stopped rank late", p.rank)
	}
	procs[slow].signal(t, sigCont)
	for _, p := range procs {
		if p.rank != slow {
			assert.Equal(t, chaosExitExpected, p.wait(t, ctx), "rank %d exit: %v\n%s", p.rank, p.state, p.dump())
		}
	}
}

// TestMultihostBindAddr: host 0 has two interfaces, eth0 (network 0, name
// node0) and eth1 (network 1, name node0-mgmt), and the coordinator binds
// eth0's address only (COBRE_TCP_BIND_ADDR):
//   - joined: every worker dials node0 and the job runs;
//   - refused: rank 3 dials node0-mgmt and is refused (connection
//     refused on every attempt, until its connect timeout), while ranks 1
//     and 2, through node0, join: the coordinator fails start-up naming
//     rank 3 and tells them so (only registered workers hear it).
func TestMultihostBindAddr(t *testing.T) {
	skipUnlessNetns(t, false)
	const size = 4
	n := newHosts(t, size, netns.Options{Networks: 2, Names: hostNames(size)})
	require.NoError(t, n.AddName("node0-mgmt", n.AddrOn(1, 0)))
	command := func(coordinator func(r int) string) func(r int) *exec.Cmd {
		return func(r int) *exec.Cmd {
			cmd := n.SelfCommand(r)
			cmd.Env = hostEnv(coordinator(r), "COBRE_TCP_BIND_ADDR="+n.Addr(0), "COBRE_TCP_CONNECT_TIMEOUT_MS=2000")
			return cmd
		}
	}
	t.Run("joined", func(t *testing.T) {
		ctx := chaosWatchdog(t)
		procs := startChaosCmds(t, repeat("slow", size), command(func(int) string { return "node0" }), envSlowIters+"=3")
		for _, p := range procs {
			assert.Equal(t, "DONE iters=3", p.await(t, ctx, "DONE ").text, "rank %d", p.rank)
			assert.Equal(t, 0, p.wait(t, ctx), "rank %d exit: %v\n%s", p.rank, p.state, p.dump())
		}
	})
	t.Run("refused", func(t *testing.T) {
		ctx := chaosWatchdog(t)
		procs := startChaosCmds(t, repeat(comm.OpBarrier, size), command(func(r int) string {
			if r == 3 {
				return "node0-mgmt"
			}
			return "node0"
		}))
		res := parseResult(t, procs[3].await(t, ctx, "RESULT "))
		t.Logf("rank 3 (through eth1): call_ms=%s msg=%q", res.fields["call_ms"], res.msg)
		assert.Equal(t, "InitializationFailed", res.fields["type"], res.msg)
		assert.Contains(t, res.msg, "connection refused")
		assert.Contains(t, res.msg, "node0-mgmt:"+strconv.Itoa(multihostPort))
		assert.Contains(t, res.msg, "unreachable after")
		res = parseResult(t, procs[0].await(t, ctx, "RESULT "))
		t.Logf("rank 0: msg=%q", res.msg)
		assert.Equal(t, "InitializationFailed", res.fields["type"], res.msg)
		assert.Contains(t, res.msg, "missing ranks [3]")
		for _, p := range procs[1:3] {
			res := parseResult(t, p.await(t, ctx, "RESULT "))
			t.Logf("rank %d (through eth0): named=%s msg=%q", p.rank, res.fields["rank"], res.msg)
			assert.Equal(t, "InitializationFailed", res.fields["type"], "rank %d: %s", p.rank, res.msg)
			assert.Equal(t, 3, res.int(t, "rank"), "rank %d joined and was told rank 3 never came: %s", p.rank, res.msg)
		}
		for _, p := range procs {
			assert.Equal(t, chaosExitExpected, p.wait(t, ctx), "rank %d exit: %v\n%s", p.rank, p.state, p.dump())
		}
	})
}

// dnsLag is how long the coordinator's name stays unknown after every
// worker has looked it up in vain: longer than a worker once kept trying
// ("no such host" three times: about 150 ms).
const dnsLag = time.Second

// TestMultihostDNSLag: the workers start while their hosts files do not
// know the coordinator's name, node0 (a cluster's DNS lagging its pods);
// once each has looked it up in vain, the name stays unknown for dnsLag
// more, and every worker must still be trying; then node0 appears in the
// hosts files and the job runs. A worker given a name that never appears
// fails at its connect timeout saying so.
func TestMultihostDNSLag(t *testing.T) {
	skipUnlessNetns(t, false)
	const size = 4
	names := hostNames(size)
	names[0] = ""
	n := newHosts(t, size, netns.Options{Names: names})
	t.Run("appears", func(t *testing.T) {
		ctx := chaosWatchdog(t)
		var opened []<-chan error
		for r := 1; r < size; r++ {
			opened = append(opened, watchRead(t, n.HostsFile(r)))
		}
		procs := startChaosCmds(t, repeat("slow", size), func(r int) *exec.Cmd {
			cmd := n.SelfCommand(r)
			cmd.Env = hostEnv("node0", "COBRE_TCP_CONNECT_TIMEOUT_MS=20000")
			return cmd
		}, envSlowIters+"=1")
		for i, ch := range opened {
			select {
			case err := <-ch:
				require.NoError(t, err, "watching host %d's hosts file", i+1)
			case <-ctx.Done():
				t.Fatalf("watchdog: rank %d never read its hosts file\n%s", i+1, procs[i+1].dump())
			}
		}
		lag := time.NewTimer(dnsLag) // the scenario: the name is not in DNS yet
		select {
		case <-lag.C:
		case <-ctx.Done():
			t.Fatal("watchdog")
		}
		for _, p := range procs[1:] {
			select {
			case <-p.exited:
				t.Fatalf("rank %d gave up before the coordinator's name appeared: %v\n%s", p.rank, p.state, p.dump())
			default:
			}
		}
		require.NoError(t, n.AddName("node0", n.Addr(0)))
		appeared := time.Now()
		for _, p := range procs {
			l := p.await(t, ctx, "DONE ")
			if p.rank > 0 {
				t.Logf("rank %d started %.0f ms after node0 appeared", p.rank, ms(l.at.Sub(appeared)))
			}
			assert.Equal(t, 0, p.wait(t, ctx), "rank %d exit: %v\n%s", p.rank, p.state, p.dump())
		}
	})
	t.Run("never", func(t *testing.T) {
		ctx := chaosWatchdog(t)
		procs := startChaosCmds(t, repeat(comm.OpBarrier, 2), func(r int) *exec.Cmd {
			cmd := n.SelfCommand(r)
			cmd.Env = hostEnv("node9", "COBRE_TCP_CONNECT_TIMEOUT_MS=1500")
			return cmd
		})
		res := parseResult(t, procs[1].await(t, ctx, "RESULT "))
		t.Logf("rank 1: call_ms=%s msg=%q", res.fields["call_ms"], res.msg)
		assert.Equal(t, "InitializationFailed", res.fields["type"], res.msg)
		assert.Contains(t, res.msg, "connect to coordinator at node9:"+strconv.Itoa(multihostPort))
		assert.Contains(t, res.msg, "name node9 did not resolve within 1.5s")
		assert.Contains(t, res.msg, "no such host")
		assert.GreaterOrEqual(t, res.int(t, "call_ms"), 1500, "it kept trying until the connect timeout")
		for _, p := range procs {
			assert.Equal(t, chaosExitExpected, p.wait(t, ctx), "rank %d exit: %v\n%s", p.rank, p.state, p.dump())
		}
	})
}

// watchRead returns a channel that receives nil once a process has opened
// and closed path without writing it (as a resolver reading a hosts file
// does), or the error that stopped the watch. The watch starts before
// watchRead returns; it ends with the test.
func watchRead(t *testing.T, path string) <-chan error {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	require.NoError(t, err, "inotify")
	_, err = unix.InotifyAddWatch(fd, path, unix.IN_CLOSE_NOWRITE)
	if err != nil {
		_ = unix.Close(fd)
		require.NoError(t, err, "inotify watch of %s", path)
	}
	f := os.NewFile(uintptr(fd), "inotify "+path) // non-blocking: reads go through the runtime's poller
	t.Cleanup(func() { _ = f.Close() })
	ch := make(chan error, 1)
	go func() {
		buf := make([]byte, 4096)
		_, err := f.Read(buf) // any event: there is only one kind
		if err != nil && strings.Contains(err.Error(), "file already closed") {
			return
		}
		ch <- err
	}()
	return ch
}

// starbenchOnce builds cmd/starbench once per test binary.
var starbenchOnce struct {
	sync.Once
	path string
	err  error
}

// starbenchPath builds cmd/starbench (without -race: the script's ranks
// are the job, not the code under test) and returns its path; it skips
// where there is no go command.
func starbenchPath(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build starbench with")
	}
	starbenchOnce.Do(func() {
		dir, err := os.MkdirTemp("", "starcomm-starbench-")
		if err != nil {
			starbenchOnce.err = err
			return
		}
		starbenchOnce.path = filepath.Join(dir, "starbench")
		if out, err := exec.Command(goTool, "build", "-o", starbenchOnce.path, "./cmd/starbench").CombinedOutput(); err != nil {
			starbenchOnce.err = fmt.Errorf("go build ./cmd/starbench: %v\n%s", err, out)
		}
	})
	require.NoError(t, starbenchOnce.err)
	return starbenchOnce.path
}

// netnsJob runs scripts/netns-job.sh with args and returns its stdout,
// stderr and exit code; it checks that the run left nothing behind: no
// namespace and no directory under /etc/netns named after the script's
// process.
func netnsJob(t *testing.T, ctx context.Context, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return netnsJobIn(t, ctx, "", args...)
}

// netnsJobIn is netnsJob started from directory dir ("": the checkout).
func netnsJobIn(t *testing.T, ctx context.Context, dir string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	script, err := filepath.Abs(filepath.Join("scripts", "netns-job.sh"))
	require.NoError(t, err)
	cmd := exec.CommandContext(ctx, "bash", append([]string{script}, args...)...)
	cmd.Dir = dir
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		require.NoError(t, err, "netns-job.sh %v\n%s", args, e.String())
	}
	assertNoJobLeft(t, cmd.Process.Pid)
	return o.String(), e.String(), cmd.ProcessState.ExitCode()
}

// assertNoJobLeft checks that no namespace or /etc/netns directory of the
// netns-job.sh run of process pid remains.
func assertNoJobLeft(t *testing.T, pid int) {
	t.Helper()
	prefix := netns.Prefix + strconv.Itoa(pid) + "."
	out, err := exec.Command("ip", "netns", "list").Output()
	require.NoError(t, err, "ip netns list")
	for line := range strings.Lines(string(out)) {
		assert.False(t, strings.HasPrefix(line, prefix), "namespace left behind: %s", line)
	}
	ents, err := os.ReadDir(netns.EtcDir)
	if err == nil {
		for _, e := range ents {
			assert.False(t, strings.HasPrefix(e.Name(), prefix), "%s/%s left behind", netns.EtcDir, e.Name())
		}
	}
}

// TestMultihostScript runs scripts/netns-job.sh, which builds the same
// hosts from the shell (namespaces, veth pairs, a bridge, hosts files) and
// runs a command on each as one rank of a TCP job:
//   - starbench: 4 ranks of cmd/starbench on 4 hosts over IPv4, and 3 over
//     IPv6 (names with AAAA records only, rank 0 bound to its IPv6
//     address), finish their workloads and rank 0 reports ranks=4 (3);
//   - hosts: every rank runs on its own host: a distinct address on eth0,
//     node0 resolving to rank 0's;
//   - relative: started from another directory, a relative COMMAND is
//     that directory's, and the ranks run there;
//   - failed: a rank that exits 3 makes the script exit 1 naming it;
//   - killed: SIGTERM to the script while the ranks run kills them and
//     deletes the hosts;
//
// each run leaving no namespace or file behind.
func TestMultihostScript(t *testing.T) {
	skipUnlessNetns(t, false)
	bin := starbenchPath(t)
	t.Run("starbench", func(t *testing.T) {
		for _, tc := range []struct {
			args  []string
			ranks int
		}{{[]string{"-n", "4"}, 4}, {[]string{"-n", "3", "-6"}, 3}} {
			ctx := chaosWatchdog(t)
			args := append(tc.args, "-q", "--", bin, "--workloads", "allreduce-32B,barrier", "--repeats-scale", "0.1")
			stdout, stderr, code := netnsJob(t, ctx, args...)
			require.Equal(t, 0, code, "netns-job.sh %v\nstdout:\n%s\nstderr:\n%s", tc.args, stdout, stderr)
			assert.Contains(t, stdout, "ranks="+strconv.Itoa(tc.ranks), tc.args)
			assert.Regexp(t, `(?m)^allreduce-32B +`+strconv.Itoa(tc.ranks)+` `, stdout, tc.args)
			assert.Regexp(t, `(?m)^barrier +`+strconv.Itoa(tc.ranks)+` `, stdout, tc.args)
			assert.Contains(t, stderr, "every rank exited 0", tc.args)
		}
	})
	t.Run("hosts", func(t *testing.T) {
		ctx := chaosWatchdog(t)
		stdout, stderr, code := netnsJob(t, ctx, "-n", "3", "--", "sh", "-c",
			`echo "rank=$COBRE_TCP_RANK size=$COBRE_TCP_SIZE coordinator=$COBRE_TCP_COORDINATOR addr=$(ip -o -4 addr show dev eth0 | awk '{print $4}') node0=$(getent hosts node0 | awk '{print $1}')"`)
		require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
		for r := range 3 {
			assert.Contains(t, stdout, fmt.Sprintf("[rank %d] rank=%d size=3 coordinator=node0 addr=10.233.0.%d/24 node0=10.233.0.1\n", r, r, r+1))
		}
	})
	t.Run("relative", func(t *testing.T) {
		// Started from another directory, a relative COMMAND is that
		// directory's.
		ctx := chaosWatchdog(t)
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, "prog"), []byte("#!/bin/sh\necho \"here rank=$COBRE_TCP_RANK pwd=$(pwd)\"\n"), 0o755))
		stdout, stderr, code := netnsJobIn(t, ctx, dir, "-n", "2", "--", "./prog")
		require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
		for r := range 2 {
			assert.Contains(t, stdout, fmt.Sprintf("[rank %d] here rank=%d pwd=%s\n", r, r, dir))
		}
	})
	t.Run("failed", func(t *testing.T) {
		ctx := chaosWatchdog(t)
		stdout, stderr, code := netnsJob(t, ctx, "-n", "3", "--", "sh", "-c", `[ "$COBRE_TCP_RANK" != 2 ] || exit 3; echo fine`)
		assert.Equal(t, 1, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
		assert.Contains(t, stderr, "netns-job: rank 2 exited with code 3")
		assert.NotContains(t, stderr, "rank 0 exited")
		assert.Contains(t, stdout, "[rank 0] fine\n[rank 1] fine\n")
	})
	t.Run("killed", func(t *testing.T) {
		ctx := chaosWatchdog(t)
		fifo := filepath.Join(t.TempDir(), "started")
		require.NoError(t, unix.Mkfifo(fifo, 0o600))
		f, err := os.OpenFile(fifo, os.O_RDWR, 0) // read-write: no EOF between the ranks' writes
		require.NoError(t, err)
		t.Cleanup(func() { _ = f.Close() })
		cmd := exec.CommandContext(ctx, "bash", filepath.Join("scripts", "netns-job.sh"), "-n", "3", "--",
			"sh", "-c", `echo $$ > "$0"; exec sleep 600`, fifo)
		var e bytes.Buffer
		cmd.Stderr = &e
		require.NoError(t, cmd.Start())
		pids := make(chan []int, 1)
		go func() {
			var got []int
			sc := bufio.NewScanner(f)
			for len(got) < 3 && sc.Scan() {
				pid, err := strconv.Atoi(sc.Text())
				if err == nil {
					got = append(got, pid)
				}
			}
			pids <- got
		}()
		var ranks []int
		select {
		case ranks = <-pids:
		case <-ctx.Done():
			t.Fatalf("watchdog: the ranks never started\n%s", e.String())
		}
		require.NoError(t, cmd.Process.Signal(unix.SIGTERM))
		err = cmd.Wait()
		require.Error(t, err)
		assert.Equal(t, 143, cmd.ProcessState.ExitCode(), "stderr:\n%s", e.String())
		assertNoJobLeft(t, cmd.Process.Pid)
		for _, pid := range ranks {
			assert.False(t, processRuns(pid), "rank process %d still runs after the script was stopped", pid)
		}
	})
}

// processRuns reports whether process pid exists and is not a zombie.
func processRuns(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || !strings.HasPrefix(s[i+1:], " Z")
}

// TestMultihostDeadFirstAddress: the coordinator's name has one or two
// addresses of hosts whose firewall drops every packet (no refusal, no
// ICMP) before its own. The workers reach it after a short attempt at
// each dead one (tcp's addrTimeout, 2 s), and their control sessions go
// straight to the address that answered: every rank is done within
// seconds. Before, Go's dialer gave each address an equal share of the
// 30 s connect timeout, and the control session, dialing the name again,
// a share of its 10 s handshake timeout (20 s in all for one dead
// address; a per-attempt bound of 3 s shared that way left no time for a
// third address).
func TestMultihostDeadFirstAddress(t *testing.T) {
	skipUnlessNetns(t, true)
	const size = 3
	for _, dead := range []int{1, 2} {
		t.Run(strconv.Itoa(dead)+"-dead", func(t *testing.T) {
			names := hostNames(size + dead)
			var addrs []string
			for i := size; i < size+dead; i++ {
				names[i] = "" // a dead host
			}
			n := newHosts(t, size+dead, netns.Options{Names: names})
			for i := size; i < size+dead; i++ {
				require.NoError(t, n.Block(i))
				addrs = append(addrs, n.Addr(i))
			}
			require.NoError(t, n.AddName("coord", append(addrs, n.Addr(0))...))
			ctx := chaosWatchdog(t)
			start := time.Now()
			procs := startChaosCmds(t, repeat("slow", size), func(r int) *exec.Cmd {
				cmd := n.SelfCommand(r)
				cmd.Env = hostEnv("coord", "COBRE_TCP_CONNECT_TIMEOUT_MS=30000", "COBRE_TCP_LIVENESS_SECS=10")
				return cmd
			}, envSlowIters+"=1")
			for _, p := range procs {
				l := p.await(t, ctx, "DONE ")
				took := l.at.Sub(start)
				t.Logf("rank %d done %.0f ms after the start (control session up, one barrier, Close)", p.rank, ms(took))
				assert.Less(t, took, time.Duration(dead)*2*time.Second+6*time.Second, "rank %d: the dead addresses held it up", p.rank)
				assert.Equal(t, 0, p.wait(t, ctx), "rank %d exit: %v\n%s", p.rank, p.state, p.dump())
			}
		})
	}
}
