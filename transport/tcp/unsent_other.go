//go:build !linux

package tcp

import (
	"errors"
	"fmt"
)

// Unsent implements transport.UnsentCounter where the system cannot tell
// (only Linux's SIOCOUTQNSD is used): it always fails with an error wrapping
// errors.ErrUnsupported.
func (c *Conn) Unsent() (int, error) {
	return 0, fmt.Errorf("tcp: the send queue's length: %w", errors.ErrUnsupported)
}

// Unread implements transport.UnreadCounter where the system cannot tell
// (only Linux's FIONREAD is used): it always fails with an error wrapping
// errors.ErrUnsupported.
func (c *Conn) Unread() (int, error) {
	return 0, fmt.Errorf("tcp: the receive queue's length: %w", errors.ErrUnsupported)
}
