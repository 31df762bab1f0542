//go:build !wasip1

package tcp

import "syscall"

// EHOSTDOWN is retryable where the platform defines it (wasip1 does not).
func init() { retryableErrnos = append(retryableErrnos, syscall.EHOSTDOWN) }
