package star

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestAway: the away detector of a rank whose ticks come every tenth of
// the 2 s liveness timeout (at most every 100 ms: every 200 ms is what
// the test feeds it). Regular ticks: not away. No tick for more than
// eight tenths of the liveness timeout: away now, for that long. A gap
// that long between two ticks: away, for the gap, until two liveness
// timeouts after it ended; and away since any time before its end.
// Without control sessions (no tick ever, or liveness off): never.
func TestAway(t *testing.T) {
	t0 := time.Now()
	c := &Comm{cfg: Config{Liveness: 2 * time.Second, Timeout: time.Hour}, epoch: t0}
	_, away := c.away(t0)
	assert.False(t, away, "no tick yet: no control session")
	for i := range 5 {
		c.ticked(t0.Add(time.Duration(i) * 200 * time.Millisecond))
	}
	last := t0.Add(800 * time.Millisecond)
	_, away = c.away(last.Add(1500 * time.Millisecond))
	assert.False(t, away, "1.5 s without a tick: less than 1.6 s")
	assert.False(t, c.absentAcross(last.Add(100*time.Millisecond), last.Add(500*time.Millisecond), 0), "no tick for 500 ms: less than three missed")
	assert.True(t, c.absentAcross(last.Add(100*time.Millisecond), last.Add(700*time.Millisecond), 0), "no tick for 700 ms, across the deadline: the process is only now running again")
	assert.False(t, c.absentAcross(last.Add(100*time.Millisecond), last.Add(700*time.Millisecond), time.Second), "but for no longer than half the link's timeout")
	assert.False(t, c.absentAcross(last.Add(-time.Millisecond), last.Add(700*time.Millisecond), 0), "a deadline that passed before the last tick")
	d, away := c.away(last.Add(1700 * time.Millisecond))
	assert.True(t, away, "no tick for 1.7 s: the process is only now running again")
	assert.Equal(t, 1700*time.Millisecond, d)
	assert.True(t, c.awaySince(last, last.Add(1700*time.Millisecond)))

	back := last.Add(3 * time.Second)
	c.ticked(back)
	d, away = c.away(back.Add(time.Millisecond))
	assert.True(t, away, "a 3 s gap between ticks just ended")
	assert.Equal(t, 3*time.Second, d)
	assert.True(t, c.awaySince(last.Add(time.Second), back.Add(time.Millisecond)), "the gap ended after that")
	assert.False(t, c.awaySince(back.Add(time.Millisecond), back.Add(2*time.Millisecond)), "nothing since the gap's end")
	assert.True(t, c.absentAfter(last), "a data link's deadline set before the gap")
	assert.False(t, c.absentAfter(back.Add(time.Millisecond)), "a deadline set after it")
	assert.True(t, c.absentAcross(last.Add(time.Second), back.Add(time.Millisecond), time.Second), "a deadline that passed within the 3 s gap")
	assert.False(t, c.absentAcross(last.Add(-time.Millisecond), back.Add(time.Millisecond), time.Second), "a deadline that passed before the gap")
	assert.False(t, c.absentAcross(back.Add(time.Millisecond), back.Add(2*time.Millisecond), time.Second), "a deadline that passed after the gap")
	assert.False(t, c.absentAcross(last.Add(time.Second), back.Add(time.Millisecond), 3*time.Second), "a gap no longer than half the link's timeout")
	for i := 1; i <= 30; i++ {
		c.ticked(back.Add(time.Duration(i) * 200 * time.Millisecond))
	}
	_, away = c.away(back.Add(4*time.Second - time.Millisecond))
	assert.True(t, away, "within two liveness timeouts of the gap's end")
	_, away = c.away(back.Add(4*time.Second + time.Millisecond))
	assert.False(t, away, "two liveness timeouts after the gap, whatever the collective timeout")

	off := &Comm{cfg: Config{Liveness: 0, Timeout: 10 * time.Second}, epoch: t0}
	_, away = off.away(t0.Add(time.Hour))
	assert.False(t, away, "liveness off")
	assert.False(t, off.awaySince(t0, t0.Add(time.Hour)))
}
