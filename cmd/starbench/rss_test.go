package main

import (
	"runtime"
	"testing"
)

// TestPeakRSS reads a plausible peak RSS on Linux: at least the memory this
// test just touched.
func TestPeakRSS(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("VmHWM is Linux-only")
	}
	buf := make([]byte, 64<<20)
	for i := range buf {
		buf[i] = 1
	}
	if got := peakRSS(); got < int64(len(buf)) {
		t.Fatalf("peakRSS() = %d, want >= %d after touching %d bytes", got, len(buf), len(buf))
	}
	runtime.KeepAlive(buf)
}
