//go:build unix

package starcomm

import (
	"os"
	"syscall"
)

// openTokenFile opens a token file for reading without blocking on the
// open itself: a named pipe that no one writes to would otherwise hang the
// open forever (readTokenFile then refuses what is not a regular file).
func openTokenFile(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
}
