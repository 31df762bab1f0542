package tcp

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// congestionSettable reports whether this system has TCP_CONGESTION.
const congestionSettable = true

// congestion returns the socket's congestion control, "" if unknown.
func congestion(rc syscall.RawConn) string {
	var name string
	_ = rc.Control(func(fd uintptr) {
		name, _ = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
	})
	return name
}

// setCongestion sets the socket's congestion control to name and reports
// whether the kernel took it.
func setCongestion(rc syscall.RawConn, name string) bool {
	var err error
	if cerr := rc.Control(func(fd uintptr) {
		err = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, name)
	}); cerr != nil {
		return false
	}
	return err == nil
}
