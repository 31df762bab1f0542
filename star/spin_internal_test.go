package star

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestSpinAdapts: the spin of the next polled wait follows the last wait
// (Config.SpinMax): twice it, between Spin and SpinMax, after a wait of at
// most SpinMax, and Spin again after a longer one; it stays at Spin when
// SpinMax is not above Spin, and polling that is off stays off. Large
// frames are never polled for, whatever the spin, and one brings the spin
// back to Spin.
func TestSpinAdapts(t *testing.T) {
	const us = time.Microsecond
	type step struct{ wait, next time.Duration }
	cases := []struct {
		name          string
		spin, spinMax time.Duration
		steps         []step
	}{
		{"defaults", 100 * us, 1000 * us, []step{
			{30 * us, 100 * us},    // within the spin: 2w is below it
			{300 * us, 600 * us},   // parking cut it short: 2w
			{450 * us, 900 * us},   // 2w
			{800 * us, 1000 * us},  // 2w capped at SpinMax
			{1000 * us, 1000 * us}, // a wait of SpinMax still counts
			{1001 * us, 100 * us},  // longer: a peer computing, back to Spin
			{60 * us, 120 * us},    // 2w above Spin
			{10 * time.Second, 100 * us},
		}},
		{"fixed: SpinMax equal to Spin", 100 * us, 100 * us, []step{{300 * us, 100 * us}, {20 * us, 100 * us}}},
		{"fixed: SpinMax below Spin", 2000 * us, 1000 * us, []step{{300 * us, 2000 * us}, {5 * time.Second, 2000 * us}}},
		{"fixed: SpinMax negative", 100 * us, -1, []step{{300 * us, 100 * us}}},
		{"polling off", -1, 1000 * us, []step{{300 * us, -1}, {2 * time.Second, -1}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &Comm{cfg: Config{Spin: tc.spin, SpinMax: tc.spinMax}}
			assert.Equal(t, tc.spin, c.spin(0), "before any wait")
			for i, s := range tc.steps {
				c.waited(s.wait)
				assert.Equal(t, s.next, c.spin(0), "step %d: after a wait of %v", i, s.wait)
				assert.Equal(t, s.next, c.spin(pollMax), "step %d: the largest polled frame", i)
				assert.Zero(t, c.spin(pollMax+1), "step %d: a large frame is never polled for", i)
				assert.Equal(t, tc.spin, c.spin(0), "step %d: after a large frame, back to Spin", i)
				c.waited(s.wait)
				assert.Equal(t, s.next, c.spin(0), "step %d: the same wait again", i)
			}
		})
	}
}

// TestSpinDefaults: the spin starts at 100 µs and grows to at most 1 ms.
func TestSpinDefaults(t *testing.T) {
	c := Config{}.withDefaults()
	assert.Equal(t, 100*time.Microsecond, c.Spin)
	assert.Equal(t, time.Millisecond, c.SpinMax)
	assert.Equal(t, DefaultConfig().SpinMax, c.SpinMax)
}
