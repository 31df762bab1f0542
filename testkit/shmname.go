package testkit

import (
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/starcomm/starcomm/shm"
)

// ShmName returns a segment name for a test that no other test or test
// process uses.
func ShmName(t testing.TB) string {
	return fmt.Sprintf("t%d-%d-%s", os.Getpid(), time.Now().UnixNano()%1_000_000_000, sanitize(t.Name()))
}

func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			b[i] = '_'
		}
	}
	if len(b) > 120 {
		b = b[len(b)-120:]
	}
	return string(b)
}

// SegmentGone reports whether the job's segment file is gone.
func SegmentGone(name string) bool {
	_, err := os.Lstat(shm.SegmentPath("", name))
	return errors.Is(err, os.ErrNotExist)
}
