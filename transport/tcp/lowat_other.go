//go:build !unix

package tcp

// SetReadLowWater implements transport.LowWaterReader; without
// SO_RCVLOWAT it does nothing (reads wake for every segment, as before).
func (c *Conn) SetReadLowWater(n int) error { return nil }
