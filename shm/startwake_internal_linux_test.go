package shm

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStartupFailureWakesAWaitingRank: a failure another rank raises just
// as this one is about to sleep, waiting for the others to join, ends the
// sleep at once. (A failure used to wake the futex word without changing
// it: a rank between its look at the abort word and its sleep slept on,
// startupLookEvery of the size, 16 s at shm.MaxSize ranks.)
func TestStartupFailureWakesAWaitingRank(t *testing.T) {
	const size = MaxSize
	name := "wake-" + time.Now().Format("150405.000000")
	mk := func(r int) *Comm {
		cfg := CommConfig{Name: name, Rank: r, Size: size, ConnectTimeout: time.Minute, ChunkBytes: 4096}.withDefaults()
		seg, err := join(context.Background(), cfg, time.Now().Add(cfg.ConnectTimeout))
		require.NoError(t, err)
		return &Comm{cfg: cfg, rank: r, size: size, chunk: cfg.ChunkBytes, seg: seg, closeDone: make(chan struct{})}
	}
	c0, c1 := mk(0), mk(1)
	defer func() {
		for _, c := range []*Comm{c0, c1} {
			c.seg.leave()
			c.seg.unmap()
		}
	}()
	var raised atomic.Bool
	sleepHook = func() {
		if raised.CompareAndSwap(false, true) {
			c1.raise(opStartup, 1, causeCanceled, "rank 1 gave up")
		}
	}
	defer func() { sleepHook = nil }()
	begin := time.Now()
	blamed, err := c0.awaitStart(context.Background(), time.Now().Add(time.Minute))
	took := time.Since(begin)
	require.True(t, raised.Load(), "rank 0 never went to sleep")
	assert.Equal(t, 1, blamed)
	assert.True(t, errors.Is(err, context.Canceled), "rank 0's error: %v", err)
	assert.Less(t, took, startupLookEvery(size)/3, "rank 0 saw rank 1's failure after %v (it sleeps %v between looks)", took, startupLookEvery(size))
}
