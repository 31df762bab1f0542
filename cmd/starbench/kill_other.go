//go:build !unix

package main

import "os"

// killGroup kills p (there are no process groups to kill here).
func killGroup(p *os.Process) { _ = p.Kill() }
