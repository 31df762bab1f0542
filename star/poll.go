package star

import "time"

// pollMax is the largest frame payload, in bytes, that is polled for or
// written without waiting. Larger frames take long enough on the wire that
// a goroutine per link, parked in the network poller, loses nothing, and
// polling them would spend a core that the copies need.
const pollMax = 256 << 10

// stageMax is the largest frame, header included, that a poller reads
// with one system call into the link's staging buffer and then copies to
// its parts, and that a worker stages and sends with one system call: a
// copy of this size costs less than the system calls it saves (a small
// frame's header, payload parts and, for allreduce, op byte would
// otherwise each take a read, and its writev more work than a write).
const stageMax = 16 << 10

// pollLinks polls the frames begun on links (see beginRead) in turn, from
// this goroutine and without waiting, until every one is complete, one
// fails, none has moved for spin, or limit has passed in all. Every link
// must have a poller. It moves the complete links to the front of links and
// returns how many there are, or the first failure and its link. Between
// rounds that found nothing it yields the processor, so that the peers it
// waits for can run on a busy host. Each poll is armed like any other I/O
// (see link.arm), so polling never runs on a stale deadline.
func pollLinks(spin, limit time.Duration, links ...*link) (done int, bad *link, err error) {
	start := time.Now()
	last, round := start, start
	for {
		moved := false
		for i := done; i < len(links); i++ {
			l := links[i]
			complete, n, err := l.pollReadAt(round)
			if err != nil {
				return done, l, err
			}
			moved = moved || n > 0
			if complete {
				links[i], links[done] = links[done], l
				done++
			}
		}
		if done == len(links) {
			return done, nil, nil
		}
		// The clock's monotonic reading alone (one read, where time.Now
		// takes two): deadlines only need the monotonic clock.
		now := start.Add(time.Since(start))
		round = now
		switch {
		case now.Sub(start) >= limit:
			return done, nil, nil
		case moved:
			last = now
		case now.Sub(last) >= spin:
			return done, nil, nil
		default:
			links[done].poller.Yield()
		}
	}
}

// stageFrame appends to dst[:0] the bytes of a frame of tag whose payload
// is extra followed by parts, and returns them: a small frame staged once
// and then posted with postFrame (to every link, on the coordinator),
// header and payload in one segment.
func stageFrame(dst []byte, tag byte, extra []byte, parts [][]byte) []byte {
	n := len(extra)
	for _, p := range parts {
		n += len(p)
	}
	var h [HeaderSize]byte
	PutHeader(h[:], tag, n)
	dst = append(dst[:0], h[:]...)
	dst = append(dst, extra...)
	for _, p := range parts {
		dst = append(dst, p...)
	}
	return dst
}

// postFrame writes frame (a whole frame, see stageFrame) as far as the link
// takes it without waiting (l.poller must be set); it reports whether all
// of it went. What did not go is in l.wrest, for finishWrite. The link only
// reads frame, so several links may post the same one.
func (l *link) postFrame(frame []byte) (bool, error) { return l.postFrameAt(frame, time.Time{}) }

// postFrameAt is postFrame at time now (see armAt).
func (l *link) postFrameAt(frame []byte, now time.Time) (bool, error) {
	if err := l.armAt(true, now); err != nil {
		return false, err
	}
	k, err := l.poller.WriteNow(frame)
	l.wrote(k)
	if err != nil {
		if !l.lateWrite(err) {
			return false, l.ioErr(err, true)
		}
		// This rank was away: finishWrite writes the rest under a fresh
		// deadline.
	}
	l.wrest = frame[k:]
	if len(l.wrest) > 0 {
		l.wdirty = k > 0 // a frame cut short, or none begun
		return false, nil
	}
	l.wrest = nil
	return true, nil
}

// finishWrite writes what postFrame left in l.wrest, waiting under the
// write timeout.
func (l *link) finishWrite() error {
	l.wdirty = true
	if err := l.writeAll(l.wrest, nil); err != nil {
		return err
	}
	l.wrest = nil
	l.wdirty = false
	return nil
}
