//go:build !linux

package tcp

// spinRead falls back to a plain Read where polling is not implemented.
func (c *Conn) spinRead(p []byte) (int, error) { return c.TCPConn.Read(p) }

// pollStep is not used where polling is not implemented.
func (c *Conn) pollStep(uintptr) bool { return true }
