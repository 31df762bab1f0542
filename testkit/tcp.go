package testkit

import (
	"github.com/starcomm/starcomm/transport"
	"github.com/starcomm/starcomm/transport/tcp"
)

// TCPNetwork is a Network over real TCP sockets on the loopback interface;
// each Listen picks a free port.
type TCPNetwork struct {
	Config tcp.Config
}

// NewTCPNetwork returns a TCPNetwork bound to 127.0.0.1 with the driver's
// default settings.
func NewTCPNetwork() *TCPNetwork {
	cfg := tcp.DefaultConfig()
	cfg.BindAddr = "127.0.0.1"
	return &TCPNetwork{Config: cfg}
}

// Listen listens on a free loopback port.
func (n *TCPNetwork) Listen() (transport.Listener, error) { return tcp.Listen(n.Config, 0) }

// Dialer returns a retrying TCP dialer.
func (n *TCPNetwork) Dialer() transport.Dialer { return tcp.NewDialer(n.Config) }
