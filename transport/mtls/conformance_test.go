package mtls

import (
	"testing"

	"github.com/starcomm/starcomm/transport"
	"github.com/starcomm/starcomm/transport/pipe"
	"github.com/starcomm/starcomm/transport/transporttest"
)

// TestConformance runs the transport conformance suite over TLS over real
// TCP (a Poller, so every polling check runs) and over in-memory pipes in
// each of their modes (unbuffered pipes expose a wrapper that relies on
// buffering; nopoll checks that a TLS conn over a conn that cannot poll
// does not claim to).
func TestConformance(t *testing.T) {
	t.Run("inner=tcp", func(t *testing.T) {
		transporttest.Run(t, func(t *testing.T) transporttest.Harness {
			p := testPKI(t)
			srv, clnt := p.config(t, p.server), p.config(t, p.client)
			return transporttest.Harness{
				Listen: func() (transport.Listener, error) {
					return tcpListen(t, srv), nil
				},
				Dialer:   tcpDialer(clnt),
				DeadAddr: deadAddr,
				Timeout:  watchdog,
			}
		})
	})
	for _, mode := range []struct {
		name string
		mk   func() *pipe.Network
	}{
		{"unbuffered", pipe.NewNetwork},
		{"buffer=64KiB", func() *pipe.Network { n := pipe.NewNetwork(); n.Buffer = 64 << 10; return n }},
		{"nopoll", func() *pipe.Network { n := pipe.NewNetwork(); n.NoPoll = true; return n }},
	} {
		t.Run("inner=pipe/mode="+mode.name, func(t *testing.T) {
			transporttest.Run(t, func(t *testing.T) transporttest.Harness {
				nw := newPipeNetwork(t, mode.mk())
				return transporttest.Harness{
					Listen:   nw.Listen,
					Dialer:   nw.Dialer(),
					DeadAddr: func(*testing.T) string { return "nobody-listens-here" },
					Timeout:  watchdog,
				}
			})
		})
	}
}
