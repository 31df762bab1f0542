//go:build !unix

package mtls

import "os"

// openPEM opens a PEM file for reading.
func openPEM(path string) (*os.File, error) { return os.Open(path) }
