package star

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestBusyEdgeBeginCountsEndWord: as a collective begins, rank 0 wakes
// busyMonitor to tell the workers it is busy when it told them so within
// a timeout (the monitor's words) or within a worker's timeout of the word
// it sent as the collective before ended. With T = 2 s, a rank 0 that
// computed 1.8 s between two collectives under a slow link, the monitor's
// last word 0.5 s before the end: the workers heard the end's word 1.9 s
// ago and their deadlines run to 2.625 s after it, so the beginning must
// tell them. Counting only the monitor's words (2.3 s ago) it stayed
// silent and the monitor spoke first 0.5 to 1 s into the collective, after
// the workers' deadlines: TestMultihostSlowLinkRootComputes failed so in
// CI, ranks naming rank 0.
func TestBusyEdgeBeginCountsEndWord(t *testing.T) {
	const T = 2 * time.Second
	ago := func(d time.Duration) int64 { return monoNow() - int64(d) }
	for _, tc := range []struct {
		name          string
		monitor, edge time.Duration // how long ago; 0: never
		kicks         bool
	}{
		{"monitor 1.5s ago", 1500 * time.Millisecond, 0, true},
		{"monitor 2.3s ago, end 1.9s ago", 2300 * time.Millisecond, 1900 * time.Millisecond, true},
		{"monitor 2.3s ago, end 2.4s ago", 2300 * time.Millisecond, 2400 * time.Millisecond, true},
		{"monitor 2.3s ago, end 2.6s ago", 2300 * time.Millisecond, 2600 * time.Millisecond, false},
		{"monitor 2.1s ago, no end word", 2100 * time.Millisecond, 0, false},
		{"no word", 0, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			co := &coordinator{c: &Comm{cfg: Config{Timeout: T}}, movedPast: make(chan struct{}, 1)}
			if tc.monitor != 0 {
				co.lastWord.Store(ago(tc.monitor))
			}
			if tc.edge != 0 {
				co.edgeWord.Store(ago(tc.edge))
			}
			co.busyEdge(7, true)
			assert.Equal(t, tc.kicks, len(co.movedPast) == 1, "begin woke busyMonitor")
		})
	}
}

// TestBusyEdgeEndWord: as a collective ends, rank 0 tells the workers it
// is busy (and records the word for the next beginning) only when the
// monitor spoke within a timeout; the end's word does not count as the
// monitor's, so it starts no run of its own.
func TestBusyEdgeEndWord(t *testing.T) {
	const T = 2 * time.Second
	for _, tc := range []struct {
		name    string
		monitor time.Duration // how long ago; 0: never
		tells   bool
	}{
		{"monitor 0.4s ago", 400 * time.Millisecond, true},
		{"monitor 1.9s ago", 1900 * time.Millisecond, true},
		{"monitor 2.1s ago", 2100 * time.Millisecond, false},
		{"never", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			co := &coordinator{c: &Comm{cfg: Config{Timeout: T}}, movedPast: make(chan struct{}, 1)}
			var last int64
			if tc.monitor != 0 {
				last = monoNow() - int64(tc.monitor)
				co.lastWord.Store(last)
			}
			co.busyEdge(7, false)
			assert.Equal(t, tc.tells, co.edgeWord.Load() != 0, "the end's word recorded")
			assert.Equal(t, last, co.lastWord.Load(), "the monitor's last word unchanged")
			assert.Zero(t, len(co.movedPast), "the end does not wake busyMonitor")
		})
	}
}
