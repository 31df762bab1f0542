package tcp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/starcomm/starcomm/transport"
	"github.com/starcomm/starcomm/transport/transporttest"
)

// watchdog bounds every blocking step; a step that takes longer is a hang.
const watchdog = 10 * time.Second

// testConfig is DefaultConfig on loopback with quick retries.
func testConfig() Config {
	cfg := DefaultConfig()
	cfg.BindAddr = "127.0.0.1"
	cfg.ConnectTimeout = 5 * time.Second
	cfg.InitialBackoff = 5 * time.Millisecond
	cfg.MaxBackoff = 50 * time.Millisecond
	return cfg
}

// deadAddr returns a loopback address nobody listens on: a port that was
// free a moment ago.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("finding a free port: %v", err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func portOf(t *testing.T, addr string) int {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func async[T any](f func() T) <-chan T {
	ch := make(chan T, 1)
	go func() { ch <- f() }()
	return ch
}

func await[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	timer := time.NewTimer(watchdog)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("hang: %s did not return within %v", what, watchdog)
		panic("unreachable")
	}
}

type connResult struct {
	c   transport.Conn
	err error
}

func dialAsync(ctx context.Context, d *Dialer, addr string) <-chan connResult {
	return async(func() connResult { c, err := d.Dial(ctx, addr); return connResult{c, err} })
}

func acceptAsync(l *Listener) <-chan connResult {
	return async(func() connResult { c, err := l.Accept(); return connResult{c, err} })
}

// pair connects a Dialer and a Listener with cfg and returns both ends,
// closed when the test ends.
func pair(t *testing.T, cfg Config) (dialed, accepted *Conn) {
	t.Helper()
	l, err := Listen(cfg, 0)
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return connect(t, l, cfg)
}

// connect dials l with cfg's Dialer and accepts the connection: its two
// ends, closed when the test ends.
func connect(t *testing.T, l *Listener, cfg Config) (dialed, accepted *Conn) {
	t.Helper()
	acc := acceptAsync(l)
	d := await(t, dialAsync(t.Context(), NewDialer(cfg), l.Addr()), "Dial")
	if d.err != nil {
		t.Fatalf("Dial: %v", d.err)
	}
	t.Cleanup(func() { d.c.Close() })
	a := await(t, acc, "Accept")
	if a.err != nil {
		t.Fatalf("Accept: %v", a.err)
	}
	t.Cleanup(func() { a.c.Close() })
	return d.c.(*Conn), a.c.(*Conn)
}

// roundTrip checks that a message goes each way between a and b.
func roundTrip(t *testing.T, a, b transport.Conn) {
	t.Helper()
	for _, dir := range []struct {
		w, r transport.Conn
		msg  string
	}{{a, b, "ping"}, {b, a, "pong"}} {
		wr := async(func() error { _, err := dir.w.Write([]byte(dir.msg)); return err })
		got := make([]byte, len(dir.msg))
		rd := async(func() error { _, err := io.ReadFull(dir.r, got); return err })
		if err := await(t, wr, "Write"); err != nil {
			t.Fatalf("Write: %v", err)
		}
		if err := await(t, rd, "Read"); err != nil {
			t.Fatalf("Read: %v", err)
		}
		if string(got) != dir.msg {
			t.Fatalf("read %q, want %q", got, dir.msg)
		}
	}
}

func TestConformance(t *testing.T) {
	transporttest.Run(t, func(t *testing.T) transporttest.Harness {
		cfg := testConfig()
		cfg.ConnectTimeout = 300 * time.Millisecond // the refused dial retries this long
		return transporttest.Harness{
			Listen: func() (transport.Listener, error) {
				l, err := Listen(cfg, 0)
				if err != nil {
					return nil, err
				}
				return l, nil
			},
			Dialer:   NewDialer(cfg),
			DeadAddr: deadAddr,
			Timeout:  watchdog,
		}
	})
}

func TestListenPortAndAddr(t *testing.T) {
	l, err := Listen(testConfig(), 0)
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	defer l.Close()
	if l.Port() <= 0 {
		t.Fatalf("Port() = %d after Listen on port 0, want the chosen port", l.Port())
	}
	if want := fmt.Sprintf("127.0.0.1:%d", l.Port()); l.Addr() != want {
		t.Fatalf("Addr() = %q, want %q", l.Addr(), want)
	}
}

// acceptAndClose accepts connections on l and closes them, until l is
// closed.
func acceptAndClose(l *Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		_ = c.Close()
	}
}

// TestListenIPv4Only: 0.0.0.0 is every IPv4 interface and IPv4 only (a
// connection to ::1 is refused; Go's "tcp" network listened there on a
// dual-stack socket that took it); :: is every interface, IPv4 and IPv6.
func TestListenIPv4Only(t *testing.T) {
	for _, tc := range []struct {
		bind string
		ipv6 bool
	}{{"0.0.0.0", false}, {"::", true}} {
		t.Run(tc.bind, func(t *testing.T) {
			cfg := testConfig()
			cfg.BindAddr = tc.bind
			l, err := Listen(cfg, 0)
			if err != nil {
				t.Fatalf("Listen: %v", err)
			}
			defer l.Close()
			go acceptAndClose(l)
			port := strconv.Itoa(l.Port())
			c, err := net.Dial("tcp4", net.JoinHostPort("127.0.0.1", port))
			if err != nil {
				t.Fatalf("dial 127.0.0.1: %v", err)
			}
			_ = c.Close()
			c, err = net.Dial("tcp6", net.JoinHostPort("::1", port))
			if tc.ipv6 && err != nil {
				t.Fatalf("dial ::1 with %s bound: %v", tc.bind, err)
			}
			if !tc.ipv6 {
				if err == nil {
					_ = c.Close()
					t.Fatalf("dial ::1 with %s bound: connected, want refused (IPv4 only)", tc.bind)
				}
				if !errors.Is(err, syscall.ECONNREFUSED) {
					t.Fatalf("dial ::1 with %s bound: %v, want connection refused", tc.bind, err)
				}
			}
			if err == nil {
				_ = c.Close()
			}
		})
	}
}

func TestListenAddrInUse(t *testing.T) {
	cfg := testConfig()
	l, err := Listen(cfg, 0)
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	defer l.Close()
	l2, err := Listen(cfg, l.Port())
	if err == nil {
		l2.Close()
		t.Fatalf("second Listen on port %d succeeded", l.Port())
	}
	var inUse *AddrInUseError
	if !errors.As(err, &inUse) {
		t.Fatalf("second Listen: got %T %v, want *AddrInUseError", err, err)
	}
	if inUse.Addr != l.Addr() {
		t.Errorf("AddrInUseError.Addr = %q, want %q", inUse.Addr, l.Addr())
	}
	if !strings.Contains(err.Error(), l.Addr()) || !strings.Contains(err.Error(), "already in use") {
		t.Errorf("error %q should name the address %s and say it is in use", err, l.Addr())
	}
	if !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("error %v does not wrap syscall.EADDRINUSE", err)
	}
}

// TestListenNotThisHost binds to an address no interface of this host has
// (192.0.2.1, TEST-NET-1): the error names the bind address, says it is
// not this host's, and wraps EADDRNOTAVAIL.
func TestListenNotThisHost(t *testing.T) {
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_nonlocal_bind"); err == nil && strings.TrimSpace(string(b)) != "0" {
		t.Skip("net.ipv4.ip_nonlocal_bind is set: any address can be bound")
	}
	cfg := testConfig()
	cfg.BindAddr = "192.0.2.1"
	l, err := Listen(cfg, 0)
	if err == nil {
		l.Close()
		t.Fatal("Listen on 192.0.2.1 succeeded")
	}
	if !errors.Is(err, syscall.EADDRNOTAVAIL) {
		t.Errorf("error %v does not wrap syscall.EADDRNOTAVAIL", err)
	}
	for _, want := range []string{"192.0.2.1 is not an address of this host's", "COBRE_TCP_BIND_ADDR"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

func TestListenRejects(t *testing.T) {
	bad := testConfig()
	bad.Timeout = 0
	for _, tc := range []struct {
		name string
		cfg  Config
		port int
		want string
	}{
		{"port=-1", testConfig(), -1, "port -1 out of range"},
		{"port=65536", testConfig(), 65536, "port 65536 out of range"},
		{"config=bad", bad, 0, "Config.Timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := Listen(tc.cfg, tc.port)
			if err == nil {
				l.Close()
				t.Fatal("Listen succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Listen error %q does not mention %q", err, tc.want)
			}
		})
	}
}

// TestDialBeforeListen starts a Dial to a port nobody listens on yet, waits
// until an attempt has been refused, then starts the Listener there: the
// Dial must connect.
func TestDialBeforeListen(t *testing.T) {
	cfg := testConfig()
	cfg.ConnectTimeout = 30 * time.Second
	addr := deadAddr(t)
	d := NewDialer(cfg)
	refused := make(chan error, 1)
	d.attempted = func(_ int, err error) {
		select {
		case refused <- err:
		default:
		}
	}
	dial := dialAsync(t.Context(), d, addr)
	if err := await(t, refused, "first refused attempt"); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("first attempt: got %v, want connection refused", err)
	}
	l, err := Listen(cfg, portOf(t, addr))
	if err != nil {
		t.Fatalf("Listen on %s: %v", addr, err)
	}
	defer l.Close()
	acc := acceptAsync(l)
	dr := await(t, dial, "Dial once the listener is up")
	if dr.err != nil {
		t.Fatalf("Dial once the listener is up: %v", dr.err)
	}
	defer dr.c.Close()
	ar := await(t, acc, "Accept")
	if ar.err != nil {
		t.Fatalf("Accept: %v", ar.err)
	}
	defer ar.c.Close()
	roundTrip(t, dr.c, ar.c)
}

func TestDialNeverListens(t *testing.T) {
	cfg := testConfig()
	cfg.ConnectTimeout = 500 * time.Millisecond
	addr := deadAddr(t)
	start := time.Now()
	res := await(t, dialAsync(t.Context(), NewDialer(cfg), addr), "Dial to a port that never opens")
	elapsed := time.Since(start)
	if res.err == nil {
		res.c.Close()
		t.Fatalf("Dial(%s) succeeded; nobody listens there", addr)
	}
	if elapsed < cfg.ConnectTimeout || elapsed > cfg.ConnectTimeout+3*time.Second {
		t.Errorf("Dial gave up after %v, want about ConnectTimeout (%v)", elapsed, cfg.ConnectTimeout)
	}
	var ue *UnreachableError
	if !errors.As(res.err, &ue) {
		t.Fatalf("Dial: got %T %v, want *UnreachableError", res.err, res.err)
	}
	if !ue.TimedOut || ue.Context != nil {
		t.Errorf("TimedOut = %v, Context = %v; want true, nil", ue.TimedOut, ue.Context)
	}
	if ue.Attempts <= 1 {
		t.Errorf("Attempts = %d, want more than 1 (it should retry)", ue.Attempts)
	}
	if ue.Addr != addr {
		t.Errorf("Addr = %q, want %q", ue.Addr, addr)
	}
	for _, target := range []error{syscall.ECONNREFUSED, os.ErrDeadlineExceeded} {
		if !errors.Is(res.err, target) {
			t.Errorf("errors.Is(%v, %v) = false, want true", res.err, target)
		}
	}
	if errors.Is(res.err, context.Canceled) {
		t.Errorf("errors.Is(%v, context.Canceled) = true, want false", res.err)
	}
	for _, part := range []string{addr, fmt.Sprintf("%d attempts", ue.Attempts), "connect timeout", "connection refused"} {
		if !strings.Contains(res.err.Error(), part) {
			t.Errorf("error %q does not mention %q", res.err, part)
		}
	}
}

func TestDialContextCanceled(t *testing.T) {
	cfg := testConfig()
	cfg.ConnectTimeout = 30 * time.Second
	addr := deadAddr(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	d := NewDialer(cfg)
	d.attempted = func(int, error) { cancel() }
	res := await(t, dialAsync(ctx, d, addr), "Dial after its context is canceled")
	if res.err == nil {
		res.c.Close()
		t.Fatal("Dial succeeded")
	}
	var ue *UnreachableError
	if !errors.As(res.err, &ue) {
		t.Fatalf("Dial: got %T %v, want *UnreachableError", res.err, res.err)
	}
	if ue.TimedOut || ue.Context != context.Canceled {
		t.Errorf("TimedOut = %v, Context = %v; want false, context.Canceled", ue.TimedOut, ue.Context)
	}
	if !errors.Is(res.err, context.Canceled) || !errors.Is(res.err, syscall.ECONNREFUSED) {
		t.Errorf("error %v should satisfy errors.Is for context.Canceled and syscall.ECONNREFUSED", res.err)
	}
	if errors.Is(res.err, os.ErrDeadlineExceeded) {
		t.Errorf("error %v satisfies errors.Is(os.ErrDeadlineExceeded); the connect timeout did not elapse", res.err)
	}
}

func TestDialInvalidAddress(t *testing.T) {
	d := NewDialer(testConfig())
	d.attempted = func(n int, err error) { t.Errorf("attempt %d made for an invalid address: %v", n, err) }
	for _, addr := range []string{"127.0.0.1", "127.0.0.1:", ":29500", "127.0.0.1:http", "127.0.0.1:0", "127.0.0.1:65536", "127.0.0.1:-1",
		"no de:29500", "node0!:29500", "-node0:29500", "node0..svc:29500", "999.1.1.1:29500", "10.0.0:29500", "[fe80::zz]:29500", "[fe80::1%nosuchif0]:29500",
		strings.Repeat("a", 64) + ".example:29500"} {
		t.Run("addr="+addr, func(t *testing.T) {
			res := await(t, dialAsync(t.Context(), d, addr), "Dial")
			if res.err == nil {
				res.c.Close()
				t.Fatal("Dial succeeded")
			}
			if !errors.Is(res.err, ErrInvalidAddress) {
				t.Fatalf("got %v, want an error wrapping ErrInvalidAddress", res.err)
			}
			if !strings.Contains(res.err.Error(), fmt.Sprintf("%q", addr)) {
				t.Errorf("error %q does not quote the address", res.err)
			}
		})
	}
}

func TestDialInvalidConfig(t *testing.T) {
	cfg := testConfig()
	cfg.MaxBackoff = time.Millisecond // below InitialBackoff
	res := await(t, dialAsync(t.Context(), NewDialer(cfg), deadAddr(t)), "Dial")
	var ce *ConfigError
	if !errors.As(res.err, &ce) || ce.Field != "MaxBackoff" {
		t.Fatalf("Dial with a bad Config: got %v, want a *ConfigError for MaxBackoff", res.err)
	}
}

// fakeResolver returns a resolver that asks only the fake DNS server at
// addr.
func fakeResolver(addr string) *net.Resolver {
	return &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var nd net.Dialer
			return nd.DialContext(ctx, "udp", addr)
		},
	}
}

// TestDialNameResolvesLater: a name that does not resolve at first (the
// fake DNS server answers NXDOMAIN, as a cluster's DNS does for a pod it
// has not caught up with) and resolves from the sixth attempt on: Dial
// keeps retrying through the "no such host" answers and connects.
func TestDialNameResolvesLater(t *testing.T) {
	var known atomic.Bool
	dns := fakeDNSServer(t, &known)
	cfg := testConfig()
	cfg.ConnectTimeout = 30 * time.Second
	l, err := Listen(cfg, 0)
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	defer l.Close()
	acc := acceptAsync(l)
	d := NewDialer(cfg)
	d.nd.Resolver = fakeResolver(dns)
	const unresolved = 5
	var failed []error
	d.attempted = func(n int, err error) {
		failed = append(failed, err)
		if n == unresolved {
			known.Store(true) // the name is in DNS from the next attempt on
		}
	}
	res := await(t, dialAsync(t.Context(), d, "node0.invalid.:"+strconv.Itoa(l.Port())), "Dial to a name that resolves later")
	if res.err != nil {
		t.Fatalf("Dial: %v (failed attempts: %v)", res.err, failed)
	}
	defer res.c.Close()
	a := await(t, acc, "Accept")
	if a.err != nil {
		t.Fatalf("Accept: %v", a.err)
	}
	defer a.c.Close()
	roundTrip(t, res.c, a.c)
	if len(failed) != unresolved {
		t.Errorf("%d failed attempts, want %d: %v", len(failed), unresolved, failed)
	}
	for i, err := range failed {
		var dnsErr *net.DNSError
		if !errors.As(err, &dnsErr) || !dnsErr.IsNotFound {
			t.Errorf("attempt %d: got %v, want a *net.DNSError with IsNotFound", i+1, err)
		}
	}
}

// TestDialNameNeverResolves: a name that never resolves (NXDOMAIN to
// every query) is retried until ConnectTimeout, and the error says that
// the name did not resolve, wrapping the *net.DNSError and
// os.ErrDeadlineExceeded.
func TestDialNameNeverResolves(t *testing.T) {
	var known atomic.Bool
	dns := fakeDNSServer(t, &known)
	cfg := testConfig()
	cfg.ConnectTimeout = 400 * time.Millisecond
	d := NewDialer(cfg)
	d.nd.Resolver = fakeResolver(dns)
	res := await(t, dialAsync(t.Context(), d, "no-such-host.invalid.:29500"), "Dial to an unknown host")
	if res.err == nil {
		res.c.Close()
		t.Fatal("Dial succeeded")
	}
	var ue *UnreachableError
	if !errors.As(res.err, &ue) {
		t.Fatalf("Dial: got %T %v, want *UnreachableError", res.err, res.err)
	}
	var dnsErr *net.DNSError
	if !errors.As(res.err, &dnsErr) || !dnsErr.IsNotFound {
		t.Fatalf("Dial: got %v, want a *net.DNSError with IsNotFound", res.err)
	}
	if !ue.TimedOut || ue.Context != nil || !ue.Unresolved {
		t.Errorf("TimedOut = %v, Context = %v, Unresolved = %v; want true, nil, true", ue.TimedOut, ue.Context, ue.Unresolved)
	}
	if ue.Attempts <= 3 || ue.Elapsed < cfg.ConnectTimeout {
		t.Errorf("gave up after %d attempts over %v; want retries until ConnectTimeout (%v)", ue.Attempts, ue.Elapsed, cfg.ConnectTimeout)
	}
	if !errors.Is(res.err, os.ErrDeadlineExceeded) {
		t.Errorf("errors.Is(%v, os.ErrDeadlineExceeded) = false", res.err)
	}
	want := fmt.Sprintf("tcp: dial no-such-host.invalid.:29500: name no-such-host.invalid. did not resolve within 400ms (%d attempts; connect timeout elapsed): last error: ", ue.Attempts)
	if !strings.HasPrefix(res.err.Error(), want) || !strings.Contains(res.err.Error(), "no such host") {
		t.Errorf("error %q\nwant it to start %q and say \"no such host\"", res.err, want)
	}
}

// fakeDNSServer serves DNS on a loopback UDP port and returns its address.
// While known is false it answers every query "no such name" (NXDOMAIN);
// once it is true, it answers an A query with 127.0.0.1 and any other
// query with no records.
func fakeDNSServer(t *testing.T, known *atomic.Bool) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("fake DNS server: %v", err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if resp := dnsAnswer(buf[:n], known.Load()); resp != nil {
				pc.WriteTo(resp, from)
			}
		}
	}()
	return pc.LocalAddr().String()
}

// dnsAnswer builds the answer to a DNS query: the query's header and
// question with QR and RA set, and then either RCODE 3 (NXDOMAIN) and no
// records, or, when known, RCODE 0 and for an A query (QTYPE 1) one
// answer, 127.0.0.1.
func dnsAnswer(q []byte, known bool) []byte {
	const header = 12
	if len(q) < header {
		return nil
	}
	end := header
	for end < len(q) && q[end] != 0 { // the question's name, label by label
		end += 1 + int(q[end])
	}
	end += 1 + 4 // the root label, QTYPE and QCLASS
	if end > len(q) {
		return nil
	}
	resp := append([]byte(nil), q[:end]...)
	resp[2] = 0x80 | q[2]&0x01 // QR=1, RD copied
	resp[3] = 0x80 | 3         // RA=1, RCODE=NXDOMAIN
	resp[4], resp[5] = 0, 1    // QDCOUNT=1
	clear(resp[6:header])      // no answer, authority or additional records
	if !known {
		return resp
	}
	resp[3] = 0x80 // RCODE=NOERROR
	if qtype := int(q[end-4])<<8 | int(q[end-3]); qtype == 1 {
		resp[7] = 1 // ANCOUNT=1
		resp = append(resp,
			0xc0, header, // the name: a pointer to the question's
			0, 1, 0, 1, // TYPE A, CLASS IN
			0, 0, 0, 0, // TTL 0
			0, 4, 127, 0, 0, 1, // RDLENGTH 4, 127.0.0.1
		)
	}
	return resp
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig().Validate() = %v", err)
	}
	ok := []func(*Config){
		func(c *Config) { c.KeepAlive = -1 },
		func(c *Config) { c.BufferSize = 0 },
		func(c *Config) { c.BindAddr = "::" },
		func(c *Config) { c.BindAddr = "localhost" },
		func(c *Config) { c.MaxBackoff = c.InitialBackoff },
		func(c *Config) { c.OnHostCongestion = "" },
		func(c *Config) { c.OnHostCongestion = "bbr" },
		func(c *Config) { c.OnHostCongestion = "no_such_cc_1234" }, // 15 characters: the kernel's to refuse
	}
	for i, mutate := range ok {
		cfg := DefaultConfig()
		mutate(&cfg)
		if err := cfg.Validate(); err != nil {
			t.Errorf("valid config %d: Validate() = %v", i, err)
		}
	}
	for _, tc := range []struct {
		field, value string
		mutate       func(*Config)
	}{
		{"BindAddr", "empty", func(c *Config) { c.BindAddr = "" }},
		{"BindAddr", "with-port", func(c *Config) { c.BindAddr = "127.0.0.1:29500" }},
		{"Timeout", "0", func(c *Config) { c.Timeout = 0 }},
		{"Timeout", "1us", func(c *Config) { c.Timeout = time.Microsecond }},
		{"Timeout", "1000h", func(c *Config) { c.Timeout = 1000 * time.Hour }},
		{"ConnectTimeout", "0", func(c *Config) { c.ConnectTimeout = 0 }},
		{"ConnectTimeout", "-1s", func(c *Config) { c.ConnectTimeout = -time.Second }},
		{"KeepAlive", "0", func(c *Config) { c.KeepAlive = 0 }},
		{"BufferSize", "-1", func(c *Config) { c.BufferSize = -1 }},
		{"InitialBackoff", "0", func(c *Config) { c.InitialBackoff = 0 }},
		{"MaxBackoff", "below-initial", func(c *Config) { c.MaxBackoff = c.InitialBackoff - 1 }},
		{"OnHostCongestion", "16-characters", func(c *Config) { c.OnHostCongestion = "no_such_cc_12345" }},
		{"OnHostCongestion", "space", func(c *Config) { c.OnHostCongestion = "cubic " }},
		{"OnHostCongestion", "slash", func(c *Config) { c.OnHostCongestion = "../cubic" }},
	} {
		t.Run("field="+tc.field+"/value="+tc.value, func(t *testing.T) {
			cfg := DefaultConfig()
			tc.mutate(&cfg)
			err := cfg.Validate()
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Field != tc.field {
				t.Fatalf("Validate() = %v, want a *ConfigError for %s", err, tc.field)
			}
			if !strings.Contains(err.Error(), "Config."+tc.field+" ") {
				t.Errorf("error %q does not name the field %s", err, tc.field)
			}
		})
	}
	// Every bad field is reported, not only the first.
	var cfg Config
	err := cfg.Validate()
	for _, field := range []string{"BindAddr", "Timeout", "ConnectTimeout", "KeepAlive", "InitialBackoff", "MaxBackoff"} {
		if !strings.Contains(err.Error(), "Config."+field+" ") {
			t.Errorf("zero Config: error %q does not name %s", err, field)
		}
	}
}

// TestWriteBuffers checks what the conformance suite cannot: WriteBuffers
// leaves the caller's slices alone and does not allocate.
func TestWriteBuffers(t *testing.T) {
	a, b := pair(t, testConfig())
	drained := async(func() error { _, err := io.Copy(io.Discard, b); return err })

	head, payload := []byte("head"), bytes.Repeat([]byte{7}, 64<<10)
	bufs := [][]byte{head, payload, nil}
	if n, err := a.WriteBuffers(bufs); err != nil || n != int64(len(head)+len(payload)) {
		t.Fatalf("WriteBuffers = %d, %v", n, err)
	}
	if len(bufs) != 3 || !bytes.Equal(bufs[0], head) || len(bufs[1]) != len(payload) || &bufs[1][0] != &payload[0] || bufs[2] != nil {
		t.Fatalf("WriteBuffers modified its argument: lengths %d, %d, %d", len(bufs[0]), len(bufs[1]), len(bufs[2]))
	}
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := a.WriteBuffers(bufs); err != nil {
			t.Fatalf("WriteBuffers: %v", err)
		}
	})
	if allocs != 0 {
		t.Errorf("WriteBuffers allocates %v times per call, want 0", allocs)
	}
	a.Close()
	if err := await(t, drained, "draining the peer"); err != nil {
		t.Fatalf("peer read: %v", err)
	}
}

// TestCheckAddrValid: what a worker may give as the coordinator passes the
// syntax check (whether it resolves is Dial's business).
func TestCheckAddrValid(t *testing.T) {
	ifs, err := net.Interfaces()
	if err != nil || len(ifs) == 0 {
		t.Fatalf("net.Interfaces: %v (%d)", err, len(ifs))
	}
	for _, addr := range []string{
		"127.0.0.1:1", "10.0.0.1:65535", "[::1]:29500", "[fd53:7463:6e65::1]:29500",
		"[fe80::1%" + ifs[0].Name + "]:29500", "[fe80::1%" + strconv.Itoa(ifs[0].Index) + "]:29500",
		"localhost:29500", "node0:29500", "NODE0:29500", "job-0.svc.default.svc.cluster.local:29500",
		"job-0.svc.default.svc.cluster.local.:29500", "_srv.example:29500", "node0-v6:29500", "0node:29500",
		strings.Repeat("a", 63) + ".example:29500",
	} {
		if err := checkAddr(addr); err != nil {
			t.Errorf("checkAddr(%q) = %v, want nil", addr, err)
		}
	}
}

// TestDialPinsTheAddressThatAnswered: a Dial of a name remembers the
// address that answered, and the next Dial of the same name tries it
// first (a worker's control session, beside its data link: not the
// name's first address again, which may drop packets).
func TestDialPinsTheAddressThatAnswered(t *testing.T) {
	l, err := Listen(testConfig(), 0)
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	defer l.Close()
	go acceptAndClose(l)
	d := NewDialer(testConfig())
	name := net.JoinHostPort("localhost", strconv.Itoa(l.Port()))
	for i := range 2 {
		c, err := d.Dial(context.Background(), name)
		if err != nil {
			t.Fatalf("dial %d of %s: %v", i+1, name, err)
		}
		_ = c.Close()
		p, ok := d.pinned.Load(name)
		if want := l.Addr(); !ok || fmt.Sprint(p) != want {
			t.Fatalf("after dial %d of %s: pinned %v, want %s (the address that answered)", i+1, name, p, want)
		}
	}
}

// TestDialNamesEveryAddress: when every address of a name refuses, the
// error names each address with its error, on one line, and still
// matches syscall.ECONNREFUSED.
func TestDialNamesEveryAddress(t *testing.T) {
	cfg := testConfig()
	cfg.ConnectTimeout = 200 * time.Millisecond
	addr := deadAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	ips, err := net.DefaultResolver.LookupNetIP(context.Background(), "ip", "localhost")
	if err != nil {
		t.Fatalf("resolving localhost: %v", err)
	}
	_, err = NewDialer(cfg).Dial(context.Background(), net.JoinHostPort("localhost", port))
	if err == nil {
		t.Fatal("dial of a port nobody listens on succeeded")
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("error %v does not match ECONNREFUSED", err)
	}
	msg := err.Error()
	if strings.Contains(msg, "\n") {
		t.Fatalf("error on several lines: %q", msg)
	}
	for _, ip := range ips {
		if want := net.JoinHostPort(ip.Unmap().String(), port); !strings.Contains(msg, want) {
			t.Fatalf("error %q does not name %s (localhost resolves to %v)", msg, want, ips)
		}
	}
}
