package faulty

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/starcomm/starcomm/transport"
)

// Kind is a kind of fault.
type Kind int

// The fault kinds; see the package doc.
const (
	Crash Kind = iota + 1
	Hang
	Reset
	Deadline
	Delay
	CorruptTag
	LenTooLarge
	LenTooSmall
	RefuseDial
	SysTimeout
)

var kindNames = map[Kind]string{Crash: "crash", Hang: "hang", Reset: "reset", Deadline: "deadline", Delay: "delay",
	CorruptTag: "corrupt-tag", LenTooLarge: "len-too-large", LenTooSmall: "len-too-small", RefuseDial: "refuse-dial",
	SysTimeout: "system-timeout"}

// String returns the fault's name, as used in test names.
func (k Kind) String() string {
	if s, ok := kindNames[k]; ok {
		return s
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Dir is a direction of the byte stream at one end.
type Dir int

// Directions.
const (
	Write Dir = iota // bytes this end sends
	Read             // bytes this end receives
)

// String returns "write" or "read".
func (d Dir) String() string {
	if d == Read {
		return "read"
	}
	return "write"
}

// headerSize is the spec's LEN (4 bytes) + TAG (1 byte).
const headerSize = 5

// The tags of the first frames that name the worker's rank in their
// payload's first 4 bytes: the Handshake of a data conn, and the Control
// frame (and its Ack) of a control conn.
const (
	tagHandshake = 0x08
	tagControl   = 0x0C
)

// rankEnd is the stream offset, in frame 0, just after the worker's rank.
const rankEnd = headerSize + 4

func isCorruption(k Kind) bool { return k == CorruptTag || k == LenTooLarge || k == LenTooSmall }

// Fault is one scripted fault.
type Fault struct {
	Kind Kind
	// Rank is the rank whose end the fault acts on: 0 for the
	// coordinator's ends, r for worker r's end.
	Rank int
	// Link is the peer's rank: on the coordinator, the worker whose link
	// it is; on a worker, 0. -1 means any link of Rank: the fault still
	// fires once, on the first link whose stream reaches its trigger (or,
	// fired by Script.Fire, on every link of Rank at once). On the
	// coordinator Link 0 names no link (rank 0 has no link to itself), so
	// such a fault never fires: Check reports it.
	Link int
	// Dir, Frame and Offset place the trigger in the stream.
	Dir    Dir
	Frame  int
	Offset int
	// Delay is the wait of a Delay fault.
	Delay time.Duration
	// Extra is added to LEN by LenTooLarge; 0 means set LEN to 0xFFFFFFFF.
	Extra uint32
	// Acked makes a Delay a slow link that moves every byte in its
	// direction, not a stalled peer: the bytes keep going, and the hosts
	// keep acknowledging, throughout, which both ends' Acks
	// (transport.AckReporter) report; and the Delay outlasts a deadline
	// that passes in it (the I/O that failed leaves the rest of the Delay
	// to the next).
	Acked bool
	// Manual faults never trigger from the stream; Script.Fire triggers
	// them.
	Manual bool
	// WholeRank makes a Crash, Reset or Hang act on every end of Rank at
	// once, data and control conns alike, as when the whole process dies
	// or stops, not one link.
	WholeRank bool
	// Control makes the fault act on the control conn of (Rank, Link)
	// instead of its data conn; see the package doc. With WholeRank it
	// picks the conn whose stream triggers the fault, which then acts on
	// every conn of Rank.
	Control bool
}

// String describes the fault.
func (f Fault) String() string {
	s := fmt.Sprintf("%v rank=%d link=%d %v frame=%d offset=%d", f.Kind, f.Rank, f.Link, f.Dir, f.Frame, f.Offset)
	if f.Control {
		s += " control"
	}
	if f.Acked {
		s += " acked"
	}
	return s
}

// Check reports why the fault can never fire, or nil: an unknown Kind, a
// negative Rank, Frame or Offset, a Link that no end of Rank has (on the
// coordinator, 0 or below -1; on a worker, anything but 0 and -1; Link
// plays no part in a Manual WholeRank fault), a
// RefuseDial for the coordinator (which never dials), or a Delay fault
// without a positive Delay.
func (f Fault) Check() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("faulty: fault %v: %s", f, fmt.Sprintf(format, args...))
	}
	anyLink := f.Manual && f.WholeRank // Fire acts on every end of Rank
	switch {
	case f.Kind < Crash || f.Kind > SysTimeout:
		return bad("unknown kind %d", int(f.Kind))
	case f.Rank < 0:
		return bad("rank %d is negative", f.Rank)
	case !anyLink && f.Rank == 0 && (f.Link == 0 || f.Link < -1):
		return bad("link %d names no link of the coordinator (want a worker's rank, or -1 for any)", f.Link)
	case !anyLink && f.Rank > 0 && f.Link != 0 && f.Link != -1:
		return bad("link %d names no link of worker %d (a worker's only link is to rank 0: want 0, or -1)", f.Link, f.Rank)
	case f.Frame < 0:
		return bad("frame %d is negative", f.Frame)
	case f.Offset < 0:
		return bad("offset %d is negative", f.Offset)
	case f.Kind == RefuseDial && f.Rank == 0:
		return bad("the coordinator never dials (RefuseDial is for a worker's rank)")
	case f.Kind == Delay && f.Delay <= 0:
		return bad("delay %v: a Delay fault needs a positive Delay", f.Delay)
	case f.Acked && f.Kind != Delay:
		return bad("Acked is for a Delay")
	}
	return nil
}

// Script is the set of faults of one run. It is safe for concurrent use.
type Script struct {
	mu     sync.Mutex
	faults []*armed
	conns  []*Conn
	dead   map[int]Fault // ranks a WholeRank Crash or Hang has hit
}

type armed struct {
	Fault
	fired bool
}

// NewScript returns a script holding faults. A fault that can never fire
// (see Fault.Check) is kept and never fires; Script.Check reports it.
func NewScript(faults ...Fault) *Script {
	s := &Script{}
	for _, f := range faults {
		s.faults = append(s.faults, &armed{Fault: f})
	}
	return s
}

// Check reports every fault of the script that can never fire (see
// Fault.Check), numbered from 0 in the order given to NewScript, or nil.
func (s *Script) Check() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for i, f := range s.faults {
		if err := f.Check(); err != nil {
			errs = append(errs, fmt.Errorf("fault %d: %w", i, err))
		}
	}
	return errors.Join(errs...)
}

// Fired reports how many faults have fired.
func (s *Script) Fired() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, f := range s.faults {
		if f.fired {
			n++
		}
	}
	return n
}

// take returns, among the unfired faults of this end (a control conn or
// not) and direction that match, the one earliest in the stream (fired is
// left to the caller).
func (s *Script) take(rank, link int, control bool, dir Dir, match func(f *armed) (pos int, ok bool)) *armed {
	s.mu.Lock()
	defer s.mu.Unlock()
	var best *armed
	bestPos := 0
	for _, f := range s.faults {
		if f.fired || f.Manual || f.Rank != rank || (f.Link != -1 && f.Link != link) || f.Control != control || f.Dir != dir || f.Kind == RefuseDial {
			continue
		}
		if pos, ok := match(f); ok && (best == nil || pos < bestPos) {
			best, bestPos = f, pos
		}
	}
	return best
}

// Fire triggers every Manual fault of rank now, on each of its ends that
// matches (its data conns, or with Control its control conns, or with
// WholeRank all of them): Crash closes, Reset resets, SysTimeout times
// out, Hang hangs; Deadline fails the next I/O; Delay makes the I/O of
// Dir wait until Delay from now; corruptions corrupt the next frame sent
// (Dir Write) or received (Dir Read), which on a control conn past its
// first frames never comes.
func (s *Script) Fire(rank int) {
	s.mu.Lock()
	var todo []func()
	for _, f := range s.faults {
		if f.fired || !f.Manual || f.Rank != rank {
			continue
		}
		f.fired = true
		if f.WholeRank && (f.Kind == Crash || f.Kind == Hang) {
			if s.dead == nil {
				s.dead = map[int]Fault{}
			}
			s.dead[f.Rank] = f.Fault
		}
		for _, c := range s.conns {
			if c.rank != rank {
				continue
			}
			link, control := c.linkKind()
			if f.WholeRank || (f.Control == control && (f.Link == -1 || f.Link == link)) {
				todo = append(todo, func() { c.fireNow(f.Fault); c.delayNow(f.Fault) })
			}
		}
	}
	s.mu.Unlock()
	for _, do := range todo {
		do()
	}
}

// PeerTimeouts returns the last SetPeerTimeout value (Conn.PeerTimeout)
// of every data conn of rank whose link is known, by link (on the
// coordinator, the worker's rank; on a worker, 0).
func (s *Script) PeerTimeouts(rank int) map[int]time.Duration {
	s.mu.Lock()
	conns := slices.Clone(s.conns)
	s.mu.Unlock()
	out := map[int]time.Duration{}
	for _, c := range conns {
		if link, control := c.linkKind(); c.rank == rank && !control && link >= 0 {
			out[link] = c.PeerTimeout()
		}
	}
	return out
}

// WrapDialer returns a Dialer for worker rank whose conns carry the
// script's faults for that rank (Link 0). A RefuseDial fault for rank makes
// the next Dial fail with ECONNREFUSED.
func (s *Script) WrapDialer(d transport.Dialer, rank int) transport.Dialer {
	return transport.DialerFunc(func(ctx context.Context, addr string) (transport.Conn, error) {
		s.mu.Lock()
		for _, f := range s.faults {
			if !f.fired && f.Kind == RefuseDial && f.Rank == rank {
				f.fired = true
				s.mu.Unlock()
				return nil, &net.OpError{Op: "dial", Net: "faulty", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
			}
		}
		s.mu.Unlock()
		c, err := d.Dial(ctx, addr)
		if err != nil {
			return nil, err
		}
		return s.wrap(c, rank, 0, false), nil
	})
}

// WrapListener returns a Listener for the coordinator (rank 0) whose
// accepted conns carry the script's faults for rank 0. An accepted conn
// learns its link (the worker's rank) from the Handshake, or the Control
// frame, it reads.
func (s *Script) WrapListener(l transport.Listener) transport.Listener {
	return &listener{Listener: l, s: s}
}

type listener struct {
	transport.Listener
	s *Script
}

func (l *listener) Accept() (transport.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return l.s.wrap(c, 0, -1, true), nil
}

// wrap wraps c as an end of rank, with the abilities c has (see Conn);
// accepted tells a listener's end from a dialer's.
func (s *Script) wrap(c transport.Conn, rank, link int, accepted bool) transport.Conn {
	fc := &Conn{inner: c, s: s, rank: rank, link: link, accepted: accepted, changed: make(chan struct{}), closed: make(chan struct{})}
	fc.poller, _ = c.(transport.Poller)
	fc.cw, _ = c.(transport.CloseWriter)
	s.mu.Lock()
	s.conns = append(s.conns, fc)
	dead, isDead := s.dead[rank]
	s.mu.Unlock()
	if isDead {
		// A crashed or hung process does not come back for new
		// connections either.
		fc.fireNow(dead)
	}
	switch {
	case fc.poller != nil && fc.cw != nil:
		return &PollCloseWriteConn{PollConn{fc}}
	case fc.poller != nil:
		return &PollConn{fc}
	case fc.cw != nil:
		return &CloseWriteConn{fc}
	}
	return fc
}

// markDead records that a WholeRank fault hit f.Rank.
func (s *Script) markDead(f Fault) {
	if f.Kind != Crash && f.Kind != Hang {
		return
	}
	s.mu.Lock()
	if s.dead == nil {
		s.dead = map[int]Fault{}
	}
	s.dead[f.Rank] = f
	s.mu.Unlock()
}

// Conn is a conn with faults. It implements transport.Conn.
//
// WrapDialer and WrapListener return a *Conn when the wrapped conn has
// neither of the optional abilities transport.Poller and
// transport.CloseWriter, and otherwise a *PollConn, *CloseWriteConn or
// *PollCloseWriteConn, which embed the *Conn and add exactly the
// abilities the wrapped conn has. ConnOf returns the *Conn of any of them.
type Conn struct {
	inner  transport.Conn
	poller transport.Poller      // inner's, or nil
	cw     transport.CloseWriter // inner's, or nil
	s      *Script
	rank   int
	// accepted: a listener's end, which learns its kind from the first
	// frame it reads; a dialer's end learns it from the first frame it
	// writes.
	accepted bool

	mu          sync.Mutex
	link        int      // -1 until the handshake is seen (coordinator side)
	kind        connKind // unknown until the first frame's tag is seen
	hung        bool
	broken      error         // sticky error after Crash, Reset or SysTimeout
	peerTimeout time.Duration // the last SetPeerTimeout
	once        error         // error for the next I/O (Deadline)
	corrupt     [2][]Fault
	rdeadline   time.Time
	wdeadline   time.Time
	changed     chan struct{} // closed and replaced when a deadline changes
	closed      chan struct{}
	closeOnce   sync.Once

	// Stream position per direction.
	pos [2]struct {
		frame, offset int
		size          int // bytes of the current frame, once LEN is known
		prev          int // bytes of the previous frame
		hdr           [headerSize]byte
	}
	// delay is when a Delay that fired in each direction ends (zero:
	// none); the I/O of that direction waits until then (polled I/O
	// returns nothing until then).
	delay [2]time.Time
	// acked is when the latest Acked Delay of each direction ends (zero:
	// none fired); see Acks.
	acked   [2]time.Time
	hs      [4]byte // the rank in a Handshake being read, until complete
	pending []byte  // read bytes held back (a header, or data that came in as the end hung)
	// look holds bytes of an accepted end's frame 0 read ahead from the
	// inner conn, not yet counted in pos, to learn the conn's kind (and
	// link) before a fault placed there may fire; reads take them first.
	// peeked is set once reading ahead is over for good (the stream
	// ended before it was done).
	look   []byte
	peeked bool
	// hbuf holds the header being read while a corruption may apply: hhave
	// bytes of it have come from the inner conn, not yet handed out nor
	// counted in pos (the reading side only).
	hbuf  [headerSize]byte
	hhave int
	// lie is the corrupted header of frame lieFrame of the write
	// direction, which goes out instead of the caller's header bytes,
	// however the writes split them (the writing side only).
	lie      [headerSize]byte
	lieFrame int
	lieSet   bool
}

// connKind is what a conn carries: star's frames (a data conn) or, after
// its first frame each way, a control session.
type connKind int

const (
	kindUnknown connKind = iota // no first frame seen yet: counts as data
	kindData
	kindControl
)

// PollConn is a *Conn over a conn that is a transport.Poller, which it is
// too: ReadNow and WriteNow go through the same faults as Read and Write.
type PollConn struct {
	*Conn
}

// CloseWriteConn is a *Conn over a conn that is a transport.CloseWriter,
// which it is too.
type CloseWriteConn struct {
	*Conn
}

// PollCloseWriteConn is a *Conn over a conn that is both a
// transport.Poller and a transport.CloseWriter, which it is too.
type PollCloseWriteConn struct {
	PollConn
}

var (
	_ transport.Conn          = (*Conn)(nil)
	_ transport.Poller        = (*PollConn)(nil)
	_ transport.CloseWriter   = (*CloseWriteConn)(nil)
	_ transport.Poller        = (*PollCloseWriteConn)(nil)
	_ transport.CloseWriter   = (*PollCloseWriteConn)(nil)
	_ transport.UnreadCounter = (*Conn)(nil)
)

// Unread implements transport.UnreadCounter when the wrapped conn does:
// its unread bytes and those faulty holds back, which reads hand out
// first; 0 while this end is hung or broken (its reads deliver nothing).
// Over a conn that cannot tell, it fails with an error wrapping
// errors.ErrUnsupported.
func (c *Conn) Unread() (int, error) {
	uc, ok := c.inner.(transport.UnreadCounter)
	if !ok {
		return 0, fmt.Errorf("faulty: the wrapped conn cannot count unread bytes: %w", errors.ErrUnsupported)
	}
	c.mu.Lock()
	held, stuck := len(c.pending)+c.hhave+len(c.look), c.hung || c.broken != nil
	c.mu.Unlock()
	if stuck {
		return 0, nil
	}
	n, err := uc.Unread()
	return n + held, err
}

var _ transport.AckReporter = (*Conn)(nil)

// Acks implements transport.AckReporter for the Acked Delays of the
// script (see Fault.Acked), of this end and of its peer's (the other end
// of the same link and kind, when it is wrapped by the same Script): while
// one of this end's writes, or of the peer's reads, lasts, this end has
// just sent and the peer's host has just acknowledged, its window open;
// while one of this end's reads, or of the peer's writes, lasts, this end
// has just received. After one, the ages count from its end (the link
// moved the last bytes then); a direction with none is a day old. Before
// any fired, and on an end that is hung, broken or closed, it fails with
// an error wrapping errors.ErrUnsupported: the driver reports only what
// the script says.
func (c *Conn) Acks() (transport.Acks, error) {
	c.mu.Lock()
	out, in, stuck := c.acked[Write], c.acked[Read], c.hung || c.broken != nil
	c.mu.Unlock()
	select {
	case <-c.closed:
		stuck = true
	default:
	}
	if p := c.s.peerOf(c); p != nil {
		p.mu.Lock()
		out, in = later(out, p.acked[Read]), later(in, p.acked[Write])
		p.mu.Unlock()
	}
	if out.IsZero() && in.IsZero() || stuck {
		return transport.Acks{}, fmt.Errorf("faulty: no acknowledgments scripted on this end: %w", errors.ErrUnsupported)
	}
	now := time.Now()
	since := func(t time.Time) time.Duration {
		if t.IsZero() {
			return 24 * time.Hour
		}
		return max(now.Sub(t), 0)
	}
	return transport.Acks{SinceSent: since(out), SinceAcked: since(out), SinceReceived: since(in), Open: true}, nil
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// peerOf returns the latest end wrapped by s at the other end of c's link
// (the coordinator's end of a worker's link, or the worker's end), of the
// same kind (data or control), or nil.
func (s *Script) peerOf(c *Conn) *Conn {
	c.mu.Lock()
	link, kind := c.link, c.kind
	c.mu.Unlock()
	s.mu.Lock()
	conns := slices.Clone(s.conns)
	s.mu.Unlock()
	for i := len(conns) - 1; i >= 0; i-- {
		o := conns[i]
		if o == c || o.accepted == c.accepted {
			continue
		}
		o.mu.Lock()
		olink, okind := o.link, o.kind
		o.mu.Unlock()
		if okind != kind {
			continue
		}
		if c.rank == 0 && o.rank == link || o.rank == 0 && olink == c.rank {
			return o
		}
	}
	return nil
}

var _ transport.PeerTimeoutSetter = (*Conn)(nil)

// SetPeerTimeout implements transport.PeerTimeoutSetter when the wrapped
// conn does, and records d (see PeerTimeout); over a conn that cannot, it
// records d and fails with an error wrapping errors.ErrUnsupported.
func (c *Conn) SetPeerTimeout(d time.Duration) error {
	c.mu.Lock()
	c.peerTimeout = d
	c.mu.Unlock()
	ps, ok := c.inner.(transport.PeerTimeoutSetter)
	if !ok {
		return fmt.Errorf("faulty: the wrapped conn cannot set a peer timeout: %w", errors.ErrUnsupported)
	}
	return ps.SetPeerTimeout(d)
}

// PeerTimeout returns the last d given to SetPeerTimeout (0: none, or
// restored).
func (c *Conn) PeerTimeout() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.peerTimeout
}

// ConnOf returns the *Conn of a conn that WrapDialer or WrapListener
// returned (a *Conn, *PollConn, *CloseWriteConn or *PollCloseWriteConn), or
// nil for any other conn.
func ConnOf(c transport.Conn) *Conn {
	switch c := c.(type) {
	case *Conn:
		return c
	case *PollConn:
		return c.Conn
	case *CloseWriteConn:
		return c.Conn
	case *PollCloseWriteConn:
		return c.Conn
	}
	return nil
}

// ReadNow implements transport.Poller: Read without waiting. It goes
// through the faults as Read does, at the same stream positions and with
// the same errors; where Read would wait (a hung end, a Delay, a frame
// header not whole yet while a corruption may apply) it returns 0 and nil
// instead, until the wait would have ended. A read deadline that has
// passed fails it, as it fails the wrapped conn's ReadNow, even when
// faulty holds bytes back.
func (c *PollConn) ReadNow(p []byte) (int, error) { return c.read(p, true) }

// WriteNow implements transport.Poller: Write without waiting, through the
// same faults as Write; where Write would wait, it returns what it wrote
// so far and a nil error.
func (c *PollConn) WriteNow(p []byte) (int, error) { return c.write(p, true) }

// Yield implements transport.Poller: the wrapped conn's Yield.
func (c *PollConn) Yield() { c.poller.Yield() }

// CloseWrite implements transport.CloseWriter; see Conn.closeWrite.
func (c *CloseWriteConn) CloseWrite() error { return c.closeWrite() }

// CloseWrite implements transport.CloseWriter; see Conn.closeWrite.
func (c *PollCloseWriteConn) CloseWrite() error { return c.closeWrite() }

// closeWrite half-closes the wrapped conn, unless a fault has hit this
// end: after a Crash, Reset or SysTimeout it fails with that fault's error, as other
// I/O does; on a hung end it does nothing and returns nil, since a hung
// process sends nothing, not even the end of its stream (its peer keeps
// seeing silence); after Close it fails with net.ErrClosed.
func (c *Conn) closeWrite() error {
	select {
	case <-c.closed:
		return net.ErrClosed
	default:
	}
	c.mu.Lock()
	broken, hung := c.broken, c.hung
	c.mu.Unlock()
	switch {
	case broken != nil:
		return broken
	case hung:
		return nil
	}
	return c.cw.CloseWrite()
}

// Link returns the peer's rank, or -1 while unknown.
func (c *Conn) Link() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.link
}

// Control reports whether the conn is known to be a control conn: its
// first frame (written on a dialer's end, read on a listener's end) had
// the Control tag, 0x0C.
func (c *Conn) Control() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.kind == kindControl
}

// linkKind returns the link and whether the conn is a control conn.
func (c *Conn) linkKind() (link int, control bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.link, c.kind == kindControl
}

// untrackedLocked reports whether dir's bytes are no longer star's frames:
// on a control conn, everything after the first frame. c.mu is held.
func (c *Conn) untrackedLocked(dir Dir) bool {
	return c.kind == kindControl && c.pos[dir].frame >= 1
}

// decidesKind reports whether the first frame of dir tells the conn's
// kind: the frame written on a dialer's end, read on a listener's.
func (c *Conn) decidesKind(dir Dir) bool { return (dir == Read) == c.accepted }

// setKindLocked records the kind the tag of the first frame of dir tells,
// if dir decides it and it is not known yet. c.mu is held.
func (c *Conn) setKindLocked(dir Dir, tag byte) {
	if c.kind != kindUnknown || !c.decidesKind(dir) {
		return
	}
	c.kind = kindData
	if tag == tagControl {
		c.kind = kindControl
	}
}

func (c *Conn) fireNow(f Fault) {
	switch f.Kind {
	case Crash:
		c.breakWith(net.ErrClosed)
	case Reset:
		c.breakWith(resetErr())
	case SysTimeout:
		c.breakWith(sysTimeoutErr())
	case Hang:
		c.mu.Lock()
		c.hung = true
		c.mu.Unlock()
	case Deadline:
		c.mu.Lock()
		c.once = os.ErrDeadlineExceeded
		c.mu.Unlock()
	case CorruptTag, LenTooLarge, LenTooSmall:
		c.mu.Lock()
		c.corrupt[f.Dir] = append(c.corrupt[f.Dir], f)
		c.mu.Unlock()
	}
}

// delayNow starts a Delay fired by Script.Fire: the I/O of f.Dir waits
// until f.Delay from now. (A Delay that a stream position triggers acts
// in act; one whole-rank fault spreading to other ends does not delay
// them.)
func (c *Conn) delayNow(f Fault) {
	if f.Kind != Delay {
		return
	}
	c.mu.Lock()
	c.delay[f.Dir] = time.Now().Add(f.Delay)
	if f.Acked {
		c.acked[f.Dir] = c.delay[f.Dir]
	}
	c.mu.Unlock()
}

func resetErr() error {
	return &net.OpError{Op: "read", Net: "faulty", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
}

// sysTimeoutErr is what TCP's own timeouts (TCP_USER_TIMEOUT, keep-alive)
// give: ETIMEDOUT, whose Timeout method says true but which is not
// os.ErrDeadlineExceeded.
func sysTimeoutErr() error {
	return &net.OpError{Op: "read", Net: "faulty", Err: os.NewSyscallError("read", syscall.ETIMEDOUT)}
}

// breakWith closes the underlying conn; later I/O on this end returns err.
func (c *Conn) breakWith(err error) {
	c.mu.Lock()
	if c.broken == nil {
		c.broken = err
	}
	c.mu.Unlock()
	_ = c.inner.Close()
}

// trigger finds the earliest stream fault placed within the next n bytes
// of dir and returns it with the number of bytes to pass before it fires.
// Only a fault at the current position (before == 0) is marked fired; one
// further on just bounds this I/O so that the next one starts at it. A
// fault at the very end of a frame is the same as one at the start of the
// next.
//
// On a control conn past its first frame the position stays at the start
// of frame 1: only a fault at the very end of frame 0 can still fire
// there (at the next I/O); nothing later is a frame.
func (c *Conn) trigger(dir Dir, n int) (*armed, int) {
	c.mu.Lock()
	st := c.pos[dir]
	link, control := c.link, c.kind == kindControl
	untracked := c.untrackedLocked(dir)
	c.mu.Unlock()
	f := c.s.take(c.rank, link, control, dir, func(f *armed) (int, bool) {
		if isCorruption(f.Kind) {
			return 0, false // applied to the header as it passes
		}
		offset := f.Offset
		switch {
		case f.Frame == st.frame && !untracked:
		case f.Frame == st.frame-1 && st.offset == 0 && f.Offset == st.prev:
			offset = 0 // the end of the previous frame
		default:
			return 0, false
		}
		if offset < st.offset || offset > st.offset+n || (st.size > 0 && offset > st.size) {
			return 0, false
		}
		return offset - st.offset, true
	})
	if f == nil {
		return nil, 0
	}
	before := f.Offset - st.offset
	if f.Frame != st.frame {
		before = 0
	}
	if before == 0 {
		c.s.mu.Lock()
		f.fired = true
		c.s.mu.Unlock()
	}
	return f, before
}

// advance moves dir's position over p (bytes that passed).
// On a control conn it stops at the end of the first frame: what follows
// is not star's frames.
func (c *Conn) advance(dir Dir, p []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := &c.pos[dir]
	for len(p) > 0 && !c.untrackedLocked(dir) {
		if st.offset < headerSize {
			k := min(len(p), headerSize-st.offset)
			copy(st.hdr[st.offset:], p[:k])
			st.offset += k
			p = p[k:]
			if st.offset >= 4 && st.size == 0 {
				st.size = 4 + int(binary.BigEndian.Uint32(st.hdr[:4]))
			}
			if st.offset == headerSize && st.frame == 0 {
				c.setKindLocked(dir, st.hdr[4])
			}
		} else {
			k := min(len(p), st.size-st.offset)
			if dir == Read && c.link == -1 && st.frame == 0 && namesRank(st.hdr[4]) && st.offset < rankEnd {
				// The worker's rank: the first 4 payload bytes of its
				// Handshake or Control frame, however the reads split
				// them.
				at := st.offset - headerSize
				m := copy(c.hs[at:], p[:k])
				if at+m == 4 {
					c.link = int(binary.BigEndian.Uint32(c.hs[:]))
				}
			}
			st.offset += k
			p = p[k:]
		}
		if st.size > 0 && st.offset >= st.size {
			st.frame++
			st.prev = st.size
			st.offset, st.size = 0, 0
		}
	}
}

// namesRank reports whether a first frame with tag carries the worker's
// rank in its payload's first 4 bytes.
func namesRank(tag byte) bool { return tag == tagHandshake || tag == tagControl }

// wait blocks, as a hung end does, until the deadline for dir passes or the
// conn closes.
func (c *Conn) wait(dir Dir, until time.Time) error {
	for {
		select {
		case <-c.closed:
			return net.ErrClosed
		default:
		}
		c.mu.Lock()
		dl := c.wdeadline
		if dir == Read {
			dl = c.rdeadline
		}
		changed := c.changed
		c.mu.Unlock()
		if !until.IsZero() && (dl.IsZero() || until.Before(dl)) {
			dl = until
		}
		var timer <-chan time.Time
		if !dl.IsZero() {
			d := time.Until(dl)
			if d <= 0 {
				if !until.IsZero() && dl.Equal(until) {
					return nil // a Delay that ended
				}
				return os.ErrDeadlineExceeded
			}
			t := time.NewTimer(d)
			defer t.Stop()
			timer = t.C
		}
		select {
		case <-c.closed:
			return net.ErrClosed
		case <-changed:
		case <-timer:
			if !until.IsZero() && dl.Equal(until) {
				return nil
			}
			return os.ErrDeadlineExceeded
		}
	}
}

// act applies a fault that fired; it returns an error to report instead of
// the I/O, or nil to continue. On polled I/O (poll) it never waits: where
// the I/O would wait it returns errNotYet.
func (c *Conn) act(dir Dir, f *armed, poll bool) error {
	if f.WholeRank {
		c.s.markDead(f.Fault)
		c.s.mu.Lock()
		var others []*Conn
		for _, o := range c.s.conns {
			if o != c && o.rank == c.rank {
				others = append(others, o)
			}
		}
		c.s.mu.Unlock()
		for _, o := range others {
			o.fireNow(f.Fault)
		}
	}
	switch f.Kind {
	case Crash:
		c.breakWith(net.ErrClosed)
		return net.ErrClosed
	case Reset:
		c.breakWith(resetErr())
		return resetErr()
	case SysTimeout:
		c.breakWith(sysTimeoutErr())
		return sysTimeoutErr()
	case Deadline:
		return os.ErrDeadlineExceeded
	case Hang:
		c.mu.Lock()
		c.hung = true
		c.mu.Unlock()
		if poll {
			return c.pollWait(dir, time.Time{})
		}
		return c.wait(dir, time.Time{})
	case Delay:
		// The I/O waits for it in state, at once.
		c.mu.Lock()
		c.delay[dir] = time.Now().Add(f.Delay)
		if f.Acked {
			c.acked[dir] = c.delay[dir]
		}
		c.mu.Unlock()
	}
	return nil
}

// errNotYet is what a polled I/O step reports where the I/O would wait: the
// polled call returns what it has done so far and no error.
var errNotYet = errors.New("faulty: would wait")

// pollWait is wait for polled I/O: it reports, without waiting, what wait
// would return now, or errNotYet while wait would still be waiting.
func (c *Conn) pollWait(dir Dir, until time.Time) error {
	select {
	case <-c.closed:
		return net.ErrClosed
	default:
	}
	c.mu.Lock()
	dl := c.wdeadline
	if dir == Read {
		dl = c.rdeadline
	}
	c.mu.Unlock()
	if !until.IsZero() && (dl.IsZero() || until.Before(dl)) {
		dl = until
	}
	if dl.IsZero() || time.Now().Before(dl) {
		return errNotYet
	}
	if !until.IsZero() && dl.Equal(until) {
		return nil // a Delay that ended
	}
	return os.ErrDeadlineExceeded
}

// state returns an error the next I/O must report, or blocks if hung or
// delayed (on polled I/O, returns errNotYet instead while it would block).
func (c *Conn) state(dir Dir, poll bool) error {
	c.mu.Lock()
	broken, hung, once, delay := c.broken, c.hung, c.once, c.delay[dir]
	c.once = nil
	c.mu.Unlock()
	switch {
	case broken != nil:
		return broken
	case once != nil:
		return once
	case hung && poll:
		return c.pollWait(dir, time.Time{})
	case hung:
		if err := c.wait(dir, time.Time{}); err != nil {
			return err
		}
		return os.ErrDeadlineExceeded
	case !delay.IsZero():
		var err error
		if poll {
			err = c.pollWait(dir, delay)
			if err == errNotYet {
				return err
			}
		} else {
			err = c.wait(dir, delay)
		}
		// The Delay is over, or its I/O failed (deadline, Close): it
		// holds no further I/O, unless it is an Acked one that a deadline
		// cut short (a slow link still moving the bytes).
		c.mu.Lock()
		if c.delay[dir].Equal(delay) && (err == nil || !c.acked[dir].Equal(delay) || !errors.Is(err, os.ErrDeadlineExceeded)) {
			c.delay[dir] = time.Time{}
		}
		c.mu.Unlock()
		return err
	}
	return nil
}

// notYet turns a polled step's errNotYet into the call's nil error.
func notYet(n int, err error) (int, error) {
	if err == errNotYet {
		return n, nil
	}
	return n, err
}

// corruption returns a header corruption scheduled for dir's current frame.
func (c *Conn) corruption(dir Dir) *Fault {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.corrupt[dir]) > 0 && !c.untrackedLocked(dir) {
		f := c.corrupt[dir][0]
		c.corrupt[dir] = c.corrupt[dir][1:]
		return &f
	}
	return nil
}

func corruptHeader(h []byte, f *Fault) {
	switch f.Kind {
	case CorruptTag:
		h[4] = 0xEE
	case LenTooLarge:
		n := uint32(0xFFFFFFFF)
		if f.Extra != 0 {
			n = binary.BigEndian.Uint32(h[:4]) + f.Extra
		}
		binary.BigEndian.PutUint32(h[:4], n)
	case LenTooSmall:
		if n := binary.BigEndian.Uint32(h[:4]); n > 0 {
			binary.BigEndian.PutUint32(h[:4], n-1)
		}
	}
}

// headerFault returns the corruption to apply to the header of dir's
// current frame (one armed by Fire, or one scripted for that frame), or
// nil, marking it fired.
func (c *Conn) headerFault(dir Dir, frame int) *Fault {
	if f := c.corruption(dir); f != nil {
		return f
	}
	c.mu.Lock()
	link, control := c.link, c.kind == kindControl
	untracked := c.untrackedLocked(dir)
	c.mu.Unlock()
	if untracked {
		return nil
	}
	a := c.s.take(c.rank, link, control, dir, func(f *armed) (int, bool) {
		return 0, isCorruption(f.Kind) && f.Frame == frame
	})
	if a == nil {
		return nil
	}
	c.s.mu.Lock()
	a.fired = true
	c.s.mu.Unlock()
	return &a.Fault
}

// ioErr is the error an I/O on the underlying conn reports: the fault's
// error if a fault broke this end meanwhile, net.ErrClosed if a hung end
// was closed, else the driver's.
func (c *Conn) ioErr(err error) error {
	if err == nil {
		return nil
	}
	c.mu.Lock()
	broken, hung := c.broken, c.hung
	c.mu.Unlock()
	if broken != nil {
		return broken
	}
	if hung {
		select {
		case <-c.closed:
			return net.ErrClosed
		default:
		}
	}
	return err
}

// writeHeaderFault is headerFault for a write at the start of a frame.
func (c *Conn) writeHeaderFault() *Fault {
	c.mu.Lock()
	off, frame := c.pos[Write].offset, c.pos[Write].frame
	untracked := c.untrackedLocked(Write)
	c.mu.Unlock()
	if off != 0 || untracked {
		return nil
	}
	return c.headerFault(Write, frame)
}

// Write sends p, applying the faults placed in it.
func (c *Conn) Write(p []byte) (int, error) { return c.write(p, false) }

// innerWrite writes b to the wrapped conn, with WriteNow when poll.
func (c *Conn) innerWrite(b []byte, poll bool) (int, error) {
	if poll {
		return c.poller.WriteNow(b)
	}
	return c.inner.Write(b)
}

// headerLie returns the corrupted header bytes that go out instead of the
// next n bytes of the write direction (nil if they are not in a corrupted
// header).
func (c *Conn) headerLie(n int) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.pos[Write]
	if !c.lieSet || c.lieFrame != st.frame || st.offset >= headerSize || c.untrackedLocked(Write) {
		return nil
	}
	return c.lie[st.offset:min(headerSize, st.offset+n)]
}

// write is Write, or WriteNow when poll: it then never waits, and returns
// what it has written when the wrapped conn takes no more or the end would
// wait.
func (c *Conn) write(p []byte, poll bool) (int, error) {
	written := 0
	for len(p) > 0 {
		if err := c.state(Write, poll); err != nil {
			return notYet(written, err)
		}
		if err := c.classifyWrite(p); err != nil {
			return written, err
		}
		if f := c.writeHeaderFault(); f != nil {
			if len(p) < headerSize {
				return written, fmt.Errorf("faulty: cannot corrupt a frame header split across writes (%d bytes)", len(p))
			}
			c.mu.Lock()
			copy(c.lie[:], p[:headerSize])
			corruptHeader(c.lie[:], f)
			c.lieFrame, c.lieSet = c.pos[Write].frame, true
			c.mu.Unlock()
		}
		a, before := c.trigger(Write, len(p))
		chunk := p
		if a != nil {
			chunk = p[:before]
		} else {
			chunk = p[:c.writeLimit(p)]
		}
		if len(chunk) > 0 {
			out := chunk
			if lie := c.headerLie(len(chunk)); lie != nil {
				// The header goes out on its own, as the lie.
				chunk, out = chunk[:len(lie)], lie
			}
			n, err := c.innerWrite(out, poll)
			c.advance(Write, chunk[:n]) // track the real frame, not the lie
			written += n
			p = p[n:]
			if err != nil {
				return written, c.ioErr(err)
			}
			if n < len(chunk) {
				// Only WriteNow stops short without an error.
				return written, nil
			}
		}
		if a != nil && before == 0 {
			if err := c.act(Write, a, poll); err != nil {
				return notYet(written, err)
			}
		}
	}
	return written, nil
}

// classifyWrite learns, on a dialer's end whose kind is not known yet, the
// kind from the tag of the first frame, which p (the next bytes written)
// reaches, before any fault placed in that frame is looked up. A header
// split across Writes before its tag leaves the kind unknown (a data
// conn, for the faults); that fails the Write when a control conn's fault
// placed in frame 0 could be missed so.
func (c *Conn) classifyWrite(p []byte) error {
	c.mu.Lock()
	st := c.pos[Write]
	unknown := c.kind == kindUnknown && c.decidesKind(Write) && st.frame == 0 && st.offset < headerSize
	if unknown && st.offset+len(p) >= headerSize {
		c.setKindLocked(Write, p[headerSize-1-st.offset])
		unknown = false
	}
	link := c.link
	c.mu.Unlock()
	if !unknown {
		return nil
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	for _, f := range c.s.faults {
		if !f.fired && !f.Manual && f.Control && f.Rank == c.rank && (f.Link == -1 || f.Link == link) &&
			f.Dir == Write && f.Frame == 0 && f.Kind != RefuseDial {
			return fmt.Errorf("faulty: cannot tell a control conn from a data conn: the first frame header is split across writes before its tag (%d bytes)", len(p))
		}
	}
	return nil
}

// writeLimit bounds the next write of p to the end of the current frame, so
// that faults in the next frame are seen before it starts. Once p completes
// the frame's header, the header's rest and the payload go to the wrapped
// conn in one write (a write short of the header's end goes as it is): the
// wrapped conn sees the writes the caller made, and an unbuffered peer's
// pending Read takes the frame whole rather than the header alone.
func (c *Conn) writeLimit(p []byte) int {
	c.mu.Lock()
	st := c.pos[Write]
	untracked := c.untrackedLocked(Write)
	c.mu.Unlock()
	if untracked || st.offset >= headerSize || st.offset+len(p) < headerSize {
		return c.untilFrameEnd(Write, len(p))
	}
	var hdr [headerSize]byte
	copy(hdr[:], st.hdr[:st.offset])
	copy(hdr[st.offset:], p)
	size := 4 + int(binary.BigEndian.Uint32(hdr[:4]))
	return min(len(p), max(size, headerSize)-st.offset)
}

// untilFrameEnd bounds an I/O to the end of the current frame (or its
// header) so that faults in the next frame are seen before it starts.
func (c *Conn) untilFrameEnd(dir Dir, n int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.untrackedLocked(dir) {
		return n
	}
	st := c.pos[dir]
	if st.offset < headerSize {
		return min(n, headerSize-st.offset)
	}
	return min(n, st.size-st.offset)
}

// Read receives into p, applying the faults placed in the stream. A frame
// header is read whole from the underlying conn before any of it is handed
// out, so a corruption armed while the Read waited still applies.
func (c *Conn) Read(p []byte) (int, error) { return c.read(p, false) }

// innerRead reads into b from the wrapped conn, with ReadNow when poll,
// or from the bytes read ahead (look) while there are any.
func (c *Conn) innerRead(b []byte, poll bool) (int, error) {
	if n := c.fromLook(b); n > 0 {
		return n, nil
	}
	if poll {
		return c.poller.ReadNow(b)
	}
	return c.inner.Read(b)
}

// fromLook moves bytes read ahead into b.
func (c *Conn) fromLook(b []byte) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := copy(b, c.look)
	c.look = c.look[n:]
	if len(c.look) == 0 {
		c.look = nil
	}
	return n
}

// lookWanted reports, for an accepted end at the start of its frame 0,
// whether to read ahead to learn its kind (kind) and its link (link)
// before bytes pass: a fault not fired yet, placed in frame 0 of what it
// reads, could fire before the tag (or the rank) would tell.
func (c *Conn) lookWanted() (kind, link bool) {
	c.mu.Lock()
	st := c.pos[Read]
	ok := c.accepted && !c.peeked && st.frame == 0 && st.offset < rankEnd
	needKind := c.kind == kindUnknown && st.offset < headerSize
	needLink := c.link == -1
	c.mu.Unlock()
	if !ok || (!needKind && !needLink) {
		return false, false
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	for _, f := range c.s.faults {
		if f.fired || f.Manual || f.Rank != c.rank || f.Dir != Read || f.Frame != 0 || f.Kind == RefuseDial {
			continue
		}
		corrupt := isCorruption(f.Kind)
		if needKind && (corrupt || f.Offset < headerSize) {
			kind = true
		}
		if needLink && f.Link != -1 && (corrupt || f.Offset < rankEnd) {
			link = true
		}
	}
	return kind, link
}

// readAhead reads ahead into c.look the bytes of frame 0 up to its tag
// and, when wantLink, the worker's rank after it (if the frame names one),
// and records the kind and link they tell. It reports whether it is done;
// polled, it returns false and nil while the bytes have not all arrived.
// A stream that ends first ends reading ahead: the bytes read ahead are
// handed out, then the end of the stream.
func (c *Conn) readAhead(wantLink, poll bool) (bool, error) {
	for {
		c.mu.Lock()
		st := c.pos[Read]
		// The bytes of frame 0 so far: passed (st.hdr, then c.hs for
		// the rank) and read ahead.
		seen := append([]byte(nil), st.hdr[:min(st.offset, headerSize)]...)
		if st.offset > headerSize {
			seen = append(seen, c.hs[:st.offset-headerSize]...)
		}
		seen = append(seen, c.look...)
		target := headerSize
		if len(seen) >= headerSize {
			c.setKindLocked(Read, seen[headerSize-1])
			if wantLink && c.link == -1 && namesRank(seen[4]) && binary.BigEndian.Uint32(seen[:4]) >= 5 {
				target = rankEnd
				if len(seen) >= rankEnd {
					c.link = int(binary.BigEndian.Uint32(seen[headerSize:rankEnd]))
				}
			}
		}
		c.mu.Unlock()
		if len(seen) >= target {
			return true, nil
		}
		buf := make([]byte, target-len(seen))
		var n int
		var err error
		if poll {
			n, err = c.poller.ReadNow(buf)
		} else {
			n, err = io.ReadFull(c.inner, buf)
		}
		c.mu.Lock()
		c.look = append(c.look, buf[:n]...)
		c.mu.Unlock()
		switch {
		case n == len(buf):
			continue
		case err == nil:
			return false, nil // polled: the rest has not arrived
		case err == io.EOF || err == io.ErrUnexpectedEOF:
			c.mu.Lock()
			c.peeked = true
			c.mu.Unlock()
			return true, nil
		}
		return false, c.ioErr(err)
	}
}

// readDeadlinePassed reports whether the read deadline has passed.
func (c *Conn) readDeadlinePassed() bool {
	c.mu.Lock()
	dl := c.rdeadline
	c.mu.Unlock()
	return !dl.IsZero() && !time.Now().Before(dl)
}

// read is Read, or ReadNow when poll: it then never waits, and returns 0
// and nil where Read would wait.
func (c *Conn) read(p []byte, poll bool) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if err := c.state(Read, poll); err != nil {
		return notYet(0, err)
	}
	c.mu.Lock()
	held := len(c.pending) > 0 || c.hhave > 0 || len(c.look) > 0
	c.mu.Unlock()
	if poll && held && c.readDeadlinePassed() {
		// The wrapped conn's ReadNow would fail so; bytes faulty holds
		// back do not change that.
		return 0, os.ErrDeadlineExceeded
	}
	c.mu.Lock()
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		c.mu.Unlock()
		return n, nil
	}
	inHeader := c.hhave > 0
	atHeader := c.pos[Read].offset == 0 && !c.untrackedLocked(Read)
	c.mu.Unlock()
	if inHeader {
		return c.readHeader(p, poll)
	}
	if kind, link := c.lookWanted(); kind || link {
		done, err := c.readAhead(link, poll)
		if err != nil || !done {
			return notYet(0, err)
		}
		c.mu.Lock()
		c.peeked = true
		c.mu.Unlock()
		return c.read(p, poll)
	}
	a, before := c.trigger(Read, len(p))
	if a != nil && before == 0 {
		if err := c.act(Read, a, poll); err != nil {
			return notYet(0, err)
		}
		return c.read(p, poll)
	}
	if atHeader && c.mayCorrupt(Read) && c.clearAhead(Read, a, before) {
		return c.readHeader(p, poll)
	}
	limit := c.untilFrameEnd(Read, len(p))
	if a != nil {
		limit = min(limit, before)
	}
	n, err := c.innerRead(p[:limit], poll)
	c.advance(Read, p[:n])
	if n > 0 {
		c.mu.Lock()
		hung := c.hung
		c.mu.Unlock()
		if hung {
			// The end hung while this Read waited: what came in is held,
			// not delivered.
			return c.hold(p[:0], p[:n], c.state(Read, poll), poll)
		}
	}
	return n, c.ioErr(err)
}

// readHeader reads the rest of the frame header at the read position
// into c.hbuf (all of it, or, polled, what has arrived), applies the
// corruption due for the frame once it is whole, and hands it out. A
// header that ends early (EOF) is handed out as it came, then the error.
func (c *Conn) readHeader(p []byte, poll bool) (int, error) {
	h := c.hbuf[:]
	c.mu.Lock()
	rest := h[c.hhave:]
	c.mu.Unlock()
	n := c.fromLook(rest)
	var err error
	if n < len(rest) {
		var m int
		if poll {
			m, err = c.poller.ReadNow(rest[n:])
		} else {
			m, err = io.ReadFull(c.inner, rest[n:])
		}
		n += m
	}
	c.mu.Lock()
	c.hhave += n
	have := c.hhave
	c.mu.Unlock()
	if have < headerSize {
		switch {
		case err == nil:
			return 0, nil // polled: the rest has not arrived
		case err != io.EOF && err != io.ErrUnexpectedEOF:
			// A deadline, say: the bytes stay until the next read.
			return 0, c.ioErr(err)
		}
		c.mu.Lock()
		c.hhave = 0
		c.mu.Unlock()
		c.advance(Read, h[:have])
		return c.hold(p, h[:have], c.ioErr(io.EOF), poll) // the bytes that came are handed out first
	}
	c.mu.Lock()
	c.hhave = 0
	frame := c.pos[Read].frame
	c.mu.Unlock()
	c.advance(Read, h)
	if f := c.headerFault(Read, frame); f != nil {
		corruptHeader(h, f)
	}
	return c.hold(p, h, nil, poll)
}

// mayCorrupt reports whether a header corruption may still apply to dir on
// this end (armed by Fire, or scripted and not fired yet).
func (c *Conn) mayCorrupt(dir Dir) bool {
	c.mu.Lock()
	armed := len(c.corrupt[dir]) > 0
	untracked := c.untrackedLocked(dir)
	kind := c.kind
	c.mu.Unlock()
	if untracked {
		return false // never on a control session's bytes
	}
	if armed {
		return true
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	for _, f := range c.s.faults {
		if isCorruption(f.Kind) && !f.fired && f.Rank == c.rank && f.Dir == dir &&
			(kind == kindUnknown || f.Control == (kind == kindControl)) {
			return true
		}
	}
	return false
}

// clearAhead reports whether no stream fault lies inside the next header
// (a and before: the fault found for this Read, if any).
func (c *Conn) clearAhead(dir Dir, a *armed, before int) bool {
	if a != nil {
		return before >= headerSize
	}
	b, ahead := c.trigger(dir, headerSize)
	return b == nil || ahead >= headerSize
}

// hold hands as much of data as fits in p to the caller and keeps the rest
// for the next Read; if the end is hung, it keeps all of it and blocks (or,
// polled, returns 0 and nil while it would block).
func (c *Conn) hold(p, data []byte, err error, poll bool) (int, error) {
	c.mu.Lock()
	hung := c.hung
	c.mu.Unlock()
	n := 0
	if !hung {
		n = copy(p, data)
	}
	c.mu.Lock()
	c.pending = append(c.pending, data[n:]...)
	c.mu.Unlock()
	if hung {
		return notYet(0, c.state(Read, poll))
	}
	switch {
	case n > 0:
		return n, nil // the bytes now; an error comes again on a later Read
	case err == nil:
		return c.read(p, poll)
	}
	return notYet(0, err)
}

// Close closes the conn and unblocks a hung Read or Write. A hung end does
// not close its underlying conn: a hung process never closes its sockets,
// so its peers see silence (and time out), not EOF.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	c.mu.Lock()
	hung := c.hung
	c.mu.Unlock()
	if hung {
		// Unblock I/O waiting in the underlying conn without closing it.
		past := time.Unix(1, 0)
		_ = c.inner.SetDeadline(past)
		return nil
	}
	return c.inner.Close()
}

func (c *Conn) setDeadline(r, w bool, t time.Time) {
	c.mu.Lock()
	if r {
		c.rdeadline = t
	}
	if w {
		c.wdeadline = t
	}
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
}

// SetDeadline sets both deadlines.
func (c *Conn) SetDeadline(t time.Time) error {
	c.setDeadline(true, true, t)
	return c.inner.SetDeadline(t)
}

// SetReadDeadline sets the read deadline.
func (c *Conn) SetReadDeadline(t time.Time) error {
	c.setDeadline(true, false, t)
	return c.inner.SetReadDeadline(t)
}

// SetWriteDeadline sets the write deadline.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	c.setDeadline(false, true, t)
	return c.inner.SetWriteDeadline(t)
}
