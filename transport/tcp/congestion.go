package tcp

import (
	"net"
	"net/netip"
	"syscall"
)

// dialCongestion returns the part of a Dialer's Control hook that gives a
// socket about to connect to address cfg.OnHostCongestion when address is
// on this host (see addrOnHost), or nil when there is nothing to do.
func dialCongestion(cfg Config) func(address string, rc syscall.RawConn) {
	if cfg.OnHostCongestion == "" || !congestionSettable {
		return nil
	}
	return func(address string, rc syscall.RawConn) {
		if addrOnHost(address) {
			setCongestion(rc, cfg.OnHostCongestion)
		}
	}
}

// listenCongestion returns the part of a Listener's Control hook that gives
// the listening socket cfg.OnHostCongestion, so that every connection it
// accepts starts with it (Linux gives an accepted connection the
// algorithm set on its listener), and records the system's choice, which
// it had before, in *offHost: Accept gives that back to the connections
// whose peer is not on this host (see Listener.settleCongestion). It is
// nil when there is nothing to do; *offHost stays "" when the listener's
// algorithm did not change.
func listenCongestion(cfg Config, offHost *string) func(address string, rc syscall.RawConn) {
	if cfg.OnHostCongestion == "" || !congestionSettable {
		return nil
	}
	return func(_ string, rc syscall.RawConn) {
		system := congestion(rc)
		if system != "" && system != cfg.OnHostCongestion && setCongestion(rc, cfg.OnHostCongestion) {
			*offHost = system
		}
	}
}

// settleCongestion gives c, just accepted, the system's congestion control
// back when its peer is not on this host (onHost false) and the listener
// had set cfg.OnHostCongestion on its socket. It does so before c sends a
// byte. A failure leaves c with the listener's algorithm, which is only a
// matter of speed.
func (l *Listener) settleCongestion(c *Conn, onHost bool) {
	if l.offHost != "" && !onHost {
		setCongestion(c.rc, l.offHost)
	}
}

// addrOnHost reports whether address (an IP address and a port, as a
// Dialer's Control hook gets it) is on this host: a loopback address,
// the unspecified address (which reaches this host) or an address of one
// of this host's interfaces.
func addrOnHost(address string) bool {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return false
	}
	ip := ap.Addr().Unmap().WithZone("")
	if ip.IsLoopback() || ip.IsUnspecified() {
		return true
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if own, ok := netip.AddrFromSlice(n.IP); ok && own.Unmap() == ip {
				return true
			}
		}
	}
	return false
}
