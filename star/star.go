package star

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/starcomm/starcomm/comm"
)

// Comm is one rank of a star communicator. Rank 0 holds a link to every
// worker; a worker holds one link to rank 0. Create it with New.
type Comm struct {
	cfg   Config
	rank  int
	size  int
	links []*link // coordinator: links[r] for r in 1..size-1; nil on workers
	up    *link   // worker: the link to the coordinator

	opMu sync.Mutex // serialises collectives (and a graceful Close)

	stateMu sync.Mutex
	closed  bool
	failed  error          // the first failure; the communicator is fail-stop after it
	bg      sync.WaitGroup // links ending in the background after a failure

	// Scratch reused across collectives so steady state does not allocate.
	parts   [][]byte
	scratch []uint64
	opBytes []byte

	// Coordinator: one goroutine per worker link serves the steps of each
	// collective that it does not finish by polling (see gather, scatter);
	// the current collective's buffers are in op*.
	steps   []chan step // steps[r] feeds link r's goroutine
	results chan linkResult
	quit    chan struct{}
	serving sync.WaitGroup
	workers []*link  // links[1:], the coordinator's worker links
	todo    []*link  // scratch: links a fan-in or fan-out still waits for
	polled  bool     // every worker link can be polled and Spin > 0
	opTag   byte     // scatter: the tag of the frame to send
	opOut   [][]byte // scatter: its payload, in order
	opOne   [1][]byte
	stage   []byte   // scatter: a small frame, staged once for every link
	opParts [][]byte // allgatherv regions in rank order
	opIn    []byte   // allreduce: workers' contributions, (r-1)*n each
	opN     int      // allreduce: bytes per contribution
}

// step is one link's part of a collective on the coordinator.
type step uint8

const (
	stepFinishRead  step = iota // finish the frame begun with beginRead
	stepWrite                   // write frame opTag with payload opOut
	stepFinishWrite             // write what postFrame left
)

type linkResult struct {
	peer int
	err  error
}

// do performs step s on link l, with the buffers of the current collective.
func (c *Comm) do(l *link, s step) error {
	switch s {
	case stepFinishRead:
		return l.finishRead()
	case stepWrite:
		return l.writeFrame(c.opTag, nil, c.opOut...)
	case stepFinishWrite:
		return l.finishWrite()
	}
	panic("star: unknown step")
}

// serve runs link l's steps until Close.
func (c *Comm) serve(l *link, steps <-chan step) {
	defer c.serving.Done()
	for {
		select {
		case s := <-steps:
			c.results <- linkResult{peer: l.peer, err: c.do(l, s)}
		case <-c.quit:
			return
		}
	}
}

var _ comm.Communicator = (*Comm)(nil)

// New starts this rank: the coordinator (rank 0) accepts and handshakes
// every worker on cfg.Listener; a worker dials cfg.Addr and handshakes. New
// returns once this rank is ready for collectives, or an
// *comm.InitializationFailedError. A communicator of size 1 opens no
// connection (cfg.Listener, if any, is closed).
func New(ctx context.Context, cfg Config) (*Comm, error) {
	if err := cfg.Validate(); err != nil {
		if cfg.Listener != nil {
			_ = cfg.Listener.Close()
		}
		return nil, &comm.InitializationFailedError{Backend: "star", Err: err}
	}
	cfg = cfg.withDefaults()
	c := &Comm{cfg: cfg, rank: cfg.Rank, size: cfg.Size, opBytes: make([]byte, cfg.Size)}
	switch {
	case cfg.Size == 1:
		if cfg.Listener != nil {
			_ = cfg.Listener.Close()
		}
	case cfg.Rank == 0:
		links, err := accept(ctx, cfg)
		if err != nil {
			return nil, &comm.InitializationFailedError{Backend: "star", Err: err}
		}
		c.links = links
		c.workers = links[1:]
		c.todo = make([]*link, 0, cfg.Size-1)
		c.polled = cfg.Spin > 0
		for _, l := range c.workers {
			c.polled = c.polled && l.poller != nil
		}
		c.steps = make([]chan step, cfg.Size)
		c.results = make(chan linkResult, cfg.Size)
		c.quit = make(chan struct{})
		for _, l := range links[1:] {
			c.steps[l.peer] = make(chan step, 1)
			c.serving.Add(1)
			go c.serve(l, c.steps[l.peer])
		}
	default:
		l, err := dial(ctx, cfg)
		if err != nil {
			return nil, &comm.InitializationFailedError{Backend: "star", Err: fmt.Errorf("rank %d: %w", cfg.Rank, err)}
		}
		c.up = l
	}
	return c, nil
}

// Rank returns this rank.
func (c *Comm) Rank() int { return c.rank }

// Size returns the number of ranks.
func (c *Comm) Size() int { return c.size }

// Close ends the communicator. On an idle, healthy coordinator it sends
// Shutdown to every worker and waits up to ShutdownTimeout for each to take
// it; a worker closes its link. A collective running concurrently is
// unblocked and fails. Close returns within about ShutdownTimeout and is
// idempotent.
func (c *Comm) Close() error {
	c.stateMu.Lock()
	if c.closed {
		c.stateMu.Unlock()
		return nil
	}
	c.closed = true
	failed := c.failed
	c.stateMu.Unlock()

	if c.opMu.TryLock() {
		if failed == nil {
			if c.up != nil {
				_ = c.up.conn.Close()
			}
			var wg sync.WaitGroup
			for _, l := range c.links {
				if l != nil {
					wg.Go(func() { l.linger(TagShutdown, nil, c.cfg.ShutdownTimeout) })
				}
			}
			wg.Wait()
		}
		c.opMu.Unlock()
	} else {
		// A collective is running: cut its links so it returns now.
		c.closeAll()
	}
	if c.quit != nil {
		close(c.quit)
		c.serving.Wait()
	}
	c.bg.Wait()
	return nil
}

func (c *Comm) closeAll() {
	if c.up != nil {
		_ = c.up.conn.Close()
	}
	for _, l := range c.links {
		if l != nil {
			_ = l.conn.Close()
		}
	}
}

// begin checks that a collective may start.
func (c *Comm) begin(ctx context.Context, op string) error {
	c.stateMu.Lock()
	closed, failed := c.closed, c.failed
	c.stateMu.Unlock()
	if closed {
		return comm.ErrInvalidCommunicator
	}
	if failed != nil {
		rank := -1
		var cf *comm.CollectiveFailedError
		if errors.As(failed, &cf) {
			rank = cf.Rank
		}
		return &comm.CollectiveFailedError{Operation: op, Rank: rank, Message: "communicator is fail-stop after an earlier failure", Err: failed}
	}
	if err := ctx.Err(); err != nil {
		return &comm.CollectiveFailedError{Operation: op, Rank: c.rank, Message: "context done before the collective started", Err: err}
	}
	return nil
}

// linkError is a failure on the link to peer.
type linkError struct {
	peer int
	err  error
}

func (e *linkError) Error() string { return fmt.Sprintf("link to rank %d: %v", e.peer, e.err) }
func (e *linkError) Unwrap() error { return e.err }

// watch makes ctx's cancellation interrupt every link of this rank. The
// returned function stops watching and waits until an interrupt in progress
// has finished.
func (c *Comm) watch(ctx context.Context) func() {
	if ctx.Done() == nil {
		return func() {}
	}
	done := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(done)
		c.interrupt()
	})
	return func() {
		if !stop() {
			<-done
			// The interrupt moved every deadline into the past.
			if c.up != nil {
				c.up.forgetDeadlines()
			}
			for _, l := range c.links {
				if l != nil {
					l.forgetDeadlines()
				}
			}
		}
	}
}

// interrupt makes every pending read and write on this rank's links return
// at once with a deadline error.
func (c *Comm) interrupt() {
	past := time.Unix(1, 0)
	if c.up != nil {
		_ = c.up.conn.SetDeadline(past)
	}
	for _, l := range c.links {
		if l != nil {
			_ = l.conn.SetDeadline(past)
		}
	}
}

// fail turns err from a collective into the error the caller sees, makes
// the communicator fail-stop, and ends every link in the background: peers
// that can still hear get an Abort frame naming the failed rank and cause.
func (c *Comm) fail(ctx context.Context, op string, err error) error {
	var out error
	peer := -1
	var le *linkError
	if errors.As(err, &le) {
		peer = le.peer
		err = le.err
	}
	c.stateMu.Lock()
	closed := c.closed
	c.stateMu.Unlock()
	var fe *frameError
	var ab *AbortError
	switch {
	case closed:
		out = &comm.CollectiveFailedError{Operation: op, Rank: c.rank, Message: "communicator closed during the collective", Err: comm.ErrInvalidCommunicator}
	case ctx.Err() != nil:
		out = &comm.CollectiveFailedError{Operation: op, Rank: c.rank, Message: "context done during the collective", Err: errors.Join(ctx.Err(), err)}
	case errors.As(err, &fe) && fe.kind == "length":
		out = &comm.InvalidBufferSizeError{Operation: op, Expected: fe.expected, Actual: fe.got, Unit: "bytes",
			Detail: fmt.Sprintf("%s frame from rank %d; ranks disagree on the buffer sizes", TagName(fe.tag), peer)}
	case errors.As(err, &ab):
		blamed := ab.Rank
		if blamed < 0 || blamed >= c.size {
			blamed = ab.From // no rank, or one that does not exist
		}
		out = &comm.CollectiveFailedError{Operation: op, Rank: blamed, Message: fmt.Sprintf("aborted by rank %d: %s", ab.From, ab.Reason), Err: ab}
	case errors.Is(err, ErrShutdown):
		out = &comm.CollectiveFailedError{Operation: op, Rank: 0, Message: "the coordinator shut the communicator down", Err: err}
	default:
		out = &comm.CollectiveFailedError{Operation: op, Rank: peer, Message: fmt.Sprintf("link to rank %d: %s", peer, describe(err, c.cfg.Timeout)), Err: err}
	}

	c.stateMu.Lock()
	defer c.stateMu.Unlock()
	if c.failed == nil {
		c.failed = out
	}
	if c.closed {
		return out
	}
	// Every link ends in the background with an Abort frame naming the rank
	// at fault: a live peer learns the cause at once, a dead one costs
	// nothing (the write fails), a hung one at most ShutdownTimeout.
	// The rank at fault: as the error names it; else the peer whose frame
	// was wrong; else this rank.
	blame := c.rank
	var cf *comm.CollectiveFailedError
	switch {
	case errors.As(out, &cf) && cf.Rank >= 0:
		blame = cf.Rank
	case peer >= 0:
		blame = peer
	}
	reason := []byte(abortReason(blame, c.rank, op, err, out))
	ends := c.links
	if c.up != nil {
		ends = []*link{c.up}
	}
	for _, l := range ends {
		switch {
		case l == nil:
		case l.peer == peer && peerEnded(err):
			// The peer already ended this link (it closed, aborted or shut
			// down): there is no one left to tell.
			_ = l.conn.Close()
		default:
			c.bg.Go(func() { l.linger(TagAbort, reason, c.cfg.ShutdownTimeout) })
		}
	}
	return out
}

// peerEnded reports whether err shows that the peer ended the link itself.
func peerEnded(err error) bool {
	var ab *AbortError
	return errors.As(err, &ab) || errors.Is(err, ErrShutdown) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// abortReason is the text of the Abort frame sent to surviving peers:
// "rank N failed during OP (seen by rank M) [cause=NAME]: message". It
// starts with the rank at fault, which the receiver parses into
// AbortError.Rank, and carries the cause class for errors.Is.
func abortReason(blame, self int, op string, cause, out error) string {
	name := causeName(cause)
	if name == "" {
		var ab *AbortError
		if errors.As(cause, &ab) && ab.Cause != nil {
			name = causeName(ab.Cause)
		}
	}
	tag := ""
	if name != "" {
		tag = " [cause=" + name + "]"
	}
	return fmt.Sprintf("rank %d failed during %s (seen by rank %d)%s: %v", blame, op, self, tag, out)
}

// describe explains a link error in words.
func describe(err error, timeout time.Duration) string {
	var to interface{ Timeout() bool }
	switch {
	case errors.As(err, &to) && to.Timeout():
		return fmt.Sprintf("no progress within the %v timeout (peer hung or unreachable): %v", timeout, err)
	case errors.Is(err, io.EOF):
		return "connection closed by the peer (crashed or exited)"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed in the middle of a frame (peer crashed)"
	}
	return err.Error()
}

// run executes one collective: the common checks, the context watch, and
// the failure handling around body.
func (c *Comm) run(ctx context.Context, op string, check func() error, body func() error) error {
	c.opMu.Lock()
	defer c.opMu.Unlock()
	if err := c.begin(ctx, op); err != nil {
		return err
	}
	if err := check(); err != nil {
		return err
	}
	if c.size == 1 {
		return body()
	}
	stop := c.watch(ctx)
	err := body()
	stop()
	if err != nil {
		return c.fail(ctx, op, err)
	}
	return nil
}

// gather reads one frame from every worker link, each begun with
// beginRead. With polling it first polls them all from this goroutine for
// up to Spin; the links whose frames are not complete by then finish on
// their own goroutines, concurrently, under the timeout. At the first
// failure it interrupts the other links (reads are safe to cut), waits for
// all, and returns that failure as a *linkError.
func (c *Comm) gather(size int) error {
	todo := append(c.todo[:0], c.workers...)
	if spin := c.spin(size); c.polled && spin > 0 {
		done, bad, err := pollLinks(spin, c.cfg.Timeout, todo...)
		if err != nil {
			return &linkError{peer: bad.peer, err: err}
		}
		todo = todo[done:]
	}
	return c.fan(stepFinishRead, true, todo)
}

// scatter sends every worker link but skip a frame of tag with payload
// parts. A small frame goes out from this goroutine as far as each link
// takes it without waiting (with polling); the rest is written by the
// links' goroutines, concurrently. It returns the first failure; other links
// are left to finish, since a worker that gets the whole result has a
// correct result.
func (c *Comm) scatter(tag byte, parts [][]byte, skip int) error {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	todo := c.todo[:0]
	var first error
	if c.polled && c.spin(n) > 0 {
		c.stage = stageFrame(c.stage, tag, parts)
		for _, l := range c.workers {
			if l.peer == skip {
				continue
			}
			done, err := l.postFrame(c.stage)
			switch {
			case err != nil:
				if first == nil {
					first = &linkError{peer: l.peer, err: err}
				}
			case !done:
				todo = append(todo, l)
			}
		}
		if err := c.fan(stepFinishWrite, false, todo); first == nil {
			first = err
		}
		return first
	}
	for _, l := range c.workers {
		if l.peer != skip {
			todo = append(todo, l)
		}
	}
	c.opTag, c.opOut = tag, parts
	err := c.fan(stepWrite, false, todo)
	c.opOut = nil
	return err
}

// fan runs step s on each of links concurrently, each on its link's
// goroutine, and returns the first failure as a *linkError. With cut, the
// first failure interrupts the other links.
func (c *Comm) fan(s step, cut bool, links []*link) error {
	for _, l := range links {
		c.steps[l.peer] <- s
	}
	var first error
	for range links {
		res := <-c.results
		if res.err != nil && first == nil {
			first = &linkError{peer: res.peer, err: res.err}
			if cut {
				c.interrupt()
			}
		}
	}
	return first
}

// frameLimit checks that a payload of n bytes fits a frame.
func frameLimit(op string, n int) error {
	if uint64(n)+2 > MaxFrameLen {
		return &comm.InvalidArgumentError{Operation: op, Message: fmt.Sprintf("payload of %d bytes exceeds the wire limit of %d bytes per frame", n, MaxFrameLen-2)}
	}
	return nil
}

// regions returns the byte slices of recv holding each rank's region, in
// rank order, in c.parts.
func (c *Comm) regions(recv comm.View, counts, displs []int) [][]byte {
	es := recv.Type.Size()
	parts := c.parts[:0]
	for r := range counts {
		parts = append(parts, recv.Bytes[displs[r]*es:(displs[r]+counts[r])*es])
	}
	c.parts = parts
	return parts
}

// Allgatherv gathers every rank's send into recv (spec section 3.1).
// Workers send AllgathervSend; the coordinator places each at displs[r] and
// sends every worker one AllgathervRecv holding all regions in rank order.
func (c *Comm) Allgatherv(ctx context.Context, send, recv comm.View, counts, displs []int) error {
	var total int
	check := func() (err error) {
		total, err = comm.CheckAllgatherv(c.rank, c.size, send, recv, counts, displs)
		if err == nil {
			err = frameLimit(comm.OpAllgatherv, total*send.Type.Size())
		}
		return err
	}
	return c.run(ctx, comm.OpAllgatherv, check, func() error {
		parts := c.regions(recv, counts, displs)
		if c.rank != 0 {
			if err := c.up.writeFrame(TagAllgathervSend, nil, send.Bytes); err != nil {
				return &linkError{peer: 0, err: err}
			}
			if err := c.up.awaitFrame(c.spin(total*send.Type.Size()), TagAllgathervRecv, parts...); err != nil {
				return &linkError{peer: 0, err: err}
			}
			return nil
		}
		copy(parts[0], send.Bytes)
		if c.size == 1 {
			return nil
		}
		most := 0
		for _, l := range c.workers {
			l.beginRead(TagAllgathervSend, parts[l.peer:l.peer+1])
			most = max(most, len(parts[l.peer]))
		}
		if err := c.gather(most); err != nil {
			return err
		}
		return c.scatter(TagAllgathervRecv, parts, -1)
	})
}

// spin is how long to poll for a frame of n payload bytes before parking:
// Spin for small frames, 0 (no polling) for large ones.
func (c *Comm) spin(n int) time.Duration {
	if n > pollMax {
		return 0
	}
	return c.cfg.Spin
}

// Allreduce reduces send across ranks into recv (spec section 3.2). Workers
// send AllreduceSend (op byte + data); the coordinator reduces in rank order
// 0, 1, ..., R-1 and sends AllreduceRecv to every worker.
func (c *Comm) Allreduce(ctx context.Context, send, recv comm.View, op comm.ReduceOp) error {
	check := func() error {
		if err := comm.CheckAllreduce(send, recv, op); err != nil {
			return err
		}
		return frameLimit(comm.OpAllreduce, len(send.Bytes)+1)
	}
	return c.run(ctx, comm.OpAllreduce, check, func() error {
		if c.rank != 0 {
			c.opBytes[0] = byte(op)
			if err := c.up.writeFrame(TagAllreduceSend, c.opBytes[:1], send.Bytes); err != nil {
				return &linkError{peer: 0, err: err}
			}
			if err := c.up.awaitFrame(c.spin(len(recv.Bytes)), TagAllreduceRecv, recv.Bytes); err != nil {
				return &linkError{peer: 0, err: err}
			}
			return nil
		}
		n := len(send.Bytes)
		if c.size == 1 {
			copy(recv.Bytes, send.Bytes)
			return nil
		}
		c.opIn, c.opN = c.scratchBytes((c.size-1)*n), n
		for _, l := range c.workers {
			r := l.peer
			l.beginRead(TagAllreduceSend, [][]byte{c.opBytes[r : r+1], c.opIn[(r-1)*n : r*n]})
		}
		if err := c.gather(n + 1); err != nil {
			return err
		}
		for r := 1; r < c.size; r++ {
			if got := comm.ReduceOp(c.opBytes[r]); got != op {
				return &linkError{peer: r, err: fmt.Errorf("%w: rank %d called allreduce with %v, rank 0 with %v", ErrReduceOpMismatch, r, got, op)}
			}
		}
		copy(recv.Bytes, send.Bytes)
		for r := 1; r < c.size; r++ {
			comm.Reduce(send.Type, op, recv.Bytes, c.opIn[(r-1)*n:r*n])
		}
		c.opOne[0] = recv.Bytes
		return c.scatter(TagAllreduceRecv, c.opOne[:], -1)
	})
}

// scratchBytes returns n bytes of 8-byte-aligned scratch space.
func (c *Comm) scratchBytes(n int) []byte {
	words := (n + 7) / 8
	if cap(c.scratch) < words {
		c.scratch = make([]uint64, words)
	}
	return comm.ViewOf(c.scratch[:words]).Bytes[:n]
}

// Broadcast copies root's buf to every rank (spec section 3.3). Root 0
// sends Broadcast to every worker; a worker root sends Broadcast to the
// coordinator, which forwards it to every other worker.
func (c *Comm) Broadcast(ctx context.Context, buf comm.View, root int) error {
	check := func() error {
		if err := comm.CheckBroadcast(buf, root, c.size); err != nil {
			return err
		}
		return frameLimit(comm.OpBroadcast, len(buf.Bytes))
	}
	return c.run(ctx, comm.OpBroadcast, check, func() error {
		switch {
		case c.size == 1:
			return nil
		case c.rank == root && c.rank != 0:
			if err := c.up.writeFrame(TagBroadcast, nil, buf.Bytes); err != nil {
				return &linkError{peer: 0, err: err}
			}
			return nil
		case c.rank != 0:
			if err := c.up.awaitFrame(c.spin(len(buf.Bytes)), TagBroadcast, buf.Bytes); err != nil {
				return &linkError{peer: 0, err: err}
			}
			return nil
		}
		if root != 0 {
			if err := c.links[root].awaitFrame(c.spin(len(buf.Bytes)), TagBroadcast, buf.Bytes); err != nil {
				return &linkError{peer: root, err: err}
			}
		}
		c.opOne[0] = buf.Bytes
		return c.scatter(TagBroadcast, c.opOne[:], root)
	})
}

// Barrier returns once every rank has entered it (spec section 3.4):
// workers send BarrierReady; once the coordinator has all of them it sends
// BarrierGo to every worker.
func (c *Comm) Barrier(ctx context.Context) error {
	return c.run(ctx, comm.OpBarrier, func() error { return nil }, func() error {
		switch {
		case c.size == 1:
			return nil
		case c.rank != 0:
			if err := c.up.writeFrame(TagBarrierReady, nil); err != nil {
				return &linkError{peer: 0, err: err}
			}
			if err := c.up.awaitFrame(c.spin(0), TagBarrierGo); err != nil {
				return &linkError{peer: 0, err: err}
			}
			return nil
		}
		for _, l := range c.workers {
			l.beginRead(TagBarrierReady, nil)
		}
		if err := c.gather(0); err != nil {
			return err
		}
		return c.scatter(TagBarrierGo, nil, -1)
	})
}
