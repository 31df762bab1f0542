package star

import (
	"encoding/binary"
	"time"

	"github.com/starcomm/starcomm/comm"
)

// The streamed allreduce: how the coordinator reduces a large allreduce
// without holding every worker's contribution.
//
// An allreduce is reduced in rank order (rank 0's data, then rank 1's, and
// so on, element by element), so that a floating-point sum comes out the
// same on every run. Stored, that takes ·n bytes of scratch on rank 0
// for an allreduce of n bytes: every worker's whole contribution, read
// concurrently, then reduced. An allreduce whose ·n exceeds
// streamMin, of at least two chunks per rank, is instead reduced as it
// streams in: every worker link's goroutine reads its worker's payload in chunks
// (streamChunkSize bytes, element-aligned), into one of two chunk buffers
// of its own, and hands each filled chunk to the collective's goroutine,
// which takes chunk k of rank 1, 2, ..., R-1 in that order and reduces
// each into recv before it gives the buffer back. The result is the same,
// bit for bit, as the stored reduction's (the same operations on the same
// elements in the same order), and rank 0 needs 2·(R-1) chunk buffers
// instead of ·n: at most streamBudget in all, kept for the next
// streamed allreduce, up to 257 ranks; beyond, chunks of streamChunkMin,
// let go after each. (With fewer than two chunks per rank the buffers
// would take as much as the stored scratch.) On a failure, rank 0's recv
// holds what was reduced so far (the stored reduction leaves it as it was
// when the failure comes while reading).
//
// When every worker has a control session, the reply overlaps the
// reduction, as a relayed allgatherv's does (see relay.go): once every op
// byte is checked, each worker link's relay writer sends the
// AllreduceRecv frame, its header at once and each reduced chunk as soon
// as the last rank's part of it is in, so that rank 0's outgoing link
// works while its incoming ones do; and every worker writes its frame
// while it reads the reply (see worker.allreduce). Over a
// network an allreduce then takes about ·n on rank 0's link instead
// of twice that. A failure after the first reply bytes went out cuts
// those frames short, and the Abort goes on the control sessions, as in
// the relay. Without every session the replies follow the reduction.

// The wire is unchanged. Every worker's header is read and checked before
// any payload byte (a length mismatch fails as it does stored), and every
// worker's op byte before anything is reduced: an operator mismatch reads
// the rest of every payload without reducing it, so that the links end at
// a frame boundary as they do stored, and then fails naming the rank.
//
// What streaming changes is when rank 0 reads: a link whose two buffers
// wait for the reducer is not read until the reducer gets to them, which
// it does in rank order. So a worker's frame, and its reply, wait for rank
// 0's arrival and then for the lower ranks' data, where stored they wait
// for rank 0's arrival only (rank 0 then takes every frame at once). For
// that wait rank 0 tells every worker with a control session that it is
// here (msgHere) when every worker's header has not come within hereAfter
// of its own arrival, and such a worker moves its pending deadlines on to
// a timeout after rank 0's arrival (see link.hereExtend): as stored, a
// worker waits a timeout from rank 0's arrival, and rank 0 names a lower
// rank that does not come within a timeout of its own arrival. A worker
// without a control session (COBRE_TCP_LIVENESS_SECS=0, or in the first
// moments after start-up, while it opens) waits a timeout from its own
// arrival: in a streamed allreduce it fails, naming rank 0, if a lower
// rank comes more than a timeout after it, where the stored one would
// wait. A worker writes its frame, and reads its reply, in calls of at
// most a chunk (see link.wcallMax), and streamWrite sends each reduced
// chunk as soon as it is complete: a lower rank whose link stops several
// times, each within the timeout, delays the others without failing them.
// A worker that crashes while its link waits so is found when the
// reducer gets to it, or by its control session (liveness, and the loss of
// the session's connection), whichever comes first, not at once. Workers
// that are all there and all send keep every link moving: each link is
// read while the reducer works on the others. A frame's header counts as
// its arrival (stall reports and timeouts name the ranks whose frames have
// not begun).

// streamMin is the least ·n, in bytes, of an allreduce of n bytes
// per rank that the coordinator reduces as it streams in (see above).
// Below it the stored reduction's scratch is at most 64 MiB, kept for the
// next allreduces (see scratchKeep).
var streamMin = 64 << 20

// streamBudget bounds the chunk buffers of a streamed allreduce, two per
// worker link: streamChunkSize gives each at most streamBudget/(2·(R-1))
// bytes, within [streamChunkMin, streamChunkMax].
const (
	streamBudget   = 32 << 20
	streamChunkMin = 64 << 10
	streamChunkMax = 1 << 20
)

// streamChunkFixed, when positive, overrides streamChunkSize (tests: many
// chunks from a small allreduce). A multiple of 8.
var streamChunkFixed int

// streamChunkSize is the chunk of a streamed allreduce with the given
// number of worker links: a multiple of 4096 (so of every element size).
func streamChunkSize(workers int) int {
	if streamChunkFixed > 0 {
		return streamChunkFixed
	}
	c := streamBudget / (2 * max(workers, 1))
	return min(max(c, streamChunkMin), streamChunkMax) &^ 4095
}

// streams reports whether an allreduce of n bytes per rank is streamed.
func (co *coordinator) streams(n int) bool { return streams(len(co.workers), n) }

// streams reports whether the coordinator streams an allreduce of n bytes
// per rank with the given number of workers: its ·n exceeds
// streamMin, and n two chunks (below that, the chunk buffers would take
// as much as the stored scratch).
func streams(workers, n int) bool {
	if workers == 0 || n <= streamMin/workers {
		return false
	}
	// (Tests that fix the chunk stream the smallest allreduces too.)
	return streamChunkFixed > 0 || n > 2*streamChunkSize(workers)
}

// streamState is the part of a streamed allreduce that its readers share.
type streamState struct {
	stop   chan struct{} // closed when the collective fails: readers stop
	closed bool          // stop is closed (the next one needs a new one)
}

// streamBufs readies l's two chunk buffers of size bytes for a streamed
// allreduce: both free, none handed over. Only the collective's goroutine
// calls it, while no reader runs.
func (l *link) streamBufs(size int) {
	if l.sfree == nil {
		l.sfree = make(chan []byte, 2)
		l.sready = make(chan []byte, 2)
	}
	l.takeStreamBufs()
	for i := range l.sbuf {
		if len(l.sbuf[i]) != size {
			// 8-byte aligned, as comm.Reduce wants its elements.
			l.sbuf[i] = comm.ViewOf(make([]uint64, size/8)).Bytes
		}
		l.sfree <- l.sbuf[i]
	}
}

// dropStreamBufs lets l's chunk buffers go. Only the collective's
// goroutine calls it, while no reader runs.
func (l *link) dropStreamBufs() {
	l.takeStreamBufs()
	l.sbuf = [2][]byte{}
}

// takeStreamBufs empties l's chunk channels (a failed collective may have
// left buffers in them).
func (l *link) takeStreamBufs() {
	for {
		select {
		case <-l.sfree:
			continue
		case <-l.sready:
			continue
		default:
		}
		return
	}
}

// allreduceStreamed runs an allreduce as described above.
func (co *coordinator) allreduceStreamed(send, recv comm.View, op comm.ReduceOp) error {
	n := len(send.Bytes)
	seq := co.c.seq
	for _, l := range co.workers {
		// recv stands in for the payload's length; nothing is read into it.
		r := l.peer
		l.beginRead(TagAllreduceSend, [][]byte{co.opBytes[r : r+1], recv.Bytes})
	}
	co.expectHeaders(seq)
	err := co.fan(co.workers, request{kind: reqHeader}, true)
	co.doneHeaders()
	for _, l := range co.workers {
		l.endRead()
	}
	if err != nil {
		return err
	}
	// Every frame has arrived (what is left of it waits for the lower
	// ranks' data, not for its sender): stall reports and timeouts name
	// only the ranks still to come.
	for _, l := range co.workers {
		l.arrive(seq)
	}
	st := &co.st
	if st.stop == nil || st.closed {
		st.stop, st.closed = make(chan struct{}), false
	}
	size := streamChunkSize(len(co.workers))
	for _, l := range co.workers {
		l.streamBufs(size)
	}
	if 2*len(co.workers)*size > streamBudget {
		// Beyond 257 ranks the chunks (at least streamChunkMin) take
		// more than the budget: they are not kept.
		defer func() {
			for _, l := range co.workers {
				l.dropStreamBufs()
			}
		}()
	}
	// The replies overlap the reduction when every worker has a control
	// session, which carries the Abort if a failure cuts them short;
	// otherwise they follow it.
	overlap := co.allHaveControl()
	rs := &co.rs
	if overlap {
		co.one[0] = recv.Bytes
		rs.reset(co.one[:])
		rs.publish(0, 0) // nothing reduced yet
		defer rs.clear()
		for _, l := range co.workers {
			l.relayReading.Store(true)
		}
	}
	co.c.hook(hookStream)
	for _, l := range co.workers {
		co.c.hook(hookHandoff)
		l.reqs <- request{kind: reqStreamRead, n: n}
	}
	pending := len(co.workers)
	var first error
	cut := false // a reader failed: no more chunks come
	// take records a link's result (a reader's or a writer's).
	take := func(res result) {
		co.c.hook(hookResult)
		pending--
		l := co.byRank[res.peer]
		switch {
		case res.err == nil && res.write:
			l.deliver(seq, time.Now())
		case res.err == nil:
			l.arrive(seq) // a reader: its last chunks wait in sready
		default:
			if first == nil {
				first = &linkError{peer: res.peer, err: res.err}
			}
			// A writer's failure is its worker's alone (the others get
			// their whole result, as in the relay); a reader's ends the
			// reduction.
			if !res.write && !cut {
				cut = true
				st.closed = true
				close(st.stop)
				if overlap {
					rs.fail()
				}
				for _, o := range co.workers {
					if o.peer != res.peer {
						o.cancel(errCut)
					}
				}
			}
		}
	}
	// next returns l's next chunk, or false once a reader failed.
	next := func(l *link) ([]byte, bool) {
		for !cut {
			select {
			case b := <-l.sready:
				return b, true
			case res := <-co.results:
				take(res)
			}
		}
		return nil, false
	}
	copy(recv.Bytes, send.Bytes)
	var mismatch error
	held := co.todo[:0] // chunk 0 of every worker, until the op bytes are checked
	firsts := co.firsts[:0]
	for lo := 0; lo < n && !cut; lo += size {
		hi := min(n, lo+size)
		if lo == 0 {
			firsts = firsts[:0]
			for _, l := range co.workers {
				b, ok := next(l)
				if !ok {
					break
				}
				held = append(held, l)
				firsts = append(firsts, b)
			}
			if cut {
				break
			}
			for _, l := range co.workers {
				if comm.ReduceOp(co.opBytes[l.peer]) != op {
					mismatch = co.opMismatch(op)
					break
				}
			}
			for i, l := range held {
				if mismatch == nil {
					comm.Reduce(send.Type, op, recv.Bytes[:hi], firsts[i])
				}
				l.sfree <- firsts[i]
			}
			clear(firsts)
			held = held[:0]
			if overlap && mismatch == nil {
				// Every op byte is checked: the replies may begin.
				rs.publish(0, hi)
				co.c.hook(hookReply)
				for _, l := range co.workers {
					co.c.hook(hookHandoff)
					l.wreqs <- request{kind: reqStreamWrite}
					pending++
				}
			}
			continue
		}
		for _, l := range co.workers {
			b, ok := next(l)
			if !ok {
				break
			}
			if mismatch == nil {
				comm.Reduce(send.Type, op, recv.Bytes[lo:hi], b)
			}
			l.sfree <- b
		}
		if overlap && mismatch == nil && !cut {
			rs.publish(0, hi)
		}
	}
	co.todo, co.firsts = held[:0], firsts[:0]
	for pending > 0 {
		take(<-co.results)
	}
	if first != nil {
		return first
	}
	if mismatch != nil {
		return mismatch
	}
	if overlap {
		return nil // every worker has its whole reply
	}
	co.one[0] = recv.Bytes
	return co.scatter(TagAllreduceRecv, co.one[:], -1)
}

// hereAfter is how long the coordinator waits for every worker's header
// of a streamed allreduce or relayed allgatherv before it tells the
// workers that it is here (msgHere; see link.hereExtend): a wait that
// short costs no worker its timeout, and collectives whose ranks come
// together send nothing.
func hereAfter(timeout time.Duration) time.Duration { return min(timeout/10, 100*time.Millisecond) }

// expectHeaders starts the wait for every worker's header of collective
// seq: if it lasts hereAfter, the workers are told (see sayHere).
// doneHeaders ends it. The timer is made once and reused.
func (co *coordinator) expectHeaders(seq uint64) {
	co.hereSeq.Store(seq)
	co.hereStart.Store(monoNow())
	if co.hereTimer == nil {
		co.hereTimer = time.AfterFunc(hereAfter(co.c.cfg.Timeout), co.sayHere)
		return
	}
	co.hereTimer.Reset(hereAfter(co.c.cfg.Timeout))
}

// doneHeaders ends the wait that expectHeaders started.
func (co *coordinator) doneHeaders() { co.hereTimer.Stop() }

// sayHere tells every worker on its control session that this rank has
// begun the collective whose headers it waits for, and how long ago (see
// link.hereExtend). It runs on its timer's goroutine; each send is bounded
// by hereAfter.
func (co *coordinator) sayHere() {
	var body [16]byte
	binary.BigEndian.PutUint64(body[:8], co.hereSeq.Load())
	binary.BigEndian.PutUint64(body[8:], uint64(max(monoNow()-co.hereStart.Load(), 0)))
	// A worker that cannot take the word within hereAfter (its process
	// frozen) would hold up the Aborts behind it on its session.
	until := time.Now().Add(hereAfter(co.c.cfg.Timeout))
	for _, l := range co.workers {
		if ctl := l.ctl.Load(); ctl != nil {
			ctl.goUnlessStopped(func() { _ = ctl.send(msgHere, body[:], until) })
		}
	}
}

// allHaveControl reports whether every worker has a control session, which
// carries the Abort when a failure cuts a reply frame short, and rank 0's
// word that it is here (see sayHere).
func (co *coordinator) allHaveControl() bool {
	for _, l := range co.workers {
		if l.ctl.Load() == nil {
			return false
		}
	}
	return len(co.workers) > 0
}

// streamWrite sends worker l the AllreduceRecv frame of an overlapped
// streamed allreduce: the header and each reduced chunk as soon as it is
// complete (see relayState; region 0 is recv).
func (co *coordinator) streamWrite(l *link) error {
	rs := &co.rs
	rs.mu.Lock()
	p := rs.parts[0]
	rs.mu.Unlock()
	PutHeader(l.whdr[:], TagAllreduceRecv, len(p))
	l.wdirty = true
	l.wordsLater = false
	var one [1][]byte
	hdr := l.whdr[:HeaderSize]
	// Each reduced chunk goes as soon as it is complete, whatever its size:
	// the reply then moves whenever the reduction does, and a worker,
	// which reads it in calls of at most a chunk (see worker.allreduce),
	// sees it move as rank 0 sees the lower ranks' data move. (Pieces of
	// relayStep, four chunks of 64 KiB at R = 257, made a worker wait
	// through several of rank 0's waits on a slow lower rank at once, and
	// time out naming rank 0.)
	step := min(relayStep, streamChunkSize(len(co.workers)))
	for sent := 0; sent < len(p); {
		have, ok := rs.wait(0, min(len(p), sent+step))
		if !ok {
			return errCut
		}
		one[0] = p[sent:have]
		var err error
		if sent == 0 {
			// The frame is over alignedStageMax: its header goes spliced
			// apart, or it starts with a lead (see writeLong).
			err = l.writeLong(hdr, one[:])
		} else {
			err = l.writeGathered(nil, one[:])
		}
		if err != nil {
			return co.lastWordsAfterRead(l, err)
		}
		sent = have
	}
	l.wdirty = false
	return nil
}

// streamRead is a streamed allreduce's reader of link l (its header has
// been read and checked): it reads the op byte into co.opBytes, then the
// n data bytes in chunks, each into a buffer taken from l.sfree and handed
// to the reducer through l.sready. l's relay writer may be writing
// meanwhile (l.relayReading is set; it clears it).
func (co *coordinator) streamRead(l *link, n int) (err error) {
	stop := co.st.stop
	// The read side is free once this returns: a writer that failed
	// meanwhile may then read the worker's last words.
	defer func() { co.rs.doneReading(l, err == nil) }()
	if err := l.readFull(co.opBytes[l.peer:l.peer+1], 0); err != nil {
		return unexpectedEOF(err)
	}
	defer l.endLowWater()
	for left := n; left > 0; {
		var b []byte
		select {
		case b = <-l.sfree:
		case <-stop:
			return errCut
		}
		b = b[:min(len(b), left)]
		if err := l.readFull(b, left); err != nil {
			return unexpectedEOF(err)
		}
		left -= len(b)
		select {
		case l.sready <- b:
		case <-stop:
			return errCut
		}
	}
	return nil
}
