package star

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// Handshake payload sizes (docs/protocol.md, "Start-up").
const (
	handshakeLen = 8 // rank u32 BE, size u32 BE
	ackLen       = 4 // size u32 BE
)

// EncodeHandshake returns the full Handshake frame a worker sends.
func EncodeHandshake(rank, size int) []byte {
	b := make([]byte, HeaderSize+handshakeLen)
	PutHeader(b, TagHandshake, handshakeLen)
	binary.BigEndian.PutUint32(b[5:9], uint32(rank))
	binary.BigEndian.PutUint32(b[9:13], uint32(size))
	return b
}

// EncodeAck returns the full Ack frame the coordinator sends.
func EncodeAck(size int) []byte {
	b := make([]byte, HeaderSize+ackLen)
	PutHeader(b, TagAck, ackLen)
	binary.BigEndian.PutUint32(b[5:9], uint32(size))
	return b
}

// ParseHandshake decodes a Handshake payload.
func ParseHandshake(p []byte) (rank, size uint32, err error) {
	if len(p) != handshakeLen {
		return 0, 0, fmt.Errorf("handshake payload is %d bytes, expected %d", len(p), handshakeLen)
	}
	return binary.BigEndian.Uint32(p[0:4]), binary.BigEndian.Uint32(p[4:8]), nil
}

// RefusedError is the cause when the coordinator refuses a worker's
// handshake; Reason is the coordinator's explanation.
type RefusedError struct {
	Reason string
	// Err is the coordinator's Abort, when the attempt is retried.
	Err error
}

func (e *RefusedError) Error() string { return "handshake refused by coordinator: " + e.Reason }

// Unwrap returns Err.
func (e *RefusedError) Unwrap() error { return e.Err }

// checkHandshake validates a worker's handshake against the coordinator's
// size and registered ranks; it returns the refusal reason, or "".
func checkHandshake(rank, size uint32, mySize int, taken func(int) bool) string {
	switch {
	case size != uint32(mySize):
		return fmt.Sprintf("size mismatch: worker rank %d says size %d, coordinator has size %d", rank, size, mySize)
	case rank == 0:
		return "rank 0 is the coordinator; workers have ranks 1.." + fmt.Sprint(mySize-1)
	case rank >= uint32(mySize):
		return fmt.Sprintf("rank %d out of range 1..%d", rank, mySize-1)
	case taken(int(rank)):
		return fmt.Sprintf("rank %d already registered", rank)
	}
	return ""
}

// dial runs a worker's start-up: connect (retrying) and send Handshake
// within ConnectTimeout, then wait for the Ack. The coordinator sends the
// Acks once every worker has joined, or an Abort saying which rank never
// came once its own ConnectTimeout is over; it started before this worker
// registered, so its answer comes within ConnectTimeout of registering. A
// worker waits that long plus min(ConnectTimeout/2, 500 ms), so that the
// coordinator's answer, not this worker's own deadline, ends its start-up.
//
// A coordinator whose own start-up is over refuses the Handshake (cause
// "running"): this worker reached the previous job on the same port, still
// ending. It tries again, with backoff, within ConnectTimeout.
func dial(ctx context.Context, cfg Config) (*link, error) {
	dctx, cancel := context.WithTimeoutCause(ctx, cfg.ConnectTimeout, connectTimeoutError{})
	defer cancel()
	backoff := 10 * time.Millisecond
	for running := 0; ; running++ {
		l, err := dialOnce(ctx, dctx, cfg)
		var ab *AbortError
		if !errors.As(err, &ab) || !errors.Is(ab, errRunningRemote) {
			if err != nil && running > 0 {
				err = fmt.Errorf("%w (before, a coordinator whose job was already running refused this worker %d time(s))", err, running)
			}
			return l, err
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-dctx.Done():
			t.Stop()
			return nil, blameCoordinator(ctx, fmt.Errorf("connect to coordinator at %s: only a coordinator whose job is already running answered within %v: %w", cfg.Addr, cfg.ConnectTimeout, err))
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// coordinatorFault wraps a worker's start-up failure that, as far as the
// worker can tell, is rank 0's: no coordinator could be reached at its
// address within ConnectTimeout (none listened, or only another job's),
// or the coordinator closed or reset the connection, or sent nothing, or
// sent what is not the protocol, before it answered the Handshake. Such a
// start-up blames rank 0 (startupBlame), so that a launcher following the
// ranks' error records is led to rank 0. A refusal or an Abort from the
// coordinator, a failed authentication, and the caller's own context are
// not wrapped: they say which rank is at fault, or this one.
type coordinatorFault struct{ err error }

func (e *coordinatorFault) Error() string { return e.err.Error() }
func (e *coordinatorFault) Unwrap() error { return e.err }

// blameCoordinator wraps err in a coordinatorFault unless ctx, the
// caller's context, has ended: then the caller gave up, not rank 0.
func blameCoordinator(ctx context.Context, err error) error {
	if dl, ok := ctx.Deadline(); ctx.Err() != nil || ok && !time.Now().Before(dl) {
		return err // (a context's timer may fire a moment after its deadline)
	}
	return &coordinatorFault{err: err}
}

// connectTimeoutError is the cause of dial's context once ConnectTimeout
// has elapsed. A dialer that gives up then says so ("connect timeout
// elapsed") whichever of its own timer and this one fired first: the
// same failure reads the same on every worker. It matches both
// context.DeadlineExceeded and os.ErrDeadlineExceeded.
type connectTimeoutError struct{}

func (connectTimeoutError) Error() string { return "connect timeout elapsed" }
func (connectTimeoutError) Timeout() bool { return true }
func (connectTimeoutError) Is(target error) bool {
	return target == contextDeadline || isTimeoutTarget(target)
}

// dialOnce is one attempt of dial.
func dialOnce(ctx, dctx context.Context, cfg Config) (*link, error) {
	conn, err := cfg.Dialer.Dial(dctx, cfg.Addr)
	if err != nil {
		err = fmt.Errorf("connect to coordinator at %s: %w", cfg.Addr, err)
		if dl, _ := dctx.Deadline(); dctx.Err() != nil || !time.Now().Before(dl) {
			// Unreachable for the whole connect timeout. (A dial that
			// fails at once, an address or a setting refused, is this
			// rank's.)
			err = blameCoordinator(ctx, err)
		}
		return nil, err
	}
	l := newLink(0, conn, cfg.Timeout)
	l.until, _ = dctx.Deadline()
	stop := context.AfterFunc(ctx, func() { l.cancel(ctx.Err()) })
	defer stop()
	fail := func(err error) (*link, error) {
		_ = conn.Close()
		if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
			err = fmt.Errorf("%w (%w)", err, ctx.Err())
		}
		return nil, err
	}
	if err := l.writeAll(EncodeHandshake(cfg.Rank, cfg.Size), nil); err != nil {
		return fail(blameCoordinator(ctx, fmt.Errorf("send handshake to %s: %w", cfg.Addr, err)))
	}
	wait := cfg.ConnectTimeout + replyMargin(cfg.ConnectTimeout)
	l.until = time.Now().Add(wait)
	var payload [ackLen]byte
	// With a token, the coordinator's first answer is its challenge.
	challenged := false
	if len(cfg.Token) > 0 {
		if err = answer(l, cfg.Token, TagHandshake, cfg.Rank, cfg.Size); err == nil {
			challenged = true
		}
	}
	if err == nil {
		err = l.readFrame(TagAck, payload[:])
	}
	if err != nil {
		var ab *AbortError
		var te *tagError
		switch {
		case errors.As(err, &ab) && errors.Is(ab, errRunningRemote):
			return fail(&RefusedError{Reason: ab.Reason, Err: ab})
		case errors.As(err, &ab) && errors.Is(ab, ErrAuthentication):
			return fail(fmt.Errorf("authentication (token) refused by the coordinator at %s: %w", cfg.Addr, &RefusedError{Reason: ab.Reason, Err: ab}))
		case errors.As(err, &te) && te.got == TagAuthChallenge:
			reason := fmt.Sprintf("rank %d has no token: it cannot answer the coordinator's authentication challenge", cfg.Rank)
			tellCoordinator(l, cfg.Rank, reason, ErrAuthentication, cfg.ShutdownTimeout)
			return fail(fmt.Errorf("authentication (token) refused: the coordinator at %s asks for authentication (it sent a challenge), but this rank has no token: give every rank the job's token (COBRE_TCP_TOKEN or COBRE_TCP_TOKEN_FILE): %w", cfg.Addr, ErrAuthentication))
		case errors.As(err, &te) && te.got == TagAck && len(cfg.Token) > 0 && !challenged:
			// Registered without a challenge: the coordinator has no token.
			// It learns why this rank leaves from the Abort.
			reason := fmt.Sprintf("rank %d has a token and the coordinator did not ask for it: rank 0 runs without authentication (give it the same token, or none to any rank)", cfg.Rank)
			tellCoordinator(l, cfg.Rank, reason, ErrAuthentication, cfg.ShutdownTimeout)
			return fail(fmt.Errorf("authentication (token) refused by this rank: the coordinator at %s acknowledged it without asking for its token, so rank 0 runs without one (give rank 0 the same token, or none to any rank): %w", cfg.Addr, ErrAuthentication))
		case errors.As(err, &ab) && ab.Op == OpStartup && !errors.Is(ab, errRefusedRemote):
			if len(cfg.Token) > 0 && !challenged {
				return fail(fmt.Errorf("the coordinator gave up start-up, having never asked this rank, which has a token, to authenticate (does rank 0 have the token?): %w", ab))
			}
			return fail(fmt.Errorf("the coordinator gave up start-up: %w", ab))
		case errors.As(err, &ab):
			return fail(&RefusedError{Reason: ab.Reason})
		case isTimeout(err) && len(cfg.Token) > 0 && !challenged:
			return fail(blameCoordinator(ctx, fmt.Errorf("sent the Handshake to the coordinator at %s, but it sent neither an authentication challenge nor an Abort within %v: %w", cfg.Addr, wait, err)))
		case isTimeout(err):
			return fail(blameCoordinator(ctx, fmt.Errorf("registered with the coordinator at %s, but it sent neither Ack nor Abort within %v (it answers once every rank has joined, or gives up after its connect timeout): %w", cfg.Addr, wait, err)))
		}
		return fail(blameCoordinator(ctx, fmt.Errorf("wait for the coordinator's Ack (sent once every rank has joined) from %s: %w", cfg.Addr, err)))
	}
	if got := binary.BigEndian.Uint32(payload[:]); got != uint32(cfg.Size) {
		return fail(fmt.Errorf("coordinator acknowledged size %d, this rank has size %d", got, cfg.Size))
	}
	if !stop() {
		return fail(ctx.Err()) // the caller's context ended just as the Ack came
	}
	l.until = time.Time{}
	l.timeout = cfg.Timeout + replyMargin(cfg.Timeout)
	l.resume()
	return l, nil
}
