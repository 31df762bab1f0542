package star

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestAway: the away detector of a rank whose heartbeat tickers fire every
// tenth of the 2 s liveness timeout. Regular ticks: not away. No tick for
// more than half the liveness timeout: away now, for that long. A gap that
// long between two ticks: away, for the gap, until twice the liveness
// timeout plus the collective timeout after it ended. Without control
// sessions (no tick ever, or liveness off): never.
func TestAway(t *testing.T) {
	c := &Comm{cfg: Config{Liveness: 2 * time.Second, Timeout: 10 * time.Second}}
	t0 := time.Unix(1_000_000, 0)
	_, away := c.away(t0)
	assert.False(t, away, "no tick yet: no control session")
	for i := range 5 {
		c.ticked(t0.Add(time.Duration(i)*200*time.Millisecond), c.cfg.Liveness)
	}
	last := t0.Add(800 * time.Millisecond)
	_, away = c.away(last.Add(300 * time.Millisecond))
	assert.False(t, away, "ticking")
	d, away := c.away(last.Add(1500 * time.Millisecond))
	assert.True(t, away, "no tick for 1.5 s: the process is only now running again")
	assert.Equal(t, 1500*time.Millisecond, d)
	back := last.Add(3 * time.Second)
	c.ticked(back, c.cfg.Liveness)
	d, away = c.away(back.Add(time.Millisecond))
	assert.True(t, away, "a 3 s gap between ticks just ended")
	assert.Equal(t, 3*time.Second, d)
	for i := 1; i <= 70; i++ {
		c.ticked(back.Add(time.Duration(i)*200*time.Millisecond), c.cfg.Liveness)
	}
	_, away = c.away(back.Add(13*time.Second + time.Millisecond))
	assert.True(t, away, "within 2×liveness + timeout (14 s) of the gap's end")
	_, away = c.away(back.Add(14*time.Second + time.Millisecond))
	assert.False(t, away, "long after the gap")

	off := &Comm{cfg: Config{Liveness: 0, Timeout: 10 * time.Second}}
	_, away = off.away(t0.Add(time.Hour))
	assert.False(t, away, "liveness off")
}
