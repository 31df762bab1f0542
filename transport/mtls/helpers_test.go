package mtls

import (
	"crypto/x509"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/starcomm/starcomm/transport"
	"github.com/starcomm/starcomm/transport/pipe"
	"github.com/starcomm/starcomm/transport/tcp"
)

// watchdog bounds every blocking step of these tests.
const watchdog = 10 * time.Second

// pki is a CA with a server and a client certificate, made once.
type pki struct {
	ca             *CA
	server, client *Issued
}

var (
	pkiOnce sync.Once
	pkiVal  *pki
	pkiErr  error
)

// testPKI returns the tests' CA and certificates: the server's is valid
// for 127.0.0.1, ::1, localhost and "coordinator" (the pipe tests' server
// name).
func testPKI(t testing.TB) *pki {
	t.Helper()
	pkiOnce.Do(func() {
		p := &pki{}
		if p.ca, pkiErr = NewCA("test CA", time.Time{}, time.Time{}); pkiErr != nil {
			return
		}
		if p.server, pkiErr = p.ca.Issue(Leaf{Name: "rank-0", Hosts: []string{"127.0.0.1", "::1", "localhost", "coordinator"}}); pkiErr != nil {
			return
		}
		p.client, pkiErr = p.ca.Issue(Leaf{Name: "rank-1"})
		pkiVal = p
	})
	if pkiErr != nil {
		t.Fatalf("test PKI: %v", pkiErr)
	}
	return pkiVal
}

// config returns a Config with i's certificate and p's CA.
func (p *pki) config(t testing.TB, i *Issued) Config {
	t.Helper()
	c, err := p.ca.Config(i)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return c
}

// issue makes another certificate signed by p's CA.
func (p *pki) issue(t testing.TB, l Leaf) *Issued {
	t.Helper()
	i, err := p.ca.Issue(l)
	if err != nil {
		t.Fatalf("issue %s: %v", l.Name, err)
	}
	return i
}

// tcpConfig is the inner TCP transport of the tests.
func tcpConfig() tcp.Config {
	cfg := tcp.DefaultConfig()
	cfg.BindAddr = "127.0.0.1"
	cfg.ConnectTimeout = 300 * time.Millisecond
	return cfg
}

// tcpListen listens with TLS over TCP on a free loopback port.
func tcpListen(t testing.TB, cfg Config) *Listener {
	t.Helper()
	inner, err := tcp.Listen(tcpConfig(), 0)
	if err != nil {
		t.Fatalf("tcp.Listen: %v", err)
	}
	l := newListener(inner, cfg)
	t.Cleanup(func() { l.Close() })
	return l
}

// tcpDialer dials with TLS over TCP.
func tcpDialer(cfg Config) *Dialer { return newDialer(tcp.NewDialer(tcpConfig()), cfg) }

// deadAddr is a loopback address nobody listens on.
func deadAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// pipeNetwork is TLS over in-memory pipes (mk makes the pipe network), the
// server name fixed to "coordinator".
type pipeNetwork struct {
	n         *pipe.Network
	srv, clnt Config
	seq       atomic.Int64
}

func newPipeNetwork(t testing.TB, n *pipe.Network) *pipeNetwork {
	p := testPKI(t)
	clnt := p.config(t, p.client)
	clnt.ServerName = "coordinator"
	return &pipeNetwork{n: n, srv: p.config(t, p.server), clnt: clnt}
}

func (p *pipeNetwork) Listen() (transport.Listener, error) {
	inner, err := p.n.Listen(fmt.Sprintf("listener-%d", p.seq.Add(1)))
	if err != nil {
		return nil, err
	}
	return newListener(inner, p.srv), nil
}

func (p *pipeNetwork) Dialer() transport.Dialer { return newDialer(p.n, p.clnt) }

// await returns the value from ch, or fails the test as a hang.
func await[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(watchdog):
		t.Fatalf("hang: %s did not return within %v", what, watchdog)
		panic("unreachable")
	}
}

// async runs f in a goroutine and delivers its result.
func async[T any](f func() T) <-chan T {
	ch := make(chan T, 1)
	go func() { ch <- f() }()
	return ch
}

var _ = x509.ExtKeyUsageAny
