package star

import (
	"errors"
	"fmt"
	"io"

	"github.com/starcomm/starcomm/comm"
)

// worker is the part of a rank 1..R-1 in every collective: it writes its
// frame to the coordinator and polls, then waits, for the reply, all from
// the collective's goroutine.
type worker struct {
	c    *Comm
	up   *link
	ends []*link // {up}
	op   [1]byte
}

func newWorker(c *Comm, up *link) *worker {
	return &worker{c: c, up: up, ends: []*link{up}}
}

func (w *worker) links() []*link { return w.ends }

func (w *worker) stop() {}

// exchange sends a frame of tag with extra and send as payload (unless
// tag is 0), then waits for the reply frame want, whose payload fills
// parts.
func (w *worker) exchange(tag byte, extra, send []byte, want byte, parts ...[]byte) error {
	if tag != 0 {
		if err := w.up.writeFrame(tag, extra, send); err != nil {
			return &linkError{peer: 0, err: err}
		}
		w.c.hook(hookSent)
	}
	if want == 0 {
		return nil
	}
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	w.c.hook(hookPoll)
	if err := w.up.awaitFrame(w.c.spin(n), want, parts...); err != nil {
		return &linkError{peer: 0, err: err}
	}
	return nil
}

func (w *worker) allgatherv(send []byte, parts [][]byte) error {
	return w.exchange(TagAllgathervSend, nil, send, TagAllgathervRecv, parts...)
}

func (w *worker) allreduce(send, recv comm.View, op comm.ReduceOp) error {
	w.op[0] = byte(op)
	return w.exchange(TagAllreduceSend, w.op[:], send.Bytes, TagAllreduceRecv, recv.Bytes)
}

func (w *worker) broadcast(buf []byte, root int) error {
	if w.c.rank == root {
		return w.exchange(TagBroadcast, nil, buf, 0)
	}
	return w.exchange(0, nil, nil, TagBroadcast, buf)
}

func (w *worker) barrier() error {
	return w.exchange(TagBarrierReady, nil, nil, TagBarrierGo)
}

// shutdown is a worker's graceful end (spec section 5.2): it half-closes
// its end (a coordinator still waiting for it in a collective this rank
// did not call then fails at once, naming it), waits for the coordinator's
// Shutdown, at most the link's timeout, and closes. Anything else from
// rank 0 is an error naming it, or, for an Abort, naming the rank the
// Abort blames.
func (w *worker) shutdown() error {
	l := w.up
	if l.cw != nil {
		_ = l.cw.CloseWrite()
	}
	err := l.readFrame(TagShutdown)
	_ = l.conn.Close()
	if err == nil {
		return nil
	}
	var why string
	blame := 0
	var ab *AbortError
	var te *tagError
	switch {
	case errors.As(err, &ab):
		why = "rank 0 aborted instead of shutting down: " + ab.Reason
		if ab.Rank >= 0 && ab.Rank < w.c.size {
			blame = ab.Rank // possibly this rank, gone while the others were in a collective
		}
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		why = "rank 0 closed the connection without sending Shutdown (it crashed, exited or failed after the last collective)"
	case isTimeout(err):
		why = fmt.Sprintf("no Shutdown from rank 0 within the %v timeout (it has not closed its communicator)", w.c.cfg.Timeout)
	case errors.As(err, &te):
		why = fmt.Sprintf("rank 0 sent %s while this rank was closing: it called a collective that this rank did not (the ranks called different collectives)", TagName(te.got))
	default:
		why = "waiting for rank 0's Shutdown: " + err.Error()
	}
	return &comm.CollectiveFailedError{Operation: OpClose, Rank: blame, Message: why, Err: err}
}
