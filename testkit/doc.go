// Package testkit holds what every backend's tests share: starting R ranks
// in one process over any transport driver (StartStar), a goroutine-leak
// check (CheckGoroutines), and the conformance suite
// (Cases, RunConformance) that each backend runs from its own _test.go file.
//
// The conformance cases are written per rank: Case.Run executes on every
// rank of one communicator and returns an error describing what that rank
// saw wrong. They take no *testing.T, so the same cases run with all ranks
// as goroutines of one test (RunConformance) or as separate OS processes
// (each process runs its own rank and reports).
//
// Only tests import testkit.
package testkit
