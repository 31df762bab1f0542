//go:build linux

package starcomm_test

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm/internal/netns"
)

// slowStopJob runs TestMultihostSlowRankRunAhead's loop (relayed 4 MiB
// allgatherv, small allreduce, T = 2 s, liveness 10 s) on 4 hosts, caps
// rank 1's link at 20 Mbit/s once every rank is READY, and returns once
// rank 1 has ended an iteration under the cap, with the time it did.
func slowStopJob(t *testing.T, ctx context.Context) (*netns.Net, []*chaosProc, time.Time) {
	t.Helper()
	skipUnlessNetns(t, false)
	if strings.HasPrefix(runtime.GOARCH, "mips") {
		t.Skipf("SIGSTOP is signal %d only on Linux (not MIPS); this is %s", int(sigStop), runtime.GOARCH)
	}
	const size, slow = 4, 1
	n := newHosts(t, size, netns.Options{Names: hostNames(size)})
	procs := startChaosCmds(t, repeat(modeGatherReduce, size), func(r int) *exec.Cmd {
		cmd := n.SelfCommand(r)
		cmd.Env = hostEnv("node0", "COBRE_TCP_LIVENESS_SECS=10")
		return cmd
	}, "COBRE_TCP_TIMEOUT_SECS=2", envChaosReady+"=2", envChaosIters+"=1")
	for _, p := range procs {
		p.await(t, ctx, "READY ")
	}
	require.NoError(t, n.Limit(slow, "20mbit"), "cap host %d", slow)
	capped := time.Now()
	l := procs[slow].await(t, ctx, "ITER ")
	for ; !l.at.After(capped); l = procs[slow].await(t, ctx, "ITER ") {
	}
	return n, procs, l.at
}

// bytesReceivedRE finds tcpi_bytes_received in ss -ti's output.
var bytesReceivedRE = regexp.MustCompile(`bytes_received:(\d+)`)

// watchArrivals polls, every 20 ms until stop is closed, the TCP sockets
// of host i to port multihostPort (ss -tin) and returns a function that
// tells when the largest count of bytes received among them last grew:
// when the data link to rank 0 last carried bytes to host i.
func watchArrivals(t *testing.T, n *netns.Net, i int, stop <-chan struct{}) func() time.Time {
	t.Helper()
	if _, err := exec.LookPath("ss"); err != nil {
		t.Skip("no ss command (iproute2) to watch the link with")
	}
	var (
		mu   sync.Mutex
		last time.Time
		most uint64
	)
	done := make(chan struct{})
	t.Cleanup(func() { <-done })
	go func() {
		defer close(done)
		for {
			out, err := n.Command(i, "ss", "-tinH", "dport = :"+strconv.Itoa(multihostPort)).Output()
			now := time.Now()
			if err == nil {
				var got uint64
				for _, m := range bytesReceivedRE.FindAllStringSubmatch(string(out), -1) {
					v, _ := strconv.ParseUint(m[1], 10, 64)
					got = max(got, v)
				}
				mu.Lock()
				if got > most {
					most, last = got, now
				}
				mu.Unlock()
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return last
	}
}

// TestMultihostSlowLinkRootStopped: rank 0 is stopped (SIGSTOP) a
// second into an iteration of TestMultihostSlowRankRunAhead's loop, rank
// 1's link capped at 20 Mbit/s, while it sends rank 1 the allgatherv's
// 16 MiB result (6.7 s under the cap). Every worker must fail naming rank
// 0: ranks 2 and 3, which wait for it in the allreduce and hear no more of
// its busy word, within a worker's timeout (T + min(T/2, 500 ms)) and its
// slack after the stop; rank 1, whose host still receives what rank 0's
// socket buffers held for seconds after the stop, within the same after
// its link last carried a byte (the README: "a hung coordinator is
// detected by every worker within timeout + 750 ms, on a slow link plus
// the time the link takes to carry what the socket buffers still held").
//
// The first build that let calls go on while the link moved failed it 3
// of 3 runs, each rank late by about a worker's timeout, by two paths,
// each now closed (with either path open again it fails 2 of 2):
//   - rank 1, 4.8 to 5.0 s after its last byte: the read deadline that
//     link.moving set a timeout after the last byte passed with the
//     frame's last bytes, below the read's low-water mark, unread;
//     readFull read them, took that for progress and armed a fresh
//     timeout (readFull now keeps moving's deadline until the read ends);
//   - ranks 2 and 3, in the relayed allgatherv, 5.0 to 5.2 s after the stop
//     (5 of 6): busyExtend moves the conn's read deadline but not l.rdl,
//     so when the moved deadline passed, lateAt saw l.rdl long gone
//     ("noticed 300 ms late": this process was away) and, with bytes
//     unread, gave rank 0 a fresh timeout (lateAt now counts from the
//     moved deadline).
//
// (Stopped between collectives instead, ranks 2 and 3 fail 2.1 to 2.5 s
// after the stop.)
func TestMultihostSlowLinkRootStopped(t *testing.T) {
	const slow = 1
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	n, procs, iterEnd := slowStopJob(t, ctx)
	stopWatch := make(chan struct{})
	defer close(stopWatch)
	lastByte := watchArrivals(t, n, slow, stopWatch)
	time.Sleep(time.Until(iterEnd.Add(time.Second)))
	stopped := procs[0].signal(t, sigStop)
	// A worker's timeout with its slack twice (arm re-arms once a slack has
	// passed), and 500 ms for a loaded machine.
	bound := 2500*time.Millisecond + 2*125*time.Millisecond + 500*time.Millisecond
	for _, p := range procs[1:] {
		res := parseResult(t, p.await(t, ctx, "RESULT "))
		detect := res.at.Sub(stopped)
		from := stopped
		if p.rank == slow {
			from = lastByte()
			t.Logf("rank %d's link last carried a byte %.0f ms after the stop", p.rank, ms(from.Sub(stopped)))
		}
		t.Logf("rank %d: failed %.0f ms after the stop, %.0f ms after %s, naming %s: %s", p.rank, ms(detect),
			ms(res.at.Sub(from)), map[bool]string{true: "its last byte", false: "the stop"}[p.rank == slow], res.fields["rank"], res.msg)
		assertFailedNaming(t, p, res, 0)
		assert.LessOrEqual(t, res.at.Sub(from), bound, "rank %d detected the stopped rank 0 late", p.rank)
	}
}

// TestMultihostSlowLinkThirdStopped: rank 3, uncapped, is stopped while
// rank 1's link is capped at 20 Mbit/s and rank 0 still serves rank 1
// (TestMultihostSlowRankRunAhead's loop, one or four seconds after an
// iteration of rank 1 ended): the slow link must not take the blame, nor
// rank 0 while it tells the others it is busy. Every other rank fails
// naming rank 3, not before a timeout after the stop and within rank 0's
// time in the collective before (at most the 6.7 s that rank 1's result
// takes under the cap), a timeout, the time the uncapped rank 3's socket
// buffers take to fill, and 1.5 s. Measured: 3.3 to 3.4 s after a stop at
// 1 s, 5.2 to 5.6 s after one at 4 s (rank 1 up to 6.6 s: it reads the
// rest of its result before the Abort that follows it).
func TestMultihostSlowLinkThirdStopped(t *testing.T) {
	const victim, timeout = 3, 2 * time.Second
	for _, d := range []time.Duration{time.Second, 4 * time.Second} {
		t.Run(fmt.Sprintf("stop-after=%s", d), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			_, procs, iterEnd := slowStopJob(t, ctx)
			time.Sleep(time.Until(iterEnd.Add(d)))
			stopped := procs[victim].signal(t, sigStop)
			for _, p := range procs[:victim] {
				res := parseResult(t, p.await(t, ctx, "RESULT "))
				detect := res.at.Sub(stopped)
				t.Logf("rank %d: failed %.0f ms after the stop, naming %s: %s", p.rank, ms(detect), res.fields["rank"], res.msg)
				assertFailedNaming(t, p, res, victim)
				assert.GreaterOrEqual(t, detect, timeout*3/4, "rank %d failed before the timeout", p.rank)
				assert.LessOrEqual(t, detect, 6700*time.Millisecond+timeout+1500*time.Millisecond, "rank %d detected the stopped rank late", p.rank)
			}
		})
	}
}

// TestMultihostSlowLinkRootComputes: TestMultihostSlowRankRunAhead's loop
// (T = 2 s, rank 1's link capped at 20 Mbit/s), with rank 0 computing 0.9
// T before each collective: less than a timeout between collectives, so
// no rank may fail (README: "A rank that computes for less than the
// timeout between collectives is never failed"), and two iterations must
// end under the cap on every rank.
//
// The build that sent kind 6 to every worker whenever a collective lasted
// busyEvery failed it 6 of 6 runs, every rank naming rank 0 (2 of 2
// passed with 0.7 T): ranks 2 and 3, in the allreduce, heard rank 0's
// last busy word of the allgatherv up to busyEvery (T/4) before rank 0
// ended it, then nothing while rank 0 computed, and nothing in the
// allreduce's first busyEvery, while rank 0 waited for rank 1 still
// reading its result: up to compute + 2·busyEvery (2.8 s) of silence
// against a worker's 2.5 s timeout and its slack. Rank 0 now also tells
// every worker as a collective ends and as the next begins, during a run
// of busy words (coordinator.busyEdge): 3 of 3 runs pass; without those
// words it failed 1 of 4.
//
// CI still failed it once (rank 3 naming rank 0 in iteration 3): the word
// as the next collective begins was sent only when the monitor's last word
// was within a timeout, and in the three runs measured after, it was 2.02
// to 2.07 s old by then (the word at the end, which the workers' deadlines
// count from, 1.80 s): the monitor then spoke first 0.5 to 1 s into the
// collective, past the workers' deadlines when late in its tick. The
// beginning now also counts the end's word, within a worker's timeout
// (TestBusyEdgeBeginCountsEndWord).
func TestMultihostSlowLinkRootComputes(t *testing.T) {
	slowRankUnderCap(t, modeGatherReduce, 2, "20mbit", envChaosComputeMS+"=1800", envChaosComputeRank+"=0")
}
