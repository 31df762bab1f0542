package star_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/star"
	"github.com/starcomm/starcomm/testkit"
)

// TestHugeTimeouts: durations that Validate accepts, up to the largest
// time.Duration (what a program writes for "no timeout"), start the
// communicator and run collectives between healthy ranks; before they
// were clamped, Timeout + its margin overflowed (a barrier hung, or failed
// at once "no progress within the 2562047h47m16s timeout") and so did
// ConnectTimeout + its margin (a worker failed start-up at once, "sent
// neither Ack nor Abort within -2562047h47m16s").
func TestHugeTimeouts(t *testing.T) {
	huge := time.Duration(math.MaxInt64)
	for _, tc := range []struct {
		name  string
		tweak func(*star.Config)
	}{
		{"Timeout=max", func(c *star.Config) { c.Timeout = huge }},
		{"Timeout=max-200ms", func(c *star.Config) { c.Timeout = huge - 200*time.Millisecond }},
		{"Timeout=max-600ms", func(c *star.Config) { c.Timeout = huge - 600*time.Millisecond }},
		{"ConnectTimeout=max", func(c *star.Config) { c.ConnectTimeout = huge }},
		{"Liveness=max", func(c *star.Config) { c.Liveness = huge }},
		{"all=max", func(c *star.Config) {
			c.Timeout, c.ConnectTimeout, c.HandshakeTimeout, c.ShutdownTimeout, c.Liveness, c.StallReport = huge, huge, huge, huge, huge, huge
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			comms, err := testkit.StartStar(ctx, testkit.NewTCPNetwork(), 3, tc.tweak)
			if err != nil {
				t.Fatalf("start-up: %v", err)
			}
			errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
				if err := c.Barrier(ctx); err != nil {
					return err
				}
				send, recv := []float64{1}, []float64{0}
				if err := comm.Allreduce(ctx, c, send, recv, comm.Sum); err != nil {
					return err
				}
				if recv[0] != 3 {
					t.Errorf("rank %d: allreduce gave %v, want 3", c.Rank(), recv[0])
				}
				return nil
			})
			for r, err := range errs {
				if err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
			}
			if err := testkit.CloseAll(comms); err != nil {
				t.Errorf("close: %v", err)
			}
		})
	}
}
