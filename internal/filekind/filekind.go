// Package filekind names the kind of a file that is not a regular file,
// for the errors of the configuration's file checks (a token file, a TLS
// file). The shm package, which imports only comm, the standard library
// and x/sys, has its own for a segment's path.
package filekind

import "io/fs"

// NotRegular returns what a file of mode m is ("a named pipe", "a
// directory", ...) when it is not a regular file, or "" when it is one.
func NotRegular(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return ""
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	}
	return "of another kind (" + m.Type().String() + ")"
}
