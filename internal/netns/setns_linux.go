//go:build linux

package netns

import (
	"fmt"
	"os"
	"runtime"
	"syscall"
)

// sysSetns is the number of the setns system call, which package syscall
// does not define.
var sysSetns = map[string]uintptr{
	"amd64":    308,
	"386":      346,
	"arm64":    268,
	"arm":      375,
	"riscv64":  268,
	"loong64":  268,
	"ppc64":    350,
	"ppc64le":  350,
	"s390x":    339,
	"mips":     4344,
	"mipsle":   4344,
	"mips64":   5303,
	"mips64le": 5303,
}

// doInPath runs fn on a fresh OS thread that has joined the network
// namespace at path (a file in the netns directory, or /proc/PID/ns/net).
// The thread is never handed back to the Go scheduler: the goroutine exits
// locked to it, so the runtime terminates it.
func doInPath(path string, fn func() error) error {
	nr, ok := sysSetns[runtime.GOARCH]
	if !ok {
		return fmt.Errorf("netns: setns: system call number unknown on %s", runtime.GOARCH)
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("netns: %w", err)
	}
	defer f.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		_, _, errno := syscall.RawSyscall(nr, f.Fd(), syscall.CLONE_NEWNET, 0)
		if errno != 0 {
			runtime.UnlockOSThread() // the thread is unchanged
			errc <- fmt.Errorf("netns: setns %s: %w", path, errno)
			return
		}
		// No UnlockOSThread: the thread is in another namespace.
		errc <- fn()
	}()
	return <-errc
}
