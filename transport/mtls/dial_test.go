package mtls

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/starcomm/starcomm/transport"
	"github.com/starcomm/starcomm/transport/tcp"
)

// cuttingListener closes the first cut connections it accepts at once,
// like a coordinator that is ending while still listening.
type cuttingListener struct {
	transport.Listener
	cut atomic.Int64
}

func (l *cuttingListener) Accept() (transport.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil || l.cut.Add(-1) < 0 {
			return c, err
		}
		c.Close()
	}
}

// TestDialRetriesCutHandshake: a server that closes connections during
// the TLS handshake without a word is dialed again until it answers; if
// it never does, Dial fails when its context ends, saying how many
// connections were cut.
func TestDialRetriesCutHandshake(t *testing.T) {
	p := testPKI(t)
	listen := func(t *testing.T, cut int64) *Listener {
		inner, err := tcp.Listen(tcpConfig(), 0)
		if err != nil {
			t.Fatal(err)
		}
		cl := &cuttingListener{Listener: inner}
		cl.cut.Store(cut)
		l := newListener(cl, p.config(t, p.server))
		t.Cleanup(func() { l.Close() })
		return l
	}
	t.Run("cut=3", func(t *testing.T) {
		l := listen(t, 3)
		got := serve(l)
		ctx, cancel := context.WithTimeout(context.Background(), watchdog)
		defer cancel()
		c, err := tcpDialer(p.config(t, p.client)).Dial(ctx, l.Addr())
		if err != nil {
			t.Fatalf("Dial: %v; want it to try again until the server answers", err)
		}
		defer c.Close()
		if _, err := c.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		if a := await(t, got, "the server's Read"); a.err != nil {
			t.Fatalf("the server's Read: %v", a.err)
		} else {
			a.c.Close()
		}
	})
	t.Run("cut=always", func(t *testing.T) {
		l := listen(t, 1<<40)
		accepting := async(func() error { _, err := l.Accept(); return err })
		defer func() { l.Close(); await(t, accepting, "Accept after Close") }()
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, err := tcpDialer(p.config(t, p.client)).Dial(ctx, l.Addr())
		if err == nil || !strings.Contains(err.Error(), "connection(s) during the TLS handshake until context deadline exceeded") {
			t.Fatalf("Dial: %v; want it to fail at its deadline saying the server cut the handshakes", err)
		}
	})
}
