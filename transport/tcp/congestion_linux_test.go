package tcp

import (
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
)

// systemCongestion is this network namespace's congestion control, the one
// a new socket gets.
func systemCongestion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_congestion_control")
	if err != nil {
		t.Fatalf("reading the system's congestion control: %v", err)
	}
	return strings.TrimSpace(string(b))
}

// notSystem is an algorithm every Linux has (reno is built in) that is not
// the system's, so that a test can tell a socket given it from one left
// alone.
func notSystem(t *testing.T) string {
	if systemCongestion(t) == "reno" {
		return "cubic"
	}
	return "reno"
}

// TestOnHostCongestion: both ends of a loopback connection get
// OnHostCongestion (the dialed end set before it connects, the accepted
// one from its listener); "" and an algorithm the kernel does not have
// leave the system's.
func TestOnHostCongestion(t *testing.T) {
	system, other := systemCongestion(t), notSystem(t)
	for _, tc := range []struct {
		name, onHost, want string
	}{
		{"default", DefaultConfig().OnHostCongestion, "cubic"},
		{"not-the-system's", other, other},
		{"empty", "", system},
		{"unknown", "no_such_cc", system},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.OnHostCongestion = tc.onHost
			dialed, accepted := pair(t, cfg)
			if got := congestion(dialed.rc); got != tc.want {
				t.Errorf("dialed end: congestion control %q, want %q", got, tc.want)
			}
			if got := congestion(accepted.rc); got != tc.want {
				t.Errorf("accepted end: congestion control %q, want %q", got, tc.want)
			}
			roundTrip(t, dialed, accepted)
		})
	}
}

// TestOffHostCongestion (not parallel: it swaps acceptedOnHost): a
// connection accepted from a peer that is not on this host gets the
// system's congestion control back from the listener, and a Dialer sets
// OnHostCongestion only on a socket about to connect to this host.
func TestOffHostCongestion(t *testing.T) {
	system, other := systemCongestion(t), notSystem(t)
	cfg := testConfig()
	cfg.OnHostCongestion = other
	l, err := Listen(cfg, 0)
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	defer l.Close()
	if l.offHost != system {
		t.Fatalf("listener: kept %q to give back to other hosts' connections, want the system's %q", l.offHost, system)
	}
	dialed, accepted := connect(t, l, cfg)
	if got := congestion(accepted.rc); got != other {
		t.Fatalf("accepted on-host connection: %q, want %q", got, other)
	}
	roundTrip(t, dialed, accepted)

	// A connection Accept takes as one from another host.
	acceptedOnHost = func(*Conn) bool { return false }
	defer func() { acceptedOnHost = (*Conn).PeerOnHost }()
	dialed2, accepted2 := connect(t, l, cfg)
	if got := congestion(accepted2.rc); got != system {
		t.Errorf("connection accepted from another host: %q, want the system's %q", got, system)
	}
	roundTrip(t, dialed2, accepted2)

	// The Dialer's hook, on a socket of the system's algorithm.
	hook := dialCongestion(cfg)
	setCongestion(dialed.rc, system)
	hook("192.0.2.1:29500", dialed.rc) // TEST-NET-1: no host's own address
	if got := congestion(dialed.rc); got != system {
		t.Errorf("dial hook for another host's address: %q, want the system's %q", got, system)
	}
	hook("127.0.0.1:29500", dialed.rc)
	if got := congestion(dialed.rc); got != other {
		t.Errorf("dial hook for a loopback address: %q, want %q", got, other)
	}
	if dialCongestion(DefaultConfig()) == nil || listenCongestion(DefaultConfig(), new(string)) == nil {
		t.Error("no congestion hook with the default OnHostCongestion")
	}
	empty := DefaultConfig()
	empty.OnHostCongestion = ""
	if dialCongestion(empty) != nil || listenCongestion(empty, new(string)) != nil {
		t.Error("a congestion hook with OnHostCongestion empty")
	}
}

// TestAddrOnHost: loopback, unspecified and this host's own addresses are
// on this host; documentation addresses and malformed ones are not.
func TestAddrOnHost(t *testing.T) {
	cases := map[string]bool{
		"127.0.0.1:29500":      true,
		"127.0.0.53:1":         true,
		"[::1]:29500":          true,
		"[::ffff:127.0.0.1]:1": true,
		"0.0.0.0:29500":        true,
		"[::]:29500":           true,
		"192.0.2.1:29500":      false,
		"[2001:db8::1]:29500":  false,
		"[::ffff:192.0.2.1]:1": false,
		"node0:29500":          false,
		"127.0.0.1":            false,
		"":                     false,
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatalf("InterfaceAddrs: %v", err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok && !ip.Unmap().IsLinkLocalUnicast() {
				cases[netip.AddrPortFrom(ip.Unmap(), 29500).String()] = true
			}
		}
	}
	for addr, want := range cases {
		if got := addrOnHost(addr); got != want {
			t.Errorf("addrOnHost(%q) = %v, want %v", addr, got, want)
		}
	}
}
