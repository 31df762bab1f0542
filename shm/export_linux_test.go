package shm

// SetStartHook makes f run in every start-up between its reading of the
// joined count, short of the size, and of the abort word, until the
// returned function restores the previous hook. Not for concurrent tests.
func SetStartHook(f func()) (restore func()) {
	prev := startHook
	startHook = f
	return func() { startHook = prev }
}
