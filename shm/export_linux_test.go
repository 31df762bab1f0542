package shm

import "sync/atomic"

// SetStartHook makes f run in every start-up between its reading of the
// joined count, short of the size, and of the abort word, until the
// returned function restores the previous hook. Not for concurrent tests.
func SetStartHook(f func()) (restore func()) {
	prev := startHook
	startHook = f
	return func() { startHook = prev }
}

// SetWatchHook makes f run in New once every rank has joined, before the
// watcher looks at the other ranks' processes. Not for concurrent tests.
func SetWatchHook(f func()) (restore func()) {
	prev := watchHook
	watchHook = f
	return func() { watchHook = prev }
}

// SetCloseHooks makes first run in the first Close of a communicator,
// before it does anything, and later in a later Close, before it waits for
// the first. Not for concurrent tests.
func SetCloseHooks(first, later func()) (restore func()) {
	prev, prevLater := closeHook, closeWaitHook
	closeHook, closeWaitHook = first, later
	return func() { closeHook, closeWaitHook = prev, prevLater }
}

// ClosedSlot reports whether rank is marked closed in the segment c maps.
func ClosedSlot(c *Comm, rank int) bool {
	return atomic.LoadUint32(c.seg.slotState(rank)) == slotClosed
}
