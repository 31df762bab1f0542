package tcp

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/starcomm/starcomm/internal/hostname"
	"github.com/starcomm/starcomm/transport"
)

// ErrInvalidAddress is wrapped by the error Dial returns, without trying to
// connect, for an address that is not host:port with a host (an IP address
// or a well-formed host name) and a numeric port from 1 to 65535.
var ErrInvalidAddress = errors.New("invalid address")

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

// addrTimeout bounds the connection attempt to one address of a name: a
// name whose first address drops packets reaches the next one after it,
// not after the connect timeout (Go's dialer gives each address an equal
// share of the time left). It is longer than the system's first SYN
// retransmission (1 s), so one lost SYN does not cut an attempt short; a
// cut attempt is retried like any timeout.
const addrTimeout = 2 * time.Second

// Dialer connects to a Listener, retrying while the address is not reachable
// yet: workers often start before the coordinator listens. It implements
// transport.Dialer. A Dialer is safe for concurrent use.
type Dialer struct {
	cfg Config
	err error // cfg's validation error, returned by every Dial
	nd  net.Dialer

	// pinned maps an address that Dial was given (host:port) to the
	// address it last connected to (netip.AddrPort): a later Dial of the
	// same address (a worker's control session, beside its data link)
	// tries that one first, if the name still has it, not the name's
	// first address again, which may drop packets. A pinned address that
	// fails is forgotten.
	pinned sync.Map

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
			Control:   control(cfg, dialCongestion(cfg)),
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
//     permission denied.
//
// In every case Err is the last attempt's error and is wrapped, so
// errors.Is(err, syscall.ECONNREFUSED) holds when nobody was listening.
// Unresolved tells that the host name never resolved (the last attempt's
// error is a *net.DNSError); the message then says so: "name node0 did not
// resolve within 30s".
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
	// Unresolved reports that Err is a failure to resolve the host name
	// (a *net.DNSError): the name did not resolve, so no connection was
	// even tried.
	Unresolved bool
	// ConnectTimeout is the Config's ConnectTimeout.
	ConnectTimeout time.Duration
}

// Error names the address, why the dialer gave up and the last dial error.
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
	if e.Unresolved {
		host, _, err := net.SplitHostPort(e.Addr)
		if err != nil {
			host = e.Addr
		}
		within := e.Elapsed.Round(time.Millisecond)
		switch {
		case e.TimedOut && e.ConnectTimeout > 0:
			within = e.ConnectTimeout
		case within >= time.Second:
			within = e.Elapsed.Round(100 * time.Millisecond) // "30s", not "30.001s"
		}
		msg = fmt.Sprintf("tcp: dial %s: name %s did not resolve within %v (%d %s; %s)",
			e.Addr, host, within, e.Attempts, plural(e.Attempts, "attempt"), why)
	}
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
// or times out, or its host name does not resolve (yet), Dial retries with
// exponential backoff and jitter (from InitialBackoff doubling to
// MaxBackoff) until it connects, ConnectTimeout elapses, or ctx is done;
// then it returns an *UnreachableError. An address that is not host:port,
// or whose host is neither an IP address nor a well-formed host name, fails
// at once with an error wrapping ErrInvalidAddress, an invalid Config with
// its validation error.
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
		last     error
		backoff  = d.cfg.InitialBackoff
	)
	fail := func(timeUp bool) error {
		var dnsErr *net.DNSError
		e := &UnreachableError{Addr: addr, Attempts: attempts, Elapsed: time.Since(start), Err: last,
			Unresolved: errors.As(last, &dnsErr), ConnectTimeout: d.cfg.ConnectTimeout}
		if timeUp {
			if dl, ok := ctx.Deadline(); ok && ctx.Err() == nil && !time.Now().Before(dl) {
				// The caller's deadline is the one that passed, and its
				// timer is due: its cause (the caller's words for it)
				// says more than ours.
				<-ctx.Done()
			}
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
		nc, err := d.attempt(dctx, addr, attempts)
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
		if !retryable(err) {
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

// attempt makes connection attempt number n to addr (valid, see checkAddr):
// to each address of its host in turn (an IP address: itself), each for
// at most addrTimeout, beginning with the address pinned by the last
// success if the host still has it, else with the ((n-1) mod k)-th of
// its k addresses, so that retries begin past an address that drops
// packets. The name is resolved under ctx alone: a slow name server is not
// cut short by addrTimeout. When every address fails, the error is the
// one address's, or an *addrErrors naming each.
func (d *Dialer) attempt(ctx context.Context, addr string, n int) (net.Conn, error) {
	host, portText, _ := net.SplitHostPort(addr)
	port, _ := strconv.ParseUint(portText, 10, 16)
	var ips []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		ips = []netip.Addr{ip}
	} else {
		r := d.nd.Resolver
		if r == nil {
			r = net.DefaultResolver
		}
		if ips, err = r.LookupNetIP(ctx, "ip", host); err != nil {
			return nil, err
		}
		if len(ips) == 0 {
			return nil, &net.DNSError{Err: "no address", Name: host, IsNotFound: true}
		}
	}
	targets := make([]netip.AddrPort, len(ips))
	for i, ip := range ips {
		targets[i] = netip.AddrPortFrom(ip.Unmap(), uint16(port))
	}
	first := (n - 1) % len(targets)
	pin, pinned := d.pinned.Load(addr)
	if pinned {
		if i := slices.Index(targets, pin.(netip.AddrPort)); i >= 0 {
			first = i
		} else {
			pinned = false
		}
	}
	var errs addrErrors
	for k := range targets {
		t := targets[(first+k)%len(targets)]
		actx, cancel := context.WithTimeout(ctx, addrTimeout)
		nc, err := d.nd.DialContext(actx, "tcp", t.String())
		cancel()
		if err == nil {
			d.pinned.Store(addr, t)
			return nc, nil
		}
		if k == 0 && pinned {
			d.pinned.CompareAndDelete(addr, pin)
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	if len(errs) == 1 {
		return nil, errs[0]
	}
	return nil, errs
}

// addrErrors are the errors of one connection attempt to each address of
// a name, in the order tried.
type addrErrors []error

// Error writes every address's error on one line.
func (e addrErrors) Error() string {
	s := make([]string, len(e))
	for i, err := range e {
		s[i] = err.Error()
	}
	return strings.Join(s, "; ")
}

// Unwrap returns the errors, for errors.Is and errors.As.
func (e addrErrors) Unwrap() []error { return e }

// checkAddr rejects an address no retry can fix.
func checkAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("tcp: dial %q: %w: %v; want host:port", addr, ErrInvalidAddress, err)
	}
	if host == "" {
		return fmt.Errorf("tcp: dial %q: %w: missing host; want host:port", addr, ErrInvalidAddress)
	}
	if err := CheckHost(host); err != nil {
		return fmt.Errorf("tcp: dial %q: %w: %v", addr, ErrInvalidAddress, err)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("tcp: dial %q: %w: port %q is not a number from 1 to 65535", addr, ErrInvalidAddress, port)
	}
	return nil
}

// CheckHost returns nil for an IP address (IPv6 with or without a zone,
// without brackets) or a well-formed host name: at most 253 characters in
// dot-separated labels of 1 to 63 letters, digits, '-' and '_', none
// starting or ending with '-', and not all digits and dots. Such a name
// may not resolve yet, and Dial waits for it; anything else never will:
// Dial refuses it at once with ErrInvalidAddress, and the configuration
// refuses it as a coordinator or bind address. An IPv6 address's zone
// (fe80::1%eth0, or an interface's index, fe80::1%2) must name one of this
// host's network interfaces: the zone is the interface this host reaches
// the address through, and the system would refuse any other only at
// connect ("invalid argument"). The error says what is wrong.
func CheckHost(host string) error {
	if a, err := netip.ParseAddr(host); err == nil {
		return checkZone(host, a.Zone())
	}
	if strings.Contains(host, ":") {
		return fmt.Errorf("host %q is not a valid IPv6 address", host)
	}
	if err := hostname.Check(host); err != nil {
		if errors.Is(err, hostname.ErrAllDigits) {
			return fmt.Errorf("host %q is not a valid IPv4 address", host)
		}
		return err
	}
	return nil
}

// checkZone returns nil for no zone or one that names a network interface
// of this host, by name or by index; otherwise an error naming the host,
// the zone and the interfaces there are.
func checkZone(host, zone string) error {
	if zone == "" {
		return nil
	}
	var err error
	if i, aerr := strconv.Atoi(zone); aerr == nil {
		_, err = net.InterfaceByIndex(i)
	} else {
		_, err = net.InterfaceByName(zone)
	}
	if err == nil {
		return nil
	}
	var names []string
	if ifs, ierr := net.Interfaces(); ierr == nil {
		for _, f := range ifs {
			names = append(names, fmt.Sprintf("%s (%d)", f.Name, f.Index))
		}
	}
	if len(names) == 0 {
		return fmt.Errorf("host %q: zone %q names no network interface of this host (%v)", host, zone, err)
	}
	return fmt.Errorf("host %q: zone %q names no network interface of this host (it has %s)", host, zone, strings.Join(names, ", "))
}

// retryable reports whether a failed attempt is worth repeating. Every
// failure to resolve the host name is: a name that does not resolve now
// (no such host, a DNS server that does not answer or fails) may resolve
// in a moment, as pod names do once Kubernetes' DNS has caught up.
func retryable(err error) bool {
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return true
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
