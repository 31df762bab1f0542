package star

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/starcomm/starcomm/comm"
)

// coordinator is rank 0's part of every collective. It reads and writes
// small frames itself, polling every worker link from the collective's
// goroutine; what polling does not finish, and every large frame, is done
// by the links' own goroutines, one per worker, concurrently, each serving
// one request at a time.
//
// A request carries what the link needs (the tag and payload to write, or
// the order to finish the frame begun with beginRead) and hands the link
// to its goroutine until the result comes back on results. The goroutines
// run until stop closes their request channels, which Close does only
// once no collective runs, so no request is ever left without a result.
type coordinator struct {
	c       *Comm
	workers []*link // the links to ranks 1..size-1, in rank order
	byRank  []*link // byRank[r] is the link to rank r; byRank[0] is nil
	results chan result
	serving sync.WaitGroup
	// polled is set when every worker link can be polled and Spin > 0.
	polled bool

	// Scratch reused across collectives.
	todo    []*link // the links a fan-in or fan-out still waits for
	stage   []byte  // a small frame, staged once for every link
	one     [1][]byte
	opBytes []byte   // allreduce: the op byte each worker sent, by rank
	scratch []uint64 // allreduce: the workers' contributions
}

// request is one link's part of a collective.
type request struct {
	kind  reqKind
	tag   byte     // reqWrite: the frame's tag
	parts [][]byte // reqWrite: its payload, in order
}

type reqKind uint8

const (
	reqRead  reqKind = iota // finish the frame begun with beginRead
	reqWrite                // write a frame of tag with payload parts
	reqRest                 // write what postFrame left
)

// result is a link's answer to a request.
type result struct {
	peer int
	err  error
}

// newCoordinator starts the goroutine of every link (links[r] is rank r's;
// links[0] is nil; none for a communicator of size 1).
func newCoordinator(c *Comm, links []*link) *coordinator {
	co := &coordinator{c: c, byRank: links, results: make(chan result, c.size), opBytes: make([]byte, c.size)}
	if len(links) > 1 {
		co.workers = links[1:]
	}
	co.todo = make([]*link, 0, len(co.workers))
	co.polled = c.cfg.Spin > 0
	for _, l := range co.workers {
		co.polled = co.polled && l.poller != nil
		l.reqs = make(chan request, 1)
		co.serving.Add(1)
		go co.serve(l)
	}
	return co
}

// serve runs link l's requests until its channel closes.
func (co *coordinator) serve(l *link) {
	defer co.serving.Done()
	for req := range l.reqs {
		var err error
		switch req.kind {
		case reqRead:
			err = l.finishRead()
		case reqWrite:
			err = l.writeFrame(req.tag, nil, req.parts...)
		case reqRest:
			err = l.finishWrite()
		}
		co.c.hook(hookServed)
		co.results <- result{peer: l.peer, err: err}
	}
}

func (co *coordinator) links() []*link { return co.workers }

// stop ends the links' goroutines. No collective may be running.
func (co *coordinator) stop() {
	for _, l := range co.workers {
		close(l.reqs)
	}
	co.serving.Wait()
}

// fan hands req to each of links, to run concurrently on their goroutines,
// waits for every result and returns the first failure as a *linkError.
// With cut, the first failure cancels the other links (reads are safe to
// cut; a write cut mid-frame would leave a worker without its result).
func (co *coordinator) fan(links []*link, req request, cut bool) error {
	for _, l := range links {
		co.c.hook(hookHandoff)
		l.reqs <- req
	}
	var first error
	for range links {
		res := <-co.results
		co.c.hook(hookResult)
		if res.err != nil && first == nil {
			first = &linkError{peer: res.peer, err: res.err}
			if cut {
				for _, l := range links {
					if l.peer != res.peer {
						l.cancel(errCut)
					}
				}
			}
		}
	}
	return first
}

// gather reads one frame from every worker link, each begun with
// beginRead. With spin > 0 it first polls them all from this goroutine for
// up to spin without progress; the links whose frames are not complete by
// then finish on their own goroutines, concurrently, under the timeout. At
// the first failure it cancels the other links, waits for all, and
// returns that failure as a *linkError.
func (co *coordinator) gather(spin time.Duration) error {
	todo := append(co.todo[:0], co.workers...)
	if co.polled && spin > 0 {
		co.c.hook(hookPoll)
		done, bad, err := pollLinks(spin, co.c.cfg.Timeout, todo...)
		if err != nil {
			return &linkError{peer: bad.peer, err: err}
		}
		todo = todo[done:]
	}
	return co.fan(todo, request{kind: reqRead}, true)
}

// scatter sends every worker link but skip a frame of tag with payload
// parts. A small frame goes out from this goroutine as far as each link
// takes it without waiting (with polling); the rest is written by the
// links' goroutines, concurrently. It returns the first failure; other links
// are left to finish, since a worker that gets the whole result has a
// correct result.
func (co *coordinator) scatter(tag byte, parts [][]byte, skip int) error {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	todo := co.todo[:0]
	if !co.polled || co.c.spin(n) == 0 {
		for _, l := range co.workers {
			if l.peer != skip {
				todo = append(todo, l)
			}
		}
		return co.fan(todo, request{kind: reqWrite, tag: tag, parts: parts}, false)
	}
	var first error
	co.stage = stageFrame(co.stage, tag, parts)
	now := time.Now()
	for _, l := range co.workers {
		if l.peer == skip {
			continue
		}
		done, err := l.postFrameAt(co.stage, now)
		co.c.hook(hookPosted)
		switch {
		case err != nil:
			if first == nil {
				first = &linkError{peer: l.peer, err: err}
			}
		case !done:
			todo = append(todo, l)
		}
	}
	if err := co.fan(todo, request{kind: reqRest}, false); first == nil {
		first = err
	}
	return first
}

func (co *coordinator) allgatherv(send []byte, parts [][]byte) error {
	copy(parts[0], send)
	most := 0
	for _, l := range co.workers {
		l.beginRead(TagAllgathervSend, parts[l.peer:l.peer+1])
		most = max(most, len(parts[l.peer]))
	}
	if err := co.gather(co.c.spin(most)); err != nil {
		return err
	}
	return co.scatter(TagAllgathervRecv, parts, -1)
}

func (co *coordinator) allreduce(send, recv comm.View, op comm.ReduceOp) error {
	n := len(send.Bytes)
	in := co.scratchBytes(len(co.workers) * n)
	for _, l := range co.workers {
		r := l.peer
		l.beginRead(TagAllreduceSend, [][]byte{co.opBytes[r : r+1], in[(r-1)*n : r*n]})
	}
	if err := co.gather(co.c.spin(n + 1)); err != nil {
		return err
	}
	for _, l := range co.workers {
		if got := comm.ReduceOp(co.opBytes[l.peer]); got != op {
			return &linkError{peer: l.peer, err: fmt.Errorf("%w: rank %d called allreduce with %v, rank 0 with %v", ErrReduceOpMismatch, l.peer, got, op)}
		}
	}
	copy(recv.Bytes, send.Bytes)
	for r := 1; r <= len(co.workers); r++ {
		comm.Reduce(send.Type, op, recv.Bytes, in[(r-1)*n:r*n])
	}
	co.one[0] = recv.Bytes
	return co.scatter(TagAllreduceRecv, co.one[:], -1)
}

// scratchBytes returns n bytes of 8-byte-aligned scratch space.
func (co *coordinator) scratchBytes(n int) []byte {
	words := (n + 7) / 8
	if cap(co.scratch) < words {
		co.scratch = make([]uint64, words)
	}
	return comm.ViewOf(co.scratch[:words]).Bytes[:n]
}

func (co *coordinator) broadcast(buf []byte, root int) error {
	if root != 0 {
		if err := co.byRank[root].awaitFrame(co.c.spin(len(buf)), TagBroadcast, buf); err != nil {
			return &linkError{peer: root, err: err}
		}
	}
	co.one[0] = buf
	return co.scatter(TagBroadcast, co.one[:], root)
}

func (co *coordinator) barrier() error {
	for _, l := range co.workers {
		l.beginRead(TagBarrierReady, nil)
	}
	if err := co.gather(co.c.spin(0)); err != nil {
		return err
	}
	return co.scatter(TagBarrierGo, nil, -1)
}

// shutdown is the coordinator's graceful end (spec section 5.2): Shutdown
// to every worker at once, then each link waits, at most ShutdownTimeout
// from now, for its worker to close its end, and closes. A worker the
// Shutdown could not be written to, or that was still sending (it called a
// collective that rank 0 did not), is an error naming it.
func (co *coordinator) shutdown() error {
	until := time.Now().Add(co.c.cfg.ShutdownTimeout)
	errs := make([]error, len(co.byRank))
	var wg sync.WaitGroup
	for _, l := range co.workers {
		l.startDrain(until)
		wg.Go(func() {
			if err := l.sendFinal(TagShutdown, nil, until); err != nil {
				errs[l.peer] = fmt.Errorf("rank %d: Shutdown not delivered: %w", l.peer, err)
			}
			l.finish()
			if l.drainedBytes > 0 && errs[l.peer] == nil {
				errs[l.peer] = fmt.Errorf("rank %d was still sending (%d bytes) when rank 0 closed: it called a collective that rank 0 did not (the ranks called different collectives)", l.peer, l.drainedBytes)
			}
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			return &comm.CollectiveFailedError{Operation: OpClose, Rank: r, Message: "graceful shutdown incomplete", Err: errors.Join(errs...)}
		}
	}
	return nil
}
