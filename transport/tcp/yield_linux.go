package tcp

import (
	"runtime"
	"syscall"
)

// Yield implements transport.Poller: it gives the thread's CPU to other
// processes (sched_yield), so that a peer on the same host, which a poller
// is waiting for, gets to run even when every core is busy; every 16th
// call it also lets this process's other goroutines run (runtime.Gosched),
// for ranks that share a process. (Every fourth call, as before, spent a
// scheduler pass per few polls of a rank alone in its process, which is
// CPU its peers on a busy host need.)
//
// sched_yield is made as a raw system call, without telling the Go
// scheduler: it returns within a time slice, and handing the P to another
// thread for it costs more than it saves (measured: barrier at R=4 on 2
// cores 59-69 µs raw, 85-102 µs through syscall.Syscall and
// runtime.Gosched each time).
func (c *Conn) Yield() {
	c.yields++
	if c.yields%16 == 0 {
		runtime.Gosched()
	}
	syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
}
