package filekind

import (
	"io/fs"
	"testing"
)

func TestNotRegular(t *testing.T) {
	for _, tc := range []struct {
		mode fs.FileMode
		want string
	}{
		{0o644, ""},
		{fs.ModeDir | 0o755, "a directory"},
		{fs.ModeSymlink | 0o777, "a symbolic link"},
		{fs.ModeNamedPipe | 0o600, "a named pipe"},
		{fs.ModeDevice | fs.ModeCharDevice | 0o666, "a device"},
		{fs.ModeDevice | 0o660, "a device"},
		{fs.ModeSocket | 0o755, "a socket"},
		{fs.ModeIrregular, "of another kind (?---------)"},
	} {
		if got := NotRegular(tc.mode); got != tc.want {
			t.Errorf("NotRegular(%v) = %q, want %q", tc.mode, got, tc.want)
		}
	}
}
