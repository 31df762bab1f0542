package tcp

import (
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestPeerOnHost: a peer is on this host when its address is a loopback
// address or the connection's own IP (an IPv4 address and its IPv4-mapped
// IPv6 form being one); any other address, or an address that is not
// TCP's, is not. Both ends of a connection over loopback say so.
func TestPeerOnHost(t *testing.T) {
	tcpAddr := func(ip string) net.Addr { return &net.TCPAddr{IP: net.ParseIP(ip), Port: 4000} }
	cases := []struct {
		name          string
		local, remote net.Addr
		want          bool
	}{
		{"loopback", tcpAddr("127.0.0.1"), tcpAddr("127.0.0.1"), true},
		{"another loopback address", tcpAddr("127.0.0.1"), tcpAddr("127.0.0.2"), true},
		{"IPv6 loopback", tcpAddr("::1"), tcpAddr("::1"), true},
		{"the host's own address", tcpAddr("10.1.2.3"), tcpAddr("10.1.2.3"), true},
		{"IPv4 and its mapped IPv6 form", tcpAddr("::ffff:10.1.2.3"), tcpAddr("10.1.2.3"), true},
		{"another host", tcpAddr("10.1.2.3"), tcpAddr("10.1.2.4"), false},
		{"another host over IPv6", tcpAddr("fd00::1"), tcpAddr("fd00::2"), false},
		{"no IP", &net.TCPAddr{}, &net.TCPAddr{}, false},
		{"not TCP", &net.UDPAddr{IP: net.ParseIP("127.0.0.1")}, &net.UDPAddr{IP: net.ParseIP("127.0.0.1")}, false},
		{"nil", nil, nil, false},
		{"nil TCP address", (*net.TCPAddr)(nil), tcpAddr("127.0.0.1"), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, peerOnHost(tc.local, tc.remote))
		})
	}
	dialed, accepted := pair(t, DefaultConfig())
	assert.True(t, dialed.PeerOnHost(), "the dialing end over loopback")
	assert.True(t, accepted.PeerOnHost(), "the accepting end over loopback")
}
