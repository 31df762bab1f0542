//go:build !linux

package tcp

import (
	"errors"
	"fmt"

	"github.com/starcomm/starcomm/transport"
)

// Acks implements transport.AckReporter where the system cannot tell (only
// Linux's TCP_INFO is used): it always fails with an error wrapping
// errors.ErrUnsupported.
func (c *Conn) Acks() (transport.Acks, error) {
	return transport.Acks{}, fmt.Errorf("tcp: how the peer acknowledges: %w", errors.ErrUnsupported)
}
