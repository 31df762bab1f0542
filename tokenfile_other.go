//go:build !unix

package starcomm

import "os"

// openTokenFile opens a token file for reading.
func openTokenFile(path string) (*os.File, error) { return os.Open(path) }
