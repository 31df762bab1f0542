package testkit

import (
	"runtime"
	"testing"
	"testing/synctest"
)

// Async runs f in a new goroutine and delivers its result on the returned
// channel (buffered, so the goroutine never blocks on it).
func Async[T any](f func() T) <-chan T {
	ch := make(chan T, 1)
	go func() { ch <- f() }()
	return ch
}

// Ready returns the value of ch once every other goroutine of the current
// testing/synctest bubble is blocked, and fails the test when there is none:
// the operation behind ch did not complete without the fake clock moving.
func Ready[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	synctest.Wait()
	select {
	case v := <-ch:
		return v
	default:
		t.Fatalf("%s is still blocked", what)
		panic("unreachable")
	}
}

// Blocked fails the test when ch has a value once every other goroutine of
// the current testing/synctest bubble is blocked: the operation behind ch
// must still be waiting.
func Blocked[T any](t testing.TB, ch <-chan T, what string) {
	t.Helper()
	synctest.Wait()
	select {
	case v := <-ch:
		t.Fatalf("%s returned %+v, want it still blocked", what, v)
	default:
	}
}

// SyncTest runs f in a testing/synctest bubble, as synctest.Test does, for
// tests whose communicators run control sessions. smux keeps a
// process-wide sync.Pool of channels; a channel made in one bubble (or
// outside any) and reused in another makes the runtime abort ("select on
// synctest channel from outside bubble"). Two garbage collections empty
// every sync.Pool, so SyncTest runs them before and after the bubble. Tests
// that use it must not run in parallel with other tests that start
// control sessions.
func SyncTest(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	emptyPools()
	defer emptyPools()
	synctest.Test(t, f)
}

// emptyPools drops every sync.Pool's contents: a garbage collection moves
// a pool's items to its victim cache, the next one drops them.
func emptyPools() {
	runtime.GC()
	runtime.GC()
}
