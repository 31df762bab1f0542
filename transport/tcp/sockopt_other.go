//go:build !unix

package tcp

import "syscall"

// setBufferSizes does nothing here: without a portable pre-connect hook the
// sizes are set on the established connection by configure.
func setBufferSizes(syscall.RawConn, int, int) error { return nil }
