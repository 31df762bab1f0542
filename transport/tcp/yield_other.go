//go:build !linux

package tcp

import "runtime"

// Yield implements transport.Poller: it lets this process's other
// goroutines run (runtime.Gosched). Only Linux also yields the CPU to other
// processes.
func (c *Conn) Yield() { c.yields++; runtime.Gosched() }
