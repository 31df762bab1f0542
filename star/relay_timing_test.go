// Timing of the relayed allgatherv and of the header phase that it shares
// with the streamed allreduce, on the fake clock.

package star_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/star"
	"github.com/starcomm/starcomm/testkit"
	"github.com/starcomm/starcomm/transport/faulty"
)

// equalAllgatherv runs an allgatherv of n float64 per rank.
func equalAllgatherv(c comm.Communicator, n int) error {
	size := c.Size()
	counts, displs := make([]int, size), make([]int, size)
	for r := range size {
		counts[r], displs[r] = n, r*n
	}
	return comm.Allgatherv(context.Background(), c, make([]float64, n), make([]float64, size*n), counts, displs)
}

// TestRelayHangAfterDelayNamesHungRank: rank 1's region (1 MiB) stops for
// a while in its middle, then its data link hangs, over unbuffered pipes
// on the fake clock. Every other rank must fail naming rank 1, whether
// the allgatherv is stored and forwarded (no control sessions) or relayed.
// A worker reads its reply over such a transport (one without a low-water
// mark: pipes, TLS) a chunk of up to 4 MiB under one deadline, a timeout
// and its reply margin after it began; the relay's reader gave rank 1 a
// fresh timeout after every read, so a stop longer than the margin let
// every worker's deadline pass first: each named rank 0, and told rank 0
// so on its control session, and every rank named rank 0.
func TestRelayHangAfterDelayNamesHungRank(t *testing.T) {
	const timeout = 10 * time.Second
	const n = 128 << 10 // 1 MiB per rank
	for _, delay := range []time.Duration{400 * time.Millisecond, 700 * time.Millisecond, 2 * time.Second} {
		for _, relay := range []bool{false, true} {
			t.Run(fmt.Sprintf("delay=%v/relay=%v", delay, relay), func(t *testing.T) {
				testkit.SyncTest(t, func(t *testing.T) {
					s := faulty.NewScript(
						faulty.Fault{Kind: faulty.Delay, Rank: 1, Link: 0, Dir: faulty.Write, Frame: 1, Offset: 300 << 10, Delay: delay},
						faulty.Fault{Kind: faulty.Hang, Rank: 1, Link: 0, Dir: faulty.Write, Frame: 1, Offset: 400 << 10},
					)
					live := time.Duration(-1) // no control sessions: stored and forwarded
					if relay {
						live = 100 * time.Second
					}
					var relays int
					defer star.SetTestHook(func(_ int, point string) {
						if point == star.HookRelay {
							relays++
						}
					})()
					comms := startFaulty(t, 4, 0, timeout, live, s)
					defer testkit.CloseAll(comms)
					sessionsUp(t) // every control session up
					errs := testkit.RunRanks(comms, func(c comm.Communicator) error { return equalAllgatherv(c, n) })
					assert.Equal(t, 2, s.Fired(), "the delay and the hang")
					if relay {
						assert.Equal(t, 1, relays, "relayed")
					} else {
						assert.Zero(t, relays, "stored and forwarded")
					}
					for r, err := range errs {
						if r != 1 {
							collectiveFailed(t, err, 1)
						}
					}
				})
			})
		}
	}
}

// TestHeadersTimeoutSaysWhatItWaitedFor: as TestTimeoutSaysWhatItWaitedFor
// for a relayed allgatherv and a streamed allreduce, which take every
// worker's frame only once every header is in: the ranks whose header is
// in have arrived, and only the late one is waited for. (The stall report
// and the timeout's error named every worker, "(0 arrived)".)
func TestHeadersTimeoutSaysWhatItWaitedFor(t *testing.T) {
	for _, op := range []string{"allgatherv", "allreduce"} {
		t.Run(op, func(t *testing.T) {
			defer star.SetStream(1, 4096)()
			testkit.SyncTest(t, func(t *testing.T) {
				comms := withControl(t, 4, time.Minute, 10*time.Second, nil, nil)
				defer testkit.CloseAll(comms)
				sessionsUp(t) // every control session up
				errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
					if c.Rank() == 3 {
						time.Sleep(2 * time.Minute) // computing longer than the timeout
					}
					if op == "allreduce" {
						return comm.Allreduce(context.Background(), c, make([]float64, 1024), make([]float64, 1024), comm.Sum)
					}
					return equalAllgatherv(c, 64<<10) // 2 MiB in all: relayed
				})
				cf := collectiveFailed(t, errs[0], 3)
				assert.Regexp(t, op+` #1 waited 1m0\.\d+s for ranks \[3\] \(0,1,2 arrived\); rank 3 alive, has finished no collective`, cf.Error())
			})
		})
	}
}
