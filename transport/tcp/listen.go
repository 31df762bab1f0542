package tcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"syscall"

	"github.com/starcomm/starcomm/transport"
)

// Listener accepts TCP connections and applies the Config's socket options
// to each. It implements transport.Listener.
type Listener struct {
	ln   *net.TCPListener
	cfg  Config
	port int
	// offHost is the system's congestion control, which the listening
	// socket had before it was given cfg.OnHostCongestion, and which
	// Accept gives back to connections from other hosts; "" when the
	// listening socket's did not change.
	offHost string
}

var _ transport.Listener = (*Listener)(nil)

// AddrInUseError is returned by Listen when another socket already holds
// the address, typically an earlier coordinator that is still running or a
// second one started on the same port. It wraps the net package's error, so
// errors.Is(err, syscall.EADDRINUSE) holds.
type AddrInUseError struct {
	// Addr is the host:port Listen tried to bind.
	Addr string
	// Err is the underlying error from the net package.
	Err error
}

// Error names the address that is taken.
func (e *AddrInUseError) Error() string {
	return fmt.Sprintf("tcp: listen on %s: address already in use (another process, perhaps an earlier coordinator, holds the port)", e.Addr)
}

// Unwrap returns the underlying error.
func (e *AddrInUseError) Unwrap() error { return e.Err }

// listenNetwork is the network Listen listens on for bind address host:
// "tcp4" for an IPv4 address, 0.0.0.0 included (every IPv4 interface, and
// IPv4 only: Go's "tcp" would listen there on a dual-stack socket that
// takes IPv6 connections too, open to peers that a firewall of IPv4 alone
// was meant to keep out), else "tcp" (:: for every interface, IPv4 and
// IPv6; an IPv6 address; a name).
func listenNetwork(host string) string {
	if ip, err := netip.ParseAddr(host); err == nil && ip.Is4() {
		return "tcp4"
	}
	return "tcp"
}

// Listen listens on cfg.BindAddr at port; port 0 picks a free port, which
// Port then reports. It returns the Config's validation error for an invalid
// cfg, an *AddrInUseError when the address is taken, an error saying that
// the bind address is not one of this host's (wrapping
// syscall.EADDRNOTAVAIL) or does not resolve (wrapping the *net.DNSError),
// and the net package's error for any other failure.
func Listen(cfg Config, port int) (*Listener, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if port < 0 || port > 65535 {
		return nil, fmt.Errorf("tcp: listen: port %d out of range: want 0 (any free port) to 65535", port)
	}
	addr := net.JoinHostPort(cfg.BindAddr, strconv.Itoa(port))
	var offHost string
	lc := net.ListenConfig{
		Control:   control(cfg, listenCongestion(cfg, &offHost)),
		KeepAlive: -1, // configure sets keep-alive on each accepted connection
	}
	ln, err := lc.Listen(context.Background(), listenNetwork(cfg.BindAddr), addr)
	if err != nil {
		var dnsErr *net.DNSError
		switch {
		case errors.Is(err, syscall.EADDRINUSE):
			return nil, &AddrInUseError{Addr: addr, Err: err}
		case errors.Is(err, syscall.EADDRNOTAVAIL):
			return nil, fmt.Errorf("tcp: listen on %s: %s is not an address of this host's (the bind address, BindAddr or COBRE_TCP_BIND_ADDR: 0.0.0.0 or :: for every interface, or an address one of this host's interfaces has): %w", addr, cfg.BindAddr, err)
		case errors.As(err, &dnsErr):
			return nil, fmt.Errorf("tcp: listen on %s: the bind address %q does not resolve (BindAddr or COBRE_TCP_BIND_ADDR: 0.0.0.0 or :: for every interface, or one of this host's addresses or names): %w", addr, cfg.BindAddr, err)
		}
		return nil, err
	}
	tl := ln.(*net.TCPListener)
	return &Listener{ln: tl, cfg: cfg, port: tl.Addr().(*net.TCPAddr).Port, offHost: offHost}, nil
}

// Accept waits for the next connection and returns it as a *Conn with the
// socket options applied. After Close it returns the net package's error,
// which satisfies errors.Is(err, net.ErrClosed). If the options cannot be
// set on an accepted connection, Accept closes that connection and returns
// an error saying so; the Listener stays usable.
func (l *Listener) Accept() (transport.Conn, error) {
	tc, err := l.ln.AcceptTCP()
	if err != nil {
		return nil, err
	}
	c, err := newConn(tc, l.cfg)
	if err != nil {
		tc.Close()
		return nil, fmt.Errorf("tcp: accept from %s: setting socket options: %w", tc.RemoteAddr(), err)
	}
	l.settleCongestion(c, acceptedOnHost(c))
	return c, nil
}

// acceptedOnHost reports whether an accepted connection's peer is on this
// host; tests replace it to accept from "another host" over loopback.
var acceptedOnHost = (*Conn).PeerOnHost

// Close stops listening and unblocks Accept. Connections already accepted
// stay open.
func (l *Listener) Close() error { return l.ln.Close() }

// Addr returns BindAddr:port with the port actually bound, for example
// "0.0.0.0:29500". Workers on other hosts dial the coordinator's host name
// or IP address at Port instead.
func (l *Listener) Addr() string {
	return net.JoinHostPort(l.cfg.BindAddr, strconv.Itoa(l.port))
}

// Port returns the port the Listener is bound to, useful after Listen with
// port 0.
func (l *Listener) Port() int { return l.port }
