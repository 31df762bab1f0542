package star

import (
	"sync"
	"testing"
)

// TestNoSessionGoroutineAfterStop: once a control session's stop has
// begun, goUnlessStopped starts nothing (broadcastAbort then counts no
// send), so no goroutine starts after stop's Wait and outlives the
// session; before that it runs f on a goroutine that stop waits for.
// Calls racing with stop from many goroutines are clean under -race.
func TestNoSessionGoroutineAfterStop(t *testing.T) {
	ctl := &control{stopped: make(chan struct{})}
	ran := make(chan struct{})
	if !ctl.goUnlessStopped(func() { close(ran) }) {
		t.Fatal("goUnlessStopped before stop: f did not start")
	}
	<-ran
	ctl.wg.Wait()

	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { ctl.goUnlessStopped(func() {}) })
	}
	ctl.gomu.Lock()
	close(ctl.stopped) // what stop does, before it waits
	ctl.gomu.Unlock()
	ctl.wg.Wait()
	wg.Wait()
	if ctl.goUnlessStopped(func() { t.Error("f ran after stop began") }) {
		t.Fatal("goUnlessStopped after stop: reported that f runs")
	}
}
