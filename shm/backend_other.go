//go:build !linux

package shm

import (
	"context"
	"runtime"

	"github.com/starcomm/starcomm/comm"
)

// Comm is the shm backend's communicator. Outside Linux it cannot be
// built: New returns a *comm.BackendNotAvailableError.
type Comm struct{ comm.Local }

// New returns a *comm.BackendNotAvailableError: the shm backend needs
// Linux (futexes in shared memory, pidfds, open file description locks).
func New(ctx context.Context, cfg CommConfig) (*Comm, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return nil, &comm.BackendNotAvailableError{Backend: BackendName,
		Reason: "the shared-memory backend needs Linux (futexes in shared memory, pidfds, open file description locks); this is " + runtime.GOOS + ": use tcp"}
}

// Path returns "".
func (c *Comm) Path() string { return "" }

// ReplacedStale returns false.
func (c *Comm) ReplacedStale() bool { return false }

// Provider returns the heap fallback.
func (c *Comm) Provider() Provider { return HeapFallback(c) }
