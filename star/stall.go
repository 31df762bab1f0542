package star

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/starcomm/starcomm/comm"
)

// The coordinator knows, for every collective, which workers' frames have
// arrived and which workers have taken the result, and when each worker
// last finished a collective. While a collective waits longer than
// Config.StallReport it logs that, repeating every StallReport; it looks
// every StallReport/4, so the first report comes between StallReport and
// 1.25 StallReport into the wait:
//
//	allgatherv #57 waiting 33.214s for ranks [3] (0,1,2 arrived); rank 3 alive, last finished #56 33.215s ago; every rank waited for is alive and finished the collective before: unless it computes this long, it waits in another collective (the ranks called different collectives; COBRE_DEBUG=detail, or Config.CheckCollectives, names the rank that differs)
//
// (the part after "ago" whenever every rank waited for is alive and
// finished the collective before, unless CheckCollectives is on), and
// when the collective timeout fires, the error says the same. The
// bookkeeping is a few atomic stores per link per collective.

// atomicSeq is a collective's number, shared with the stall monitor.
type atomicSeq = atomic.Uint64

// atomicTime is a time shared with the stall monitor.
type atomicTime struct{ ns atomic.Int64 }

func (t *atomicTime) Store(v time.Time) { t.ns.Store(v.UnixNano()) }
func (t *atomicTime) Load() time.Time   { return time.Unix(0, t.ns.Load()) }

// progress is a link's part of the bookkeeping, on the coordinator.
type progress struct {
	arrived atomicSeq // the last collective whose frame from the worker arrived
	// headed is the last collective whose frame's header arrived, in a
	// relayed allgatherv or a streamed allreduce, which take the rest of
	// every frame only once every header is in: until then a worker
	// whose header is in is not waited for.
	headed atomicSeq
	done   atomicSeq // the last collective the worker took the result of
	doneAt atomicTime
}

// arrive records that l's frame of collective seq arrived.
func (l *link) arrive(seq uint64) { l.prog.arrived.Store(seq) }

// head records that the header of l's frame of collective seq arrived.
func (l *link) head(seq uint64) { l.prog.headed.Store(seq) }

// deliver records that l's worker has the result of collective seq.
func (l *link) deliver(seq uint64, now time.Time) {
	l.prog.done.Store(seq)
	l.prog.doneAt.Store(now)
}

// busyEvery is how often a coordinator still in a collective tells
// workers so (msgBusy, see busyMonitor):
// min(timeout/4, 1 s), at least 1 ms. A worker's deadline, moved to a
// timeout after each word, then stays at least three quarters of a
// timeout ahead.
func busyEvery(timeout time.Duration) time.Duration {
	return max(min(timeout/4, time.Second), time.Millisecond)
}

// busyMonitor tells, every busyEvery until stopped, once the running
// collective has lasted busyEvery, the workers with a control session
// that this rank is still in it (msgBusy; see link.busyExtend):
//   - those that have its whole result, which may already wait in their
//     next collective for this rank while it still sends the result to a
//     slower rank;
//   - every worker, while this rank has let a call go on past its
//     deadline within the last two timeouts because its link still moved
//     (link.slowWrite, link.moving; the first such call sends the word at
//     once), or while one of its links moved bytes within the last
//     timeout (linksMoving): this rank then waits longer than a timeout
//     for a slow rank (one still taking the previous collective's result,
//     or whose data a streamed allreduce takes as slowly as it comes),
//     and the workers that wait in the collective for their reply, or for
//     this rank to take their frame, must not time out first. A worker
//     that has not begun the collective ignores the word.
//
// This rank's own deadlines bound the collective, and a rank that makes no
// progress for a timeout fails it, named: the word keeps the waiting
// workers from timing out first, naming rank 0. A frozen rank 0 sends
// nothing, and one whose links stop moving stops telling the workers in
// the collective within two timeouts: they time out as before.
func (co *coordinator) busyMonitor() {
	every := busyEvery(co.c.cfg.Timeout)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-co.quit:
			return
		case now := <-tick.C:
			co.sayBusy(now, every, false)
		case <-co.movedPast:
			co.sayBusy(time.Now(), every, true)
		}
	}
}

// sayBusy sends msgBusy for the running collective, if it has lasted
// every (or kicked: a call just went on past its deadline), to the workers
// that busyMonitor describes.
func (co *coordinator) sayBusy(now time.Time, every time.Duration, kicked bool) {
	seq, _, start, running := co.c.current()
	if !running || !kicked && now.Sub(start) < every {
		return
	}
	last := co.movedAt.Load()
	all := last != 0 && now.Sub(monoTime(last)) < 2*co.c.cfg.Timeout || co.linksMoving()
	co.tellBusy(seq, now.Add(every), all, true)
}

// tellBusy sends msgBusy for collective seq, moving deadlines to until,
// to every worker with a control session (all) or to those done with seq;
// with word, it records the time of the word (lastWord) as it sends the
// first. The sends run on the sessions' own goroutines.
func (co *coordinator) tellBusy(seq uint64, until time.Time, all, word bool) {
	var body []byte // one per word: its sends may outlive the caller
	for _, l := range co.workers {
		ctl := l.ctl.Load()
		if ctl == nil || !all && l.prog.done.Load() != seq {
			continue
		}
		if body == nil {
			body = binary.BigEndian.AppendUint64(make([]byte, 0, 8), seq)
			if word {
				co.lastWord.Store(monoNow())
			}
		}
		ctl.goUnlessStopped(func() { _ = ctl.send(msgBusy, body, until) })
	}
}

// busyEdge keeps a run of busy words (see busyMonitor) unbroken across
// the edge between two collectives: when this rank has told workers it
// was busy within the last timeout, it tells every worker again as
// collective seq ends (a worker already waiting in its next collective
// moves its deadlines on to a worker's timeout after the word) and,
// through busyMonitor, as the next begins (which the monitor would
// otherwise tell only busyEvery to 2 busyEvery later), when that is within
// a worker's timeout (the timeout and replyMargin) of the word at the end
// or within a timeout of the last word of the monitor. A rank 0 that
// computes between the two for less than a timeout is then not failed by
// the workers that wait for it: without the words at the edges they heard
// nothing for up to the compute and two busyEvery (2.8 s with a 2 s
// timeout and 1.8 s of compute). The end's word counts for the beginning
// but does not start a run of its own: a run ends once the monitor stops
// telling. It runs on the collective's goroutine (with stateMu held as a
// collective begins).
func (co *coordinator) busyEdge(seq uint64, begin bool) {
	t := co.c.cfg.Timeout
	last := co.lastWord.Load()
	if last == 0 {
		return // no run of words yet: the fast path reads no clock
	}
	now := monoNow()
	if begin {
		if !within(last, now, t) && !within(co.edgeWord.Load(), now, t+replyMargin(t)) {
			return
		}
		select {
		case co.movedPast <- struct{}{}:
		default:
		}
		return
	}
	if !within(last, now, t) {
		return
	}
	co.edgeWord.Store(now)
	co.tellBusy(seq, time.Now().Add(busyEvery(t)), true, false)
}

// within reports whether the monoNow time at was set and is less than d
// before the monoNow time now.
func within(at, now int64, d time.Duration) bool {
	return at != 0 && time.Duration(now-at) < d
}

// linksMoving reports whether a worker's link moved bytes within the last
// timeout (transport.AckReporter: data came, or data went and was
// acknowledged): this rank is then at work in the collective, waiting for
// a slow link (a streamed allreduce whose lower rank's data comes slowly
// takes the others' frames only as fast). One system call per link, only
// while a collective lasts busyEvery or more.
func (co *coordinator) linksMoving() bool {
	t := co.c.cfg.Timeout
	for _, l := range co.workers {
		if l.ar == nil {
			continue
		}
		if ack, err := l.ar.Acks(); err == nil && (ack.SinceReceived < t || ack.SinceSent < t && ack.SinceAcked < t) {
			return true
		}
	}
	return false
}

// linkMoved records that a call on one of this rank's links went on past
// its deadline because the link still moved (see link.onMoved), and wakes
// busyMonitor. It takes no lock.
func (co *coordinator) linkMoved() {
	co.movedAt.Store(monoNow())
	select {
	case co.movedPast <- struct{}{}:
	default:
	}
}

// stallMonitor logs stalls until stopped.
func (co *coordinator) stallMonitor() {
	every := co.c.cfg.StallReport
	tick := time.NewTicker(max(every/4, time.Millisecond))
	defer tick.Stop()
	var reported uint64      // the collective last reported
	var reportedAt time.Time // when
	for {
		select {
		case <-co.quit:
			return
		case now := <-tick.C:
			seq, op, start, running := co.c.current()
			if !running || now.Sub(start) < every || (seq == reported && now.Sub(reportedAt) < every) {
				continue
			}
			reported, reportedAt = seq, now
			co.c.log(slog.LevelWarn, "collective stalled", "report", co.stall(seq, op, start, now, "waiting"))
		}
	}
}

// current returns the running collective's number, name and start.
func (c *Comm) current() (seq uint64, op string, start time.Time, running bool) {
	c.stateMu.Lock()
	defer c.stateMu.Unlock()
	return c.seq, c.op, c.opStart, c.running
}

// stall describes what collective seq (op, begun at start) is waiting
// for at now: the workers whose frame has not arrived, or, once all have,
// those that have not taken the result, with how each is.
func (co *coordinator) stall(seq uint64, op string, start, now time.Time, verb string) string {
	var missing, there []int
	phase := "arrived"
	// A worker whose header is in waits for the others' (see
	// progress.headed): while some are missing, those are waited for.
	for _, l := range co.workers {
		if l.prog.arrived.Load() != seq && l.prog.headed.Load() != seq {
			missing = append(missing, l.peer)
		}
	}
	if len(missing) == 0 {
		for _, l := range co.workers {
			if l.prog.arrived.Load() != seq {
				missing = append(missing, l.peer)
			}
		}
	}
	if len(missing) == 0 {
		phase = "took the result"
		for _, l := range co.workers {
			if l.prog.done.Load() != seq {
				missing = append(missing, l.peer)
			}
		}
	}
	in := map[int]bool{}
	for _, r := range missing {
		in[r] = true
	}
	for r := 0; r < co.c.size; r++ {
		if !in[r] {
			there = append(there, r)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s #%d %s %v for ranks %s", op, seq, verb, now.Sub(start).Round(time.Millisecond), comm.FormatRanks(missing))
	if phase == "took the result" {
		b.WriteString(" to take the result")
	}
	fmt.Fprintf(&b, " (%s %s)", joinRanks(there), phase)
	// caughtUp: every missing rank is alive and finished the collective
	// before (all of them, not only those written out).
	caughtUp := phase == "arrived" && !co.c.cfg.CheckCollectives
	for _, r := range missing {
		l := co.byRank[r]
		ctl := l.ctl.Load()
		caughtUp = caughtUp && ctl != nil && ctl.alive(now) == "alive" && l.prog.done.Load()+1 == seq
	}
	for i, r := range missing {
		if i == comm.MaxRanksItems {
			fmt.Fprintf(&b, "; and %d more ranks", len(missing)-i)
			break
		}
		l := co.byRank[r]
		fmt.Fprintf(&b, "; rank %d ", r)
		if ctl := l.ctl.Load(); ctl != nil {
			b.WriteString(ctl.alive(now))
		} else {
			b.WriteString("(no control session)")
		}
		if d := l.prog.done.Load(); d > 0 {
			fmt.Fprintf(&b, ", last finished #%d %v ago", d, now.Sub(l.prog.doneAt.Load()).Round(time.Millisecond))
		} else {
			b.WriteString(", has finished no collective")
		}
	}
	if caughtUp && len(missing) > 0 {
		b.WriteString("; every rank waited for is alive and finished the collective before: unless it computes this long, it waits in another collective (the ranks called different collectives; COBRE_DEBUG=detail, or Config.CheckCollectives, names the rank that differs)")
	}
	return b.String()
}

// joinRanks writes ranks as "0,1,2", or more than comm.MaxRanksItems
// ranks as comm.FormatRanks does, without its brackets.
func joinRanks(ranks []int) string {
	if len(ranks) > comm.MaxRanksItems {
		return strings.Trim(comm.FormatRanks(ranks), "[]")
	}
	s := make([]string, len(ranks))
	for i, r := range ranks {
		s[i] = strconv.Itoa(r)
	}
	return strings.Join(s, ",")
}
