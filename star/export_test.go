package star

// SetTestHook sets the package's test hook (see hooks.go) for the tests
// of package star_test, and returns a function that removes it. Set it
// before any communicator starts, remove it after every one has closed.
func SetTestHook(h func(rank int, point string)) (restore func()) {
	testHook = h
	return func() { testHook = nil }
}

// HookRegistered is the hook point at which the coordinator registers a
// worker's valid Handshake; the hook's rank is the worker's.
const HookRegistered = hookRegistered

// HookRelay is the hook point at which the coordinator begins a relayed
// allgatherv.
const HookRelay = hookRelay
