package star_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/starcomm/starcomm/testkit"
	"github.com/starcomm/starcomm/transport/faulty"
)

// TestReviewStaleRfixShortens: as TestReviewStaleRfixRelay, but rank 1's
// barrier frame is not there yet when rank 0 arrives (rank 0 computes
// 0.7 T, rank 1 1.3 T): rank 1 comes 0.6 T after rank 0, which waits for
// it a timeout from its arrival without the slow allgatherv before
// (case fast), but only a timeout from the allgatherv's end after it
// (case slow: the stale rfix fires at once, and moving's new one counts
// from the link's last movement).
func TestReviewStaleRfixShortens(t *testing.T) {
	const timeout = 10 * time.Second
	const n = 192 << 10
	pause := []time.Duration{7 * timeout / 10, 13 * timeout / 10, 0, 0}
	for _, slowLink := range []bool{false, true} {
		name := "fast"
		if slowLink {
			name = "slow"
		}
		t.Run(name, func(t *testing.T) {
			testkit.SyncTest(t, func(t *testing.T) {
				var faults []faulty.Fault
				if slowLink {
					faults = append(faults, faulty.Fault{Kind: faulty.Delay, Rank: 1, Link: 0, Dir: faulty.Write, Frame: 1, Offset: 1 << 19, Delay: 3 * timeout / 2, Acked: true})
				}
				errs, _ := relayThenBarriers(t, timeout, 8<<20, n, pause, 1, faults...)
				for r, err := range errs {
					assert.NoError(t, err, "rank %d", r)
				}
			})
		})
	}
}
