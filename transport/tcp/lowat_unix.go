//go:build unix

package tcp

import (
	"fmt"
	"syscall"
)

// SetReadLowWater implements transport.LowWaterReader with SO_RCVLOWAT: a
// read that waits (and the network poller) is woken only once n bytes are
// in the socket's receive queue, or at the end of the stream, an error or
// memory pressure, whichever comes first; a read that finds fewer bytes
// there returns them. It makes a large frame arrive in a few reads
// instead of one per segment, and lets the reader sleep while the
// sender copies: on loopback the two ranks otherwise contend for the
// socket, and on a machine with fewer cores than ranks, for the CPU. n <= 1
// restores the default; Linux caps n at half the receive buffer. A value
// equal to the last one set costs no system call.
func (c *Conn) SetReadLowWater(n int) error {
	n = max(n, 1)
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if n == max(c.lowat, 1) {
		return nil
	}
	if c.lowStep == nil {
		c.lowStep = c.setLowat // a method value made once: no allocation per call
	}
	c.lowWant = n
	if err := c.rc.Control(c.lowStep); err != nil {
		return err
	}
	if c.lowErr != nil {
		err := c.lowErr
		c.lowErr = nil
		return fmt.Errorf("tcp: setting SO_RCVLOWAT to %d: %w", n, err)
	}
	c.lowat = n
	return nil
}

// setLowat is what SetReadLowWater hands to RawConn.Control (under rmu).
func (c *Conn) setLowat(fd uintptr) {
	c.lowErr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVLOWAT, c.lowWant)
}
