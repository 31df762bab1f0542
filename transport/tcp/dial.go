package tcp

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/starcomm/starcomm/transport"
)

// ErrInvalidAddress is wrapped by the error Dial returns, without trying to
// connect, for an address that is not host:port with a host and a numeric
// port from 1 to 65535.
var ErrInvalidAddress = errors.New("invalid address")

// dnsNotFoundAttempts is how many "no such host" answers Dial takes before
// giving up: a name may appear in DNS a moment after its host starts, but a
// mistyped one never will.
const dnsNotFoundAttempts = 3

// errConnectTimeout is the cause Dial gives its context when ConnectTimeout
// elapses, to tell that apart from the caller's context ending.
var errConnectTimeout = errors.New("tcp: connect timeout")

// retryableErrnos are the connect errors that may go away by themselves:
// nobody listens yet, the route or host is not up yet, or the attempt timed
// out or was cut off. EHOSTDOWN is added where the platform defines it
// (errno_hostdown.go).
var retryableErrnos = []error{
	syscall.ECONNREFUSED,
	syscall.ECONNRESET,
	syscall.ECONNABORTED,
	syscall.EHOSTUNREACH,
	syscall.ENETUNREACH,
	syscall.ENETDOWN,
	syscall.ETIMEDOUT,
	syscall.EADDRNOTAVAIL, // ephemeral ports exhausted, or the local address not up yet
}

// Dialer connects to a Listener, retrying while the address is not reachable
// yet: workers often start before the coordinator listens. It implements
// transport.Dialer. A Dialer is safe for concurrent use.
type Dialer struct {
	cfg Config
	err error // cfg's validation error, returned by every Dial
	nd  net.Dialer

	// attempted, when set (by tests), is called after each failed
	// connection attempt with its number, from 1, and its error.
	attempted func(attempt int, err error)
}

var _ transport.Dialer = (*Dialer)(nil)

// NewDialer returns a Dialer with cfg's settings. An invalid cfg is not
// reported here: every Dial returns its validation error.
func NewDialer(cfg Config) *Dialer {
	return &Dialer{
		cfg: cfg,
		err: cfg.Validate(),
		nd: net.Dialer{
			Control:   control(cfg),
			KeepAlive: -1, // configure sets keep-alive once connected
		},
	}
}

// UnreachableError is returned by Dial when it gave up without a
// connection. Why it gave up tells the cases apart:
//   - TimedOut: Config.ConnectTimeout elapsed while the address stayed
//     unreachable. errors.Is(err, os.ErrDeadlineExceeded) holds.
//   - Context non-nil: the caller's ctx ended first; errors.Is(err,
//     context.Canceled) or errors.Is(err, context.DeadlineExceeded) holds.
//   - neither: an attempt failed in a way retrying will not fix, such as
//     "no such host" dnsNotFoundAttempts times in a row, or permission
//     denied.
//
// In every case Err is the last attempt's error and is wrapped, so
// errors.Is(err, syscall.ECONNREFUSED) holds when nobody was listening.
type UnreachableError struct {
	// Addr is the address dialed.
	Addr string
	// Attempts is the number of connection attempts started.
	Attempts int
	// Elapsed is the time from the first attempt to giving up.
	Elapsed time.Duration
	// TimedOut reports that Config.ConnectTimeout elapsed.
	TimedOut bool
	// Context is the cause of the caller's ctx ending, if that is what
	// stopped Dial, else nil.
	Context error
	// Err is the last attempt's error. When an attempt was cut short by
	// the timeout or ctx, it is the error of the attempt before, which says
	// more about the address.
	Err error
}

func (e *UnreachableError) Error() string {
	var why string
	switch {
	case e.TimedOut:
		why = "connect timeout elapsed"
	case e.Context != nil:
		why = e.Context.Error()
	default:
		why = "giving up"
	}
	msg := fmt.Sprintf("tcp: dial %s: unreachable after %d %s over %v (%s)",
		e.Addr, e.Attempts, plural(e.Attempts, "attempt"), e.Elapsed.Round(time.Millisecond), why)
	if e.Err != nil {
		msg += ": last error: " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the last attempt's error, the caller's context error, and
// os.ErrDeadlineExceeded when the connect timeout elapsed.
func (e *UnreachableError) Unwrap() []error {
	errs := make([]error, 0, 3)
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	if e.Context != nil {
		errs = append(errs, e.Context)
	}
	if e.TimedOut {
		errs = append(errs, os.ErrDeadlineExceeded)
	}
	return errs
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

// Dial connects to addr, a host:port, and returns a *Conn with the socket
// options applied. While the address refuses connections, is unreachable
// or times out, Dial retries with exponential backoff and jitter (from
// InitialBackoff doubling to MaxBackoff) until it connects, ConnectTimeout
// elapses, or ctx is done; then it returns an *UnreachableError. An address
// that is not host:port fails at once with an error wrapping
// ErrInvalidAddress, an invalid Config with its validation error.
func (d *Dialer) Dial(ctx context.Context, addr string) (transport.Conn, error) {
	if d.err != nil {
		return nil, d.err
	}
	if err := checkAddr(addr); err != nil {
		return nil, err
	}
	start := time.Now()
	connectDeadline := start.Add(d.cfg.ConnectTimeout)
	dctx, cancel := context.WithTimeoutCause(ctx, d.cfg.ConnectTimeout, errConnectTimeout)
	defer cancel()
	deadline, _ := dctx.Deadline() // the earlier of ConnectTimeout and ctx's deadline
	// expired reports whether time is up. It looks at the clock too: a
	// context's timer may fire a moment after its deadline, and an attempt
	// started in that moment fails at once with a meaningless "i/o timeout".
	expired := func() bool { return dctx.Err() != nil || !time.Now().Before(deadline) }

	var (
		attempts int
		notFound int
		last     error
		backoff  = d.cfg.InitialBackoff
	)
	fail := func(timeUp bool) error {
		e := &UnreachableError{Addr: addr, Attempts: attempts, Elapsed: time.Since(start), Err: last}
		if timeUp {
			switch {
			case ctx.Err() != nil:
				e.Context = context.Cause(ctx)
			case time.Now().Before(connectDeadline):
				// The caller's deadline passed; its ctx has not said so yet.
				e.Context = context.DeadlineExceeded
			default:
				e.TimedOut = true
			}
		}
		return e
	}
	for {
		attempts++
		nc, err := d.nd.DialContext(dctx, "tcp", addr)
		if err == nil {
			tc := nc.(*net.TCPConn)
			c, err := newConn(tc, d.cfg)
			if err != nil {
				tc.Close()
				return nil, fmt.Errorf("tcp: dial %s: setting socket options: %w", addr, err)
			}
			return c, nil
		}
		if expired() {
			// The attempt was cut short; an earlier attempt's error says
			// more about the address than "i/o timeout" or "operation was
			// canceled".
			if last == nil {
				last = err
			}
			return nil, fail(true)
		}
		last = err
		if d.attempted != nil {
			d.attempted(attempts, err)
		}
		if !retryable(err, &notFound) {
			return nil, fail(false)
		}
		timer := time.NewTimer(jitter(backoff))
		select {
		case <-timer.C:
		case <-dctx.Done():
			timer.Stop()
		}
		if expired() {
			return nil, fail(true)
		}
		backoff = min(2*backoff, d.cfg.MaxBackoff)
	}
}

// checkAddr rejects an address no retry can fix.
func checkAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("tcp: dial %q: %w: %v; want host:port", addr, ErrInvalidAddress, err)
	}
	if host == "" {
		return fmt.Errorf("tcp: dial %q: %w: missing host; want host:port", addr, ErrInvalidAddress)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("tcp: dial %q: %w: port %q is not a number from 1 to 65535", addr, ErrInvalidAddress, port)
	}
	return nil
}

// retryable reports whether a failed attempt is worth repeating. notFound
// counts "no such host" answers so far.
func retryable(err error, notFound *int) bool {
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		if dnsErr.IsNotFound {
			*notFound++
			return *notFound < dnsNotFoundAttempts
		}
		return dnsErr.IsTimeout || dnsErr.IsTemporary
	}
	for _, errno := range retryableErrnos {
		if errors.Is(err, errno) {
			return true
		}
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// jitter returns a random wait between d/2 and d, so workers that started
// together do not retry in lockstep.
func jitter(d time.Duration) time.Duration {
	half := d / 2
	return half + rand.N(d-half+1)
}
