package testkit

import (
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
