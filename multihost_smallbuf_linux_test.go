//go:build linux

package starcomm_test

import (
	"context"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm/internal/netns"
)

// smallBuffer is the common default of net.core.wmem_max and rmem_max,
// 208 KiB: on such a host the kernel caps the 4 MiB socket buffers
// starcomm asks for at this (and doubles it for its own bookkeeping, as it
// does any request).
const smallBuffer = 212992

// socketBufRE finds the receive and send buffer sizes in ss -tm's skmem.
var socketBufRE = regexp.MustCompile(`rb(\d+),t\d+,tb(\d+)`)

// TestMultihostSmallSocketBuffers: 4 hosts, every rank's sockets at 208
// KiB (COBRE_TCP_BUFFER_BYTES=212992, as on a host whose net.core.wmem_max
// and rmem_max are 208 KiB, which this kernel does not let a network
// namespace lower; checked with ss on rank 1's host), a loop of relayed
// allgathervs of 1 MiB per rank, each followed by a small allreduce, T =
// 2 s, rank 1's link capped at 2 Mbit/s from the start. No rank may fail,
// and the first iteration, all of it under the cap (about 22 s), must end
// on every rank, every result checked. Rank 0's write of the others' 3
// MiB to rank 1 takes about 12 s and passes its deadline every timeout
// while rank 1's host acknowledges it, its window open: with the rule that
// lets such a write go on (link.slowWrite) taken out, rank 0 named rank 1
// at a write's deadline 6.4 s into the first allgatherv. Rank 1's upload
// ends before that write here; the other rule, a write that goes on while
// the peer's own data still arrives against a closed window, is star's
// TestSlowUploadWhileRelayedTCP.
func TestMultihostSmallSocketBuffers(t *testing.T) {
	skipUnlessNetns(t, false)
	if _, err := exec.LookPath("ss"); err != nil {
		t.Skip("no ss command (iproute2) to check the socket buffers with")
	}
	const size, slow = 4, 1
	n := newHosts(t, size, netns.Options{Names: hostNames(size)})
	require.NoError(t, n.Limit(slow, "2mbit"), "cap host %d", slow)
	capped := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	procs := startChaosCmds(t, repeat(modeGather1MiBReduce, size), func(r int) *exec.Cmd {
		cmd := n.SelfCommand(r)
		cmd.Env = hostEnv("node0", "COBRE_TCP_LIVENESS_SECS=10", "COBRE_TCP_BUFFER_BYTES="+strconv.Itoa(smallBuffer))
		return cmd
	}, "COBRE_TCP_TIMEOUT_SECS=2", envChaosIters+"=1")
	for i, p := range procs {
		l := p.await(t, ctx, "")
		for !strings.HasPrefix(l.text, "ITER ") {
			if strings.HasPrefix(l.text, "RESULT ") {
				res := parseResult(t, l)
				t.Fatalf("rank %d failed with %d-byte socket buffers, naming rank %s: %s\n%s", p.rank, smallBuffer, res.fields["rank"], res.msg, p.dump())
			}
			l = p.await(t, ctx, "")
		}
		t.Logf("rank %d: %s (%.1f s after the cap)", p.rank, l.text, l.at.Sub(capped).Seconds())
		if i > 0 {
			continue
		}
		// While the job runs on: every socket of rank 1's to rank 0 (its
		// data link and its control session) has the buffers asked for,
		// doubled by the kernel.
		out, err := n.Command(slow, "ss", "-tmH", "dport = :"+strconv.Itoa(multihostPort)).Output()
		require.NoError(t, err, "ss on host %d", slow)
		bufs := socketBufRE.FindAllStringSubmatch(string(out), -1)
		require.Len(t, bufs, 2, "rank 1's sockets to port %d (the data link and the control session) in ss -tm:\n%s", multihostPort, out)
		for _, m := range bufs {
			require.Equal(t, []string{strconv.Itoa(2 * smallBuffer), strconv.Itoa(2 * smallBuffer)}, m[1:], "rank 1's socket buffers (receive, send):\n%s", out)
		}
	}
}
