//go:build !unix

package main

import "time"

// processCPU is not measured on this platform: the late workloads report
// 0 CPU time.
func processCPU() time.Duration { return 0 }
