//go:build unix

package mtls

import (
	"os"
	"syscall"
)

// openPEM opens a PEM file for reading without blocking on the open
// itself: a named pipe that no one writes to would otherwise hang the open
// forever (readPEM then refuses what is not a regular file).
func openPEM(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
}
