package testkit

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
	"time"
)

// CheckGoroutines records the goroutines running now and registers a
// cleanup that fails t if, after the test and its other cleanups, goroutines
// started since are still running. Call it first in a test so its cleanup
// runs last (after the communicators are closed). Goroutines get up to 10 s
// to exit (Close and lingering links are bounded by ShutdownTimeout).
func CheckGoroutines(t testing.TB) {
	t.Helper()
	before := goroutineIDs()
	t.Cleanup(func() {
		deadline := time.Now().Add(10 * time.Second)
		var extra []string
		for {
			extra = extra[:0]
			for id, stack := range goroutines() {
				if !before[id] && !ignorable(stack) {
					extra = append(extra, stack)
				}
			}
			if len(extra) == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond) // polling for exit, not synchronising
		}
		if len(extra) > 0 {
			t.Errorf("%d goroutine(s) leaked:\n\n%s", len(extra), strings.Join(extra, "\n\n"))
		}
	})
}

func ignorable(stack string) bool {
	for _, s := range []string{"testing.(*T).Run", "testing.tRunner", "os/signal.loop", "runtime.ensureSigM", "testing.runFuzzing"} {
		if strings.Contains(stack, s) {
			return true
		}
	}
	return false
}

func goroutineIDs() map[string]bool {
	ids := map[string]bool{}
	for id := range goroutines() {
		ids[id] = true
	}
	return ids
}

// goroutines returns every goroutine's stack keyed by its id, except the
// caller's.
func goroutines() map[string]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := map[string]string{}
	for i, g := range bytes.Split(buf, []byte("\n\n")) {
		if i == 0 {
			continue // the calling goroutine
		}
		s := string(g)
		header, _, _ := strings.Cut(s, "\n")
		// "goroutine 123 [running]:"
		fields := strings.Fields(header)
		if len(fields) >= 2 {
			out[fields[1]] = s
		}
	}
	return out
}
