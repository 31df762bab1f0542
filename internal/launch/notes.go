package launch

import (
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"
)

// exitNoteWait bounds how long a rank's exit message waits for the rest of
// that rank's output to be copied first. The rank's process group is dead
// by then, so its pipes end at once unless a process outside the group
// holds them, or the launcher's own output is slow to take the backlog.
const exitNoteWait = time.Second

// notes writes the launcher's own messages, in order, from a goroutine of
// its own, so that the supervise loop never waits for its output: when
// nobody reads that output (a pager not scrolling, a terminal paused with
// Ctrl-S, a pipe into a program that does not read), a forwarded signal,
// the settle and grace timers and the stop after a rank's failure still
// happen at once.
type notes struct {
	w      *SyncWriter
	mu     sync.Mutex
	queue  []note
	closed bool
	wake   chan struct{} // a note was added, or the queue closed
	done   chan struct{} // closed once the queue is closed and written out
}

// note is one message; its writing waits for after (if set, at most
// exitNoteWait).
type note struct {
	text  string
	after <-chan struct{}
}

func newNotes(w *SyncWriter) *notes {
	n := &notes{w: w, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go n.write()
	return n
}

// add queues one line.
func (n *notes) add(after <-chan struct{}, format string, args ...any) {
	n.mu.Lock()
	n.queue = append(n.queue, note{text: fmt.Sprintf(format+"\n", args...), after: after})
	n.mu.Unlock()
	n.poke()
}

func (n *notes) poke() {
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// write writes the queue until it is closed and empty.
func (n *notes) write() {
	for {
		n.mu.Lock()
		if len(n.queue) == 0 {
			closed := n.closed
			n.mu.Unlock()
			if closed {
				close(n.done)
				return
			}
			<-n.wake
			continue
		}
		m := n.queue[0]
		n.queue = n.queue[1:]
		n.mu.Unlock()
		if m.after != nil {
			t := time.NewTimer(exitNoteWait)
			select {
			case <-m.after:
			case <-t.C:
			}
			t.Stop()
		}
		_, _ = n.w.Write([]byte(m.text))
	}
}

// flush closes the queue and waits until it has been written, or until a
// signal other than SIGPIPE arrives on sigs (the launcher's output is
// stuck and the user wants out), which it returns (0 when flushed), or
// until bound passes (nil: no bound).
func (n *notes) flush(sigs <-chan os.Signal, bound <-chan time.Time) syscall.Signal {
	n.mu.Lock()
	n.closed = true
	n.mu.Unlock()
	n.poke()
	return waitOrSignal(n.done, sigs, bound)
}

// waitOrSignal waits until done is closed, or until a signal other than
// SIGPIPE arrives on sigs, which it returns (0 when done), or until bound
// passes (nil: no bound).
func waitOrSignal(done <-chan struct{}, sigs <-chan os.Signal, bound <-chan time.Time) syscall.Signal {
	for {
		select {
		case <-done:
			return 0
		case <-bound:
			return 0
		case sig := <-sigs:
			s, ok := sig.(syscall.Signal)
			if !ok {
				s = syscall.SIGTERM
			}
			if !isSigPipe(s) {
				return s
			}
		}
	}
}
