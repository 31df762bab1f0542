package star

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/starcomm/starcomm/transport"
)

// MaxSize is the largest Size a communicator may have.
const MaxSize = 1 << 20

// Config configures one rank of a star communicator.
type Config struct {
	// Rank is this process's rank, 0..Size-1. Rank 0 is the coordinator.
	Rank int
	// Size is the number of ranks, 1..MaxSize.
	Size int
	// Timeout bounds every read and write of a collective, polled or not
	// (each call moves at most 4 MiB): a peer that lets nothing move for
	// this long is declared failed, at most min(Timeout/20, 250 ms) later
	// (deadlines are re-armed lazily, not on every I/O). The spec's
	// COBRE_TCP_TIMEOUT_SECS; default 60 s. A worker waits min(Timeout/2,
	// 500 ms) longer on its link to the coordinator, so that the
	// coordinator, which sees a hung rank first, can name it. A healthy
	// worker's Close waits this long for the coordinator's Shutdown.
	Timeout time.Duration
	// ConnectTimeout bounds start-up, alone: the coordinator's wait for
	// every worker, and a worker's dial and handshake. The coordinator
	// answers every worker at once when all have joined (Ack), or when it
	// gives up (an Abort naming the missing rank), so a worker waits for
	// that answer up to ConnectTimeout + min(ConnectTimeout/2, 500 ms)
	// after it registered. Default 30 s.
	ConnectTimeout time.Duration
	// HandshakeTimeout is how long the coordinator waits for an accepted
	// connection's Handshake frame before dropping it. Default 10 s (never
	// more than ConnectTimeout).
	HandshakeTimeout time.Duration
	// ShutdownTimeout bounds how long a healthy coordinator's Close waits
	// for the workers to take its Shutdown, and how long the links of a
	// failed communicator linger for their peers to close (Close cuts that
	// short). A failing collective waits at most min(ShutdownTimeout/2,
	// 200 ms) for its Aborts to be taken. Default 1 s.
	ShutdownTimeout time.Duration
	// Spin is how long a rank polls for a small frame (a payload of at most
	// 256 KiB) before it parks: the coordinator polls every worker link
	// from one goroutine, a worker its link to the coordinator. A frame
	// that arrives within Spin then costs no scheduler wake-up, which is
	// most of a small collective's latency; one that does not costs Spin of
	// CPU. Polling needs a transport that is a transport.Poller (TCP);
	// other transports always park. Negative turns polling off; zero means
	// the default, 100 µs. The spin adapts up to SpinMax.
	Spin time.Duration
	// SpinMax is the longest the spin grows to. After a polled wait of w
	// (from the start of a rank's wait for its small frames to their end)
	// of at most SpinMax, the rank's next polled wait spins for
	// max(Spin, min(2w, SpinMax)); after a longer one (a peer that was
	// computing), or after a collective that moved a frame of more than
	// 256 KiB (the copies bound those, and need the CPU), for Spin. So
	// where a collective's round takes longer than Spin (more ranks than
	// cores, a host whose wake-ups are slow), the ranks keep polling
	// through it instead of parking and paying a wake-up each, and a rank
	// that waits for a late peer burns at most SpinMax of CPU per
	// collective, and Spin once the lateness exceeds SpinMax. Zero means the default, 1 ms; a value at or below Spin
	// (negative included) keeps the spin at Spin.
	SpinMax time.Duration
	// Listener is where the coordinator accepts workers (rank 0 with
	// Size > 1). New takes ownership and closes it once every worker has
	// registered, or on failure.
	Listener transport.Listener
	// Dialer connects a worker to the coordinator (ranks 1..Size-1).
	Dialer transport.Dialer
	// Addr is the coordinator's address, passed to Dialer.
	Addr string
	// Liveness is how long a peer's control session may stay silent before
	// the peer is declared unresponsive: every rank's current or next
	// collective then fails naming it, however long Timeout is. Each end
	// of a control session sends a heartbeat every Liveness/10 from its
	// process, so a rank busy computing is never silent; a frozen process,
	// a dead host or a cut link is. Zero means the default, 10 s; negative
	// turns the control session off (no heartbeats, no out-of-band Abort,
	// no CheckCollectives): the data links alone, as the spec has them.
	// (COBRE_TCP_LIVENESS_SECS.)
	Liveness time.Duration
	// Logger, if set, receives the coordinator's stall reports (see
	// StallReport) and the liveness events of every rank. Nil logs nothing.
	// (COBRE_LOG.)
	Logger *slog.Logger
	// StallReport is how long a collective may wait on the coordinator
	// before it logs which ranks have arrived and which have not, again
	// every StallReport while it waits. It looks every StallReport/4, so
	// the first report comes between StallReport and 1.25 StallReport
	// into the wait. Zero means the default, 30 s.
	StallReport time.Duration
	// CheckCollectives makes every rank send, over its control session,
	// the fingerprint of each collective (its sequence number, operation,
	// element type, counts or length, root, reduce op) before its data;
	// the coordinator compares them and fails every rank, naming the one
	// that differs and how, when they disagree in a way the wire cannot
	// show (counts permuted with the same total, same-size element types, a
	// broadcast root). Off by default: it costs a message per rank per
	// collective. (COBRE_DEBUG=detail.)
	CheckCollectives bool
	// Token, if set, is the job's shared secret: every rank must have the
	// same one (COBRE_TCP_TOKEN, COBRE_TCP_TOKEN_FILE). The coordinator
	// then registers a worker, and approves a control connection, only
	// once it has answered a challenge (a fresh nonce) with the
	// HMAC-SHA256 of the nonce, its rank and size keyed with the token;
	// the token itself never crosses the wire. A connection that does not
	// answer rightly within HandshakeTimeout is refused with an Abort and
	// takes no rank. A worker with a token fails start-up (ErrAuthentication)
	// when the coordinator refuses its answer, or does not ask for one; a
	// worker without a token fails when the coordinator asks. So with a
	// token every rank must run this package: a spec-only peer cannot
	// answer. Nil or empty: no authentication, as the spec has it. It
	// authenticates ranks; it does not encrypt (see the package
	// documentation).
	Token Token
	// OnFailure, if set, is called once, with the communicator's first
	// failure (of start-up, a collective, or Close), synchronously, before
	// the failing call returns: a program that exits the instant it sees
	// the error has still reported it (starcomm writes it to
	// COBRE_ERROR_FILE for the launcher). It must not call the
	// communicator.
	OnFailure func(Failure)
}

// Failure is what OnFailure receives.
type Failure struct {
	// Op is the operation that failed: a collective's name (comm.OpBarrier
	// and the others), OpStartup or OpClose.
	Op string
	// Rank is this rank; Blamed the rank at fault as this rank sees it, or
	// -1 when unknown.
	Rank, Blamed int
	// Err is the error the call returns.
	Err error
}

// DefaultConfig returns a Config with the default timeouts and no rank,
// size or transport set.
func DefaultConfig() Config {
	return Config{
		Timeout:          60 * time.Second,
		ConnectTimeout:   30 * time.Second,
		HandshakeTimeout: 10 * time.Second,
		ShutdownTimeout:  time.Second,
		Spin:             100 * time.Microsecond,
		SpinMax:          time.Millisecond,
		Liveness:         10 * time.Second,
		StallReport:      30 * time.Second,
	}
}

// MaxDuration is the longest duration a Config field takes: a longer one
// (up to the largest time.Duration, a program's "no timeout") counts as
// MaxDuration, 10 years, which is no timeout in practice. The protocol
// adds margins to its timeouts (Timeout + min(Timeout/2, 500 ms), its
// slack, ConnectTimeout + its margin) and takes fractions of Liveness
// (Liveness*8/10): beyond this, that arithmetic would overflow.
const MaxDuration = 10 * 365 * 24 * time.Hour

// withDefaults fills zero durations with the defaults, and caps every
// duration at MaxDuration.
func (c Config) withDefaults() Config {
	for _, f := range []*time.Duration{&c.Timeout, &c.ConnectTimeout, &c.HandshakeTimeout, &c.ShutdownTimeout, &c.Spin, &c.SpinMax, &c.Liveness, &c.StallReport} {
		*f = min(*f, MaxDuration)
	}
	d := DefaultConfig()
	if c.Timeout == 0 {
		c.Timeout = d.Timeout
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = d.ConnectTimeout
	}
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = d.HandshakeTimeout
	}
	c.HandshakeTimeout = min(c.HandshakeTimeout, c.ConnectTimeout)
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = d.ShutdownTimeout
	}
	if c.Spin == 0 {
		c.Spin = d.Spin
	}
	if c.SpinMax == 0 {
		c.SpinMax = d.SpinMax
	}
	if c.Liveness == 0 {
		c.Liveness = d.Liveness
	}
	if c.StallReport <= 0 {
		c.StallReport = d.StallReport
	}
	return c
}

// control reports whether the control session is on.
func (c Config) control() bool { return c.Liveness > 0 }

// Validate reports the first invalid field, by name. Zero durations are
// valid (they mean the default).
func (c Config) Validate() error {
	switch {
	case c.Size < 1:
		return fmt.Errorf("star: Size is %d; it must be at least 1", c.Size)
	case c.Rank < 0 || c.Rank >= c.Size:
		return fmt.Errorf("star: Rank is %d; it must be in 0..%d for Size %d", c.Rank, c.Size-1, c.Size)
	case c.Size > MaxSize:
		return fmt.Errorf("star: Size is %d; at most %d ranks are supported", c.Size, MaxSize)
	case c.Timeout < 0:
		return fmt.Errorf("star: Timeout is %v; it must be positive", c.Timeout)
	case c.ConnectTimeout < 0:
		return fmt.Errorf("star: ConnectTimeout is %v; it must be positive", c.ConnectTimeout)
	case c.HandshakeTimeout < 0:
		return fmt.Errorf("star: HandshakeTimeout is %v; it must be positive", c.HandshakeTimeout)
	case c.ShutdownTimeout < 0:
		return fmt.Errorf("star: ShutdownTimeout is %v; it must be positive", c.ShutdownTimeout)
	case c.StallReport < 0:
		return fmt.Errorf("star: StallReport is %v; it must be positive", c.StallReport)
	case c.CheckCollectives && c.Liveness < 0:
		return fmt.Errorf("star: CheckCollectives needs the control session, which Liveness %v turns off", c.Liveness)
	case c.Size > 1 && c.Rank == 0 && c.Listener == nil:
		return fmt.Errorf("star: Listener is nil; the coordinator (rank 0) of a %d-rank communicator needs one", c.Size)
	case c.Rank > 0 && c.Dialer == nil:
		return fmt.Errorf("star: Dialer is nil; worker rank %d needs one to reach the coordinator", c.Rank)
	case c.Rank > 0 && c.Addr == "":
		return fmt.Errorf("star: Addr is empty; worker rank %d needs the coordinator's address", c.Rank)
	}
	return nil
}
