package shm

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// watcher notices a peer's death at once: it holds a pidfd of every other
// rank's process and polls them (a pidfd becomes readable when its process
// ends, however it ends). A peer that ends without having closed the
// communicator is published as failed, which wakes every rank.
type watcher struct {
	c      *Comm
	pidfds []int // by rank; -1 for this rank and for ranks in this process
	pipe   [2]int
	done   chan struct{}
}

// startWatcher opens the peers' pidfds and starts watching. It fails,
// naming the rank, when a peer is already gone. Peers in this very process
// (ranks run as goroutines in tests) are not watched.
func startWatcher(c *Comm) (*watcher, int, error) {
	w := &watcher{c: c, pidfds: make([]int, c.size), done: make(chan struct{})}
	self := os.Getpid()
	for r := range w.pidfds {
		w.pidfds[r] = -1
	}
	for r := range c.size {
		pid := int(atomic.LoadInt32(c.seg.pid(r)))
		if r == c.rank || pid == self {
			continue
		}
		fd, err := unix.PidfdOpen(pid, 0)
		if errors.Is(err, unix.ENOSYS) {
			continue // before Linux 5.3: deaths are found by the timeout
		}
		if err == nil && atomic.LoadInt32(c.seg.pid(r)) != int32(pid) {
			unix.Close(fd)
			err = unix.ESRCH
		}
		if errors.Is(err, unix.EMFILE) || errors.Is(err, unix.ENFILE) {
			w.closeFDs()
			return nil, c.rank, fmt.Errorf("cannot watch rank %d's process: %w (every rank holds a descriptor of each other rank's process: %d ranks need a limit of open files, ulimit -n, above %d)", r, err, c.size, c.size+64)
		}
		if err != nil && atomic.LoadUint32(c.seg.slotState(r)) == slotClosed {
			continue // it closed the communicator, then exited: fine
		}
		if err != nil {
			w.closeFDs()
			return nil, r, fmt.Errorf("rank %d (pid %d) %w before start-up completed (%v)", r, pid, ErrPeerExited, err)
		}
		w.pidfds[r] = fd
	}
	if err := unix.Pipe2(w.pipe[:], unix.O_CLOEXEC); err != nil {
		w.closeFDs()
		return nil, -1, fmt.Errorf("creating the watcher's pipe: %w", err)
	}
	go w.run()
	return w, -1, nil
}

func (w *watcher) closeFDs() {
	for r, fd := range w.pidfds {
		if fd >= 0 {
			unix.Close(fd)
			w.pidfds[r] = -1
		}
	}
}

func (w *watcher) run() {
	defer close(w.done)
	c := w.c
	fds := make([]unix.PollFd, 0, len(w.pidfds)+1)
	ranks := make([]int, 0, len(w.pidfds))
	for {
		fds, ranks = fds[:0], ranks[:0]
		fds = append(fds, unix.PollFd{Fd: int32(w.pipe[0]), Events: unix.POLLIN})
		for r, fd := range w.pidfds {
			if fd >= 0 {
				fds = append(fds, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
				ranks = append(ranks, r)
			}
		}
		_, err := unix.Poll(fds, -1)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return
		}
		if fds[0].Revents != 0 {
			return
		}
		for i, r := range ranks {
			if fds[i+1].Revents == 0 {
				continue
			}
			unix.Close(w.pidfds[r])
			w.pidfds[r] = -1
			if atomic.LoadUint32(c.seg.slotState(r)) == slotClosed {
				continue // it closed the communicator, then exited: fine
			}
			c.raise(uint8(c.curOp.Load()), r, causeExited,
				fmt.Sprintf("rank %d (pid %d) exited without closing the communicator", r, atomic.LoadInt32(c.seg.pid(r))))
		}
	}
}

// stop ends the watcher and waits for it.
func (w *watcher) stop() {
	if w == nil {
		return
	}
	_, _ = unix.Write(w.pipe[1], []byte{1})
	<-w.done
	unix.Close(w.pipe[0])
	unix.Close(w.pipe[1])
	w.closeFDs()
}
