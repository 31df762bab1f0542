package star_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/star"
	"github.com/starcomm/starcomm/testkit"
)

// relayLayout is an allgatherv layout: every rank's count and
// displacement, in float64 elements, and the size of recv.
type relayLayout struct {
	name           string
	counts, displs []int
	total          int
}

// relayLayouts returns layouts of size ranks whose results are 1 MiB or
// more: equal regions; uneven ones with rank 0's and one worker's empty;
// and regions placed in reverse rank order with gaps between them.
func relayLayouts(size int) []relayLayout {
	const per = 600_000 / 8 // 600 kB of float64 per rank
	var ls []relayLayout
	equal := relayLayout{name: "equal", counts: make([]int, size), displs: make([]int, size)}
	for r := range size {
		equal.counts[r], equal.displs[r] = per, r*per
	}
	equal.total = size * per
	uneven := relayLayout{name: "uneven-empty", counts: make([]int, size), displs: make([]int, size)}
	for r := range size {
		c := (r*7919)%5*per/2 + 1 // 1 element up to 2 regions' worth
		if r == 0 || r == size/2 {
			c = 0 // rank 0's region, and a worker's, empty
		}
		uneven.counts[r], uneven.displs[r] = c, uneven.total
		uneven.total += c
	}
	if uneven.total*8 < 1<<20 {
		uneven.counts[size-1] += 1 << 17
		uneven.total += 1 << 17
	}
	gaps := relayLayout{name: "reversed-gaps", counts: make([]int, size), displs: make([]int, size)}
	for r := size - 1; r >= 0; r-- {
		gaps.total += 13 // a gap before every region
		gaps.counts[r], gaps.displs[r] = per+r, gaps.total
		gaps.total += per + r
	}
	return append(ls, equal, uneven, gaps)
}

// relayValue is rank r's i-th element.
func relayValue(r, i int) float64 { return float64(r)*1e7 + float64(i) }

// TestRelayedAllgatherv: allgathervs of 1 MiB or more, relayed by the
// coordinator (each worker's region forwarded to the others while it
// arrives), give every rank the right bytes in the right places and leave
// the gaps between regions as they were, at 2, 4 and 8 ranks, twice in a
// row on the same communicators; and the coordinator did relay them.
func TestRelayedAllgatherv(t *testing.T) {
	var relays atomic.Int64
	defer star.SetTestHook(func(_ int, point string) {
		if point == star.HookRelay {
			relays.Add(1)
		}
	})()
	for _, size := range []int{2, 4, 8} {
		for _, lay := range relayLayouts(size) {
			t.Run(fmt.Sprintf("ranks=%d/layout=%s", size, lay.name), func(t *testing.T) {
				require.GreaterOrEqual(t, lay.total*8, 1<<20, "the layout must be relayed")
				testkit.SyncTest(t, func(t *testing.T) {
					comms := inBubble(t, size, withTimeout(time.Minute))
					defer testkit.CloseAll(comms)
					sessionsUp(t) // every control session up
					before := relays.Load()
					for round := range 2 {
						recvs := make([][]float64, size)
						errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
							r := c.Rank()
							send := make([]float64, lay.counts[r])
							for i := range send {
								send[i] = relayValue(r, i) + float64(round)
							}
							recv := make([]float64, lay.total)
							for i := range recv {
								recv[i] = -1 // the gaps must keep it
							}
							recvs[r] = recv
							return comm.Allgatherv(context.Background(), c, send, recv, lay.counts, lay.displs)
						})
						require.NoError(t, errors.Join(errs...))
						want := make([]float64, lay.total)
						for i := range want {
							want[i] = -1
						}
						for r := range size {
							for i := range lay.counts[r] {
								want[lay.displs[r]+i] = relayValue(r, i) + float64(round)
							}
						}
						for r, got := range recvs {
							if !assert.Equal(t, want, got, "rank %d, round %d", r, round) {
								return
							}
						}
					}
					assert.Equal(t, int64(2), relays.Load()-before, "relayed allgathervs")
				})
			})
		}
	}
}

// TestRelayedLengthMismatch: in a relayed allgatherv, a worker whose
// region is not the size the coordinator expects is refused from its
// header, before any AllgathervRecv starts: rank 0 fails with
// InvalidBufferSizeError, every other rank with an error naming a rank in
// the mismatch (through rank 0's Abort, on the data links at a frame
// boundary), none with a frame cut short; and the relay was begun.
func TestRelayedLengthMismatch(t *testing.T) {
	var relays atomic.Int64
	defer star.SetTestHook(func(_ int, point string) {
		if point == star.HookRelay {
			relays.Add(1)
		}
	})()
	testkit.SyncTest(t, func(t *testing.T) {
		const size, liar, per = 4, 2, 50_000
		comms := inBubble(t, size, withTimeout(time.Minute))
		defer testkit.CloseAll(comms)
		sessionsUp(t) // relayed only when every worker has its session
		errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
			counts := []int{per, per, per, per}
			if c.Rank() == liar {
				counts[liar]++ // it sends one element more than the others expect
			}
			displs := []int{0, counts[0], counts[0] + counts[1], counts[0] + counts[1] + counts[2]}
			return comm.Allgatherv(context.Background(), c, make([]float64, counts[c.Rank()]), make([]float64, displs[3]+counts[3]), counts, displs)
		})
		var ibs *comm.InvalidBufferSizeError
		require.ErrorAs(t, errs[0], &ibs)
		assert.Contains(t, ibs.Error(), fmt.Sprintf("rank %d", liar))
		for r := 1; r < size; r++ {
			require.Error(t, errs[r], "rank %d", r)
			assert.NotContains(t, errs[r].Error(), "middle of a frame", "rank %d", r)
			var ab *star.AbortError
			if r != liar {
				assert.ErrorAs(t, errs[r], &ab, "rank %d learns it from rank 0's Abort", r)
			}
		}
		assert.Equal(t, int64(1), relays.Load())
	})
}
