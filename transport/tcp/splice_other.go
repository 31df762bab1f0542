//go:build !linux

package tcp

// spliceOnce is not used where there is no splice(2) (Conn has no
// WriteSpliced there).
func (c *Conn) spliceOnce(uintptr) bool { return true }

// dropPipe has no pipe to close where there is no splice(2).
func (c *Conn) dropPipe() {}
