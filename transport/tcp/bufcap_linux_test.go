package tcp

import (
	"fmt"
	"syscall"
	"testing"
)

// withCaps makes systemBufferCaps report recv and send until the test ends.
func withCaps(t *testing.T, recv, send int) {
	t.Helper()
	old := systemBufferCaps
	systemBufferCaps = func() (int, int) { return recv, send }
	t.Cleanup(func() { systemBufferCaps = old })
}

// TestBufferSizesUnderCaps: a side whose system cap is below the size asked
// for is left to the system's autotuning (0); a cap at or above it, or an
// unknown one (0), sets it.
func TestBufferSizesUnderCaps(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		n, rmax, wmax, recv, send int
	}{
		{4 * mib, 4 * mib, 4 * mib, 4 * mib, 4 * mib},
		{4 * mib, 212992, 212992, 0, 0},
		{4 * mib, 8 * mib, 212992, 4 * mib, 0},
		{4 * mib, 212992, 8 * mib, 0, 4 * mib},
		{212992, 212992, 212992, 212992, 212992},
		{4 * mib, 0, 0, 4 * mib, 4 * mib},
		{0, 212992, 212992, 0, 0},
		{0, 8 * mib, 8 * mib, 0, 0},
	} {
		t.Run(fmt.Sprintf("n=%d,rmem_max=%d,wmem_max=%d", tc.n, tc.rmax, tc.wmax), func(t *testing.T) {
			withCaps(t, tc.rmax, tc.wmax)
			recv, send := bufferSizes(tc.n)
			if recv != tc.recv || send != tc.send {
				t.Errorf("bufferSizes(%d) = %d, %d; want %d, %d", tc.n, recv, send, tc.recv, tc.send)
			}
		})
	}
}

// TestBufferSizesOnSockets (not parallel: it swaps systemBufferCaps): on both ends of a real connection, a buffer
// size above the system's cap leaves the socket's buffers to the system
// (Linux reports twice a size set, so a set buffer would read 2n), and a
// size within it is set.
func TestBufferSizesOnSockets(t *testing.T) {
	const n = 300_000 // an odd size, so that 2n is no system default
	for _, tc := range []struct {
		name       string
		rmax, wmax int
		set        bool
	}{
		{"caps below", 212992, 212992, false},
		{"caps above", 4 << 20, 4 << 20, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if rmax, wmax := readCap("/proc/sys/net/core/rmem_max"), readCap("/proc/sys/net/core/wmem_max"); tc.set && (rmax < n || wmax < n) {
				t.Skipf("this host caps socket buffers at %d and %d bytes, below the %d this case sets", rmax, wmax, n)
			}
			withCaps(t, tc.rmax, tc.wmax)
			cfg := testConfig()
			cfg.BufferSize = n
			dialed, accepted := pair(t, cfg)
			for _, c := range []*Conn{dialed, accepted} {
				for _, opt := range []struct {
					name string
					opt  int
				}{{"SO_RCVBUF", syscall.SO_RCVBUF}, {"SO_SNDBUF", syscall.SO_SNDBUF}} {
					if got := getsockopt(t, c, syscall.SOL_SOCKET, opt.opt); (got == 2*n) != tc.set {
						t.Errorf("%s = %d with caps %d/%d and %d asked for: set = %v, want %v", opt.name, got, tc.rmax, tc.wmax, n, got == 2*n, tc.set)
					}
				}
			}
		})
	}
}
