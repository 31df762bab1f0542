package star

import (
	"sync"
	"sync/atomic"
	"time"
)

// The relay: how the coordinator runs a large allgatherv.
//
// A star's coordinator must send every worker the whole assembled buffer:
// times R regions over its one link. Stored and forwarded, that
// comes after it has received the R-1 workers' regions, so where the
// network is the limit an allgatherv takes (R-1)(R+1) region times
// instead of the (R-1)R that its outgoing link needs, 80% of the link's
// speed at R = 4. The relay overlaps the two, as the link is full duplex:
// once every worker's AllgathervSend header has arrived and been checked
// (tag and length, so that a mismatch fails the collective before any
// AllgathervRecv starts, with an Abort at a frame boundary as ever), each
// worker link whose region is not in yet gets a reader, which reads the
// rest of the region into recv and publishes how much of it has arrived,
// and every worker link gets a writer, which sends that
// worker the AllgathervRecv frame: the header, rank 0's region at once,
// then each other region in rank order as fast as it arrives. The wire is
// unchanged: the same frames, the same bytes.
//
// A failure of a reader (a worker that crashes, hangs or is cut off in
// the middle of its region) cancels every link: the AllgathervRecv frames
// are cut short mid-frame, so no Abort can follow them on the data links.
// The control sessions carry it instead (out of band, first; the data
// links then wait for the workers to close them). That is why only a
// coordinator whose every worker has a control session relays: without
// one, a worker would wait for the rest of its frame until its timeout and
// then blame rank 0. A writer's failure (a worker gone after it sent its
// region) is that worker's alone: the others get their whole result, as in
// any scatter; once a worker's region is in, its writer reads the worker's
// last words (an Abort it sent before it closed) like any failed write (a
// writer that failed while the link's reader was still reading the region
// waits for it to end first, see lastWordsAfterRead).
//
// An allgatherv whose result is smaller than relayMin is stored and
// forwarded (gather, then scatter, with polling for small frames): below
// that size the copies, not the link, bound it, and the relay's extra
// goroutine hand-offs would only cost. So is one of any size whose workers
// are all on rank 0's host (see allOnHost): there the copies bound every
// size.
//
// A relayed allgatherv whose regions are small enough to poll (pollMax)
// is first polled like a stored and forwarded one, for at most relayPoll:
// when every region is in by then (the workers share the host, or the
// network outruns rank 0), it is stored and forwarded after all, and
// otherwise the relay starts from what has arrived. On one host the relay
// cannot overlap anything (its writers' copies take the CPU its readers
// need) and its hand-offs come on top; across hosts relayPoll is a small
// part of an allgatherv that the link bounds.

// relayMin is the smallest AllgathervRecv payload, in bytes, that the
// coordinator relays.
const relayMin = 1 << 20

// relayPoll is the longest the coordinator polls the frames of a relayed
// allgatherv (see above) before it relays: at R = 8 on one host
// (2 cores) the 200 KB frames of allgatherv-cuts took 0.53 to 0.56 ms to
// gather (median), and across hosts 1 ms is 1% of what the link needs
// for that allgatherv at 1 Gbit/s (rank 0 sends 11 MB).
const relayPoll = time.Millisecond

// relayStep is the least a writer sends at once while a region is still
// arriving (the rest of the region, if less): small enough to follow the
// reader closely, large enough that the writes stay few.
const relayStep = 256 << 10

// relayState is what the readers of one relayed allgatherv publish to the
// writers.
type relayState struct {
	mu     sync.Mutex
	cond   sync.Cond
	parts  [][]byte // the regions, in rank order (rank 0's is complete)
	avail  []int    // how many bytes of each region have arrived
	failed bool     // a reader failed: writers stop
}

// reset prepares the state for an allgatherv of parts.
func (rs *relayState) reset(parts [][]byte) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.cond.L == nil {
		rs.cond.L = &rs.mu
	}
	rs.parts = parts
	rs.avail = rs.avail[:0]
	for range parts {
		rs.avail = append(rs.avail, 0)
	}
	rs.avail[0] = len(parts[0])
	rs.failed = false
}

// clear forgets the caller's buffers once the collective is over.
func (rs *relayState) clear() {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.parts = nil
}

// publish records that region r has n bytes.
func (rs *relayState) publish(r, n int) {
	rs.mu.Lock()
	rs.avail[r] = n
	rs.mu.Unlock()
	rs.cond.Broadcast()
}

// fail tells the writers to stop.
func (rs *relayState) fail() {
	rs.mu.Lock()
	rs.failed = true
	rs.mu.Unlock()
	rs.cond.Broadcast()
}

// doneReading marks the end of l's reader (its read side is free again),
// complete when it read the whole region, and wakes a writer waiting for
// it (see lastWordsAfterRead).
func (rs *relayState) doneReading(l *link, complete bool) {
	rs.mu.Lock()
	l.relayRegionIn = complete
	l.relayReading.Store(false)
	rs.mu.Unlock()
	rs.cond.Broadcast()
}

// wait returns how many bytes of region r have arrived once at least want
// have (or the whole region), or false when a reader failed.
func (rs *relayState) wait(r, want int) (int, bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for !rs.failed && rs.avail[r] < want {
		rs.cond.Wait()
	}
	return rs.avail[r], !rs.failed
}

// relays reports whether an allgatherv of parts is relayed: it is large
// enough, some worker is not on this host (see allOnHost), and every
// worker has a control session, which carries the Abort if the relay must
// cut the frames short (without one, a worker would only learn that rank 0
// stopped in the middle of a frame, at its timeout).
func (co *coordinator) relays(parts [][]byte) bool {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	return n >= relayMin && !co.allOnHost() && co.allHaveControl()
}

// relayOnHost, set by tests before they build communicators, relays the
// large allgathervs of workers on this host too (see allOnHost), so that
// the relay is tested over TCP on one host.
var relayOnHost atomic.Bool

// allOnHost reports whether every worker is known to be on this host
// (transport.HostLocal). Such an allgatherv is stored and forwarded
// whatever its size: on one host no link is slower than the copies, so
// the relay has no idle link to keep busy, and its hand-offs and
// concurrent copies only take the CPU. On 2 cores of an AMD EPYC (family
// 26, model 2) storing and forwarding took 0.87x to 0.89x the time of
// the relay for allgatherv-cuts at R = 8 (1.6 MB) and 0.92x for
// sddp-iteration, 0.91x to 0.92x for allgatherv-16MiB at R = 4, and the
// same time for the other sizes.
func (co *coordinator) allOnHost() bool {
	if relayOnHost.Load() {
		return false
	}
	for _, l := range co.workers {
		if !l.onHost {
			return false
		}
	}
	return len(co.workers) > 0
}

// relay runs an allgatherv of parts (rank 0's region already in place) as
// described above.
func (co *coordinator) relay(parts [][]byte) error {
	seq := co.c.seq
	most := 0
	for _, l := range co.workers {
		l.beginRead(TagAllgathervSend, parts[l.peer:l.peer+1])
		most = max(most, len(parts[l.peer]))
	}
	// The links still to read once polling is over (co.todo: scratch).
	readers := append(co.todo[:0], co.workers...)
	if spin := co.c.spin(most); co.polled && spin > 0 {
		co.c.hook(hookPoll)
		done, bad, err := pollLinks(spin, min(relayPoll, co.c.cfg.Timeout), readers...)
		for _, l := range readers[:done] {
			l.arrive(seq)
		}
		if err != nil {
			return &linkError{peer: bad.peer, err: err}
		}
		if done == len(readers) {
			return co.scatter(TagAllgathervRecv, parts, -1) // all in: store and forward
		}
		readers = readers[done:]
	}
	co.c.hook(hookRelay)
	// Every header first, checked: until then nothing is written, and a
	// mismatch fails like any other.
	// A worker's region waits for every rank's header: a wait that lasts
	// is told to the workers (see expectHeaders).
	co.expectHeaders(seq)
	err := co.fan(readers, request{kind: reqHeader}, true)
	co.doneHeaders()
	if err != nil {
		return err
	}
	rs := &co.rs
	rs.reset(parts)
	defer rs.clear()
	for _, l := range co.workers {
		rs.avail[l.peer] = len(parts[l.peer]) // polled in whole, unless it has a reader
	}
	for _, l := range readers {
		rs.avail[l.peer] = l.roff // what polling read of it (its one part)
	}
	// Every region's progress is set before any reader or writer starts.
	for _, l := range readers {
		l.relayReading.Store(true)
		co.c.hook(hookHandoff)
		l.reqs <- request{kind: reqRelayRead}
	}
	for _, l := range co.workers {
		co.c.hook(hookHandoff)
		l.wreqs <- request{kind: reqRelayWrite}
	}
	var first error
	cut := false
	for range len(readers) + len(co.workers) {
		res := <-co.results
		co.c.hook(hookResult)
		l := co.byRank[res.peer]
		switch {
		case res.err == nil && res.write:
			l.deliver(seq, time.Now())
		case res.err == nil:
			l.arrive(seq)
		default:
			if first == nil {
				first = &linkError{peer: res.peer, err: res.err}
			}
			if !res.write && !cut {
				// A region will never be complete: stop every reader
				// and writer (the first failure is the one reported).
				cut = true
				rs.fail()
				for _, o := range co.workers {
					o.cancel(errCut)
				}
			}
		}
	}
	return first
}

// relayRead reads the payload of the worker's region (its header has been
// read and checked) and publishes its progress after every read.
func (co *coordinator) relayRead(l *link) error {
	p := l.rparts[0]
	have := l.roff // what polling read before the relay began
	// Each read is armed as readFull arms a stored frame's: over a
	// transport.LowWaterReader (TCP), every read; otherwise once for
	// every chunk, which must all arrive before that deadline. A worker
	// reads its reply so, a chunk under one deadline (plus its reply
	// margin): a reader that gave the peer a fresh timeout after every
	// read let a rank that sent slowly and then hung outlast the
	// workers' deadlines, and every worker then named rank 0.
	end := have // the end of the chunk armed last
	for have < len(p) {
		if have >= end || l.lw != nil {
			if err := l.arm(false); err != nil {
				l.endRead()
				co.rs.doneReading(l, false)
				return unexpectedEOF(err)
			}
			end = min(len(p), have+chunk)
		}
		n, err := l.conn.Read(p[have:end])
		if n > 0 {
			have += n
			l.rfix, l.rfixMoved = time.Time{}, false // it moved: fresh deadlines again (see link.moving)
			co.rs.publish(l.peer, have)
		}
		if err != nil && have < len(p) {
			if l.late(err) {
				end = have // on under a fresh deadline
				continue
			}
			l.endRead()
			co.rs.doneReading(l, false)
			return unexpectedEOF(l.ioErr(err, false))
		}
	}
	// The read side is free: a writer that fails from now on, or failed
	// while this read, may read the worker's last words (an Abort it sent
	// before it closed).
	l.endRead()
	co.rs.doneReading(l, true)
	return nil
}

// relayWrite sends the worker the whole AllgathervRecv frame, each region
// as fast as it arrives.
func (co *coordinator) relayWrite(l *link) error {
	rs := &co.rs
	rs.mu.Lock()
	parts := rs.parts
	rs.mu.Unlock()
	total := 0
	for _, p := range parts {
		total += len(p)
	}
	PutHeader(l.whdr[:], TagAllgathervRecv, total)
	l.wdirty = true
	l.wordsLater = false
	var one [1][]byte
	one[0] = parts[0]
	// The frame is over alignedStageMax (relayMin): its header goes
	// spliced apart (see writeApart) or, where the link cannot splice, it
	// starts with a lead; every later piece is written straight from the
	// regions, which continue it in memory as on the wire (staging them
	// would cost a copy per link of every region: at R = 8, rank 0's
	// memmove in an allgatherv-cuts profile fell from 1398 to 347 samples
	// without it).
	if err := l.writeLong(l.whdr[:HeaderSize], one[:]); err != nil {
		return co.lastWordsAfterRead(l, err)
	}
	for r := 1; r < len(parts); r++ {
		p := parts[r]
		for sent := 0; sent < len(p); {
			have, ok := rs.wait(r, min(len(p), sent+relayStep))
			if !ok {
				return errCut
			}
			one[0] = p[sent:have]
			if err := l.writeGathered(nil, one[:]); err != nil {
				return co.lastWordsAfterRead(l, err)
			}
			sent = have
		}
	}
	l.wdirty = false
	return nil
}

// lastWordsAfterRead returns the error of a relay writer's failed write to
// l. A write that failed because the worker is gone while l's reader was
// still reading its region (ioErr then left the read side alone, see
// link.wordsLater) waits for that reader to end, which it soon does (what
// the worker sent is in the receive buffer, or the reader fails too), and
// then reads the worker's last words: a worker that sees rank 0's reply is
// wrong sends its Abort and may exit at once, while rank 0 still writes
// the rest of the reply and reads its region. Without this, rank 0 and
// through it every worker reported a broken pipe instead of the worker's
// reason.
func (co *coordinator) lastWordsAfterRead(l *link, err error) error {
	if !l.wordsLater {
		return err
	}
	co.c.hook(hookWords)
	rs := &co.rs
	rs.mu.Lock()
	for l.relayReading.Load() && !rs.failed {
		rs.cond.Wait()
	}
	failed, in := rs.failed, l.relayRegionIn
	rs.mu.Unlock()
	if failed || !in {
		// A reader failed (every link is being cut), or this one, in
		// the middle of the region: what follows is no frame boundary.
		return err
	}
	if ab := l.lastWords(); ab != nil {
		return ab
	}
	return err
}

// writeServe runs link l's relay writes (and a streamed allreduce's
// overlapped replies) until its channel closes.
func (co *coordinator) writeServe(l *link) {
	defer co.serving.Done()
	for req := range l.wreqs {
		var err error
		if req.kind == reqStreamWrite {
			err = co.streamWrite(l)
		} else {
			err = co.relayWrite(l)
		}
		co.c.hook(hookServed)
		co.results <- result{peer: l.peer, err: err, write: true}
	}
}
