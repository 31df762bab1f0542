//go:build !linux

package shm

// hostMemory reports that the host's memory is unknown on this platform.
func hostMemory() (uint64, bool) { return 0, false }
