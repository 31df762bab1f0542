package mtls

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/starcomm/starcomm/transport"
)

// otherPKI is a second CA, unrelated to testPKI's, with certificates of
// its own.
func otherPKI(t *testing.T) *pki {
	t.Helper()
	ca, err := NewCA("another CA", time.Time{}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	p := &pki{ca: ca}
	p.server = p.issue(t, Leaf{Name: "impostor-0", Hosts: []string{"127.0.0.1"}})
	p.client = p.issue(t, Leaf{Name: "impostor-1"})
	return p
}

// accepted is what the server end saw: its first Read's error.
type accepted struct {
	c   transport.Conn
	err error
}

// serve accepts one connection on l and reads from it: a refused client
// makes that Read fail with the handshake's error.
func serve(l *Listener) <-chan accepted {
	return async(func() accepted {
		c, err := l.Accept()
		if err != nil {
			return accepted{nil, err}
		}
		_, err = c.Read(make([]byte, 1))
		return accepted{c, err}
	})
}

// TestRefused checks that a server refuses every client that does not
// hold a certificate signed by its CA, that a client refuses every server
// that does not, and that both ends' errors say why.
func TestRefused(t *testing.T) {
	p := testPKI(t)
	o := otherPKI(t)
	hour := time.Hour
	past := time.Now().Add(-48 * hour)
	expiredClient := p.issue(t, Leaf{Name: "expired-1", NotBefore: past, NotAfter: past.Add(hour)})
	expiredServer := p.issue(t, Leaf{Name: "expired-0", Hosts: []string{"127.0.0.1"}, NotBefore: past, NotAfter: past.Add(hour)})
	serverOnly := p.issue(t, Leaf{Name: "server-only-1", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	good := func() (Config, Config) { return p.config(t, p.server), p.config(t, p.client) }
	for _, tc := range []struct {
		name string
		// srv and clnt are the two ends' configs.
		setup func() (srv, clnt Config)
		// dialErr: Dial fails, with an error containing these; else the
		// client's first Read fails with a *PeerRefusedError containing
		// clientRead.
		dialErr    []string
		clientRead string
		// serverErr: what the server's first Read's error contains.
		serverErr []string
	}{
		{
			name: "client=other-CA",
			setup: func() (Config, Config) {
				s, _ := good()
				c := o.config(t, o.client)
				c.CA = p.ca.Pool() // it trusts the server; the server does not trust it
				return s, c
			},
			clientRead: "unknown certificate authority",
			serverErr:  []string{"signed by unknown authority", "the client's certificate is not signed by this end's CA"},
		},
		{
			name: "client=expired",
			setup: func() (Config, Config) {
				s, _ := good()
				return s, p.config(t, expiredClient)
			},
			clientRead: "expired certificate",
			serverErr:  []string{"expired", "a certificate has expired"},
		},
		{
			name: "client=server-usage-only",
			setup: func() (Config, Config) {
				s, _ := good()
				return s, p.config(t, serverOnly)
			},
			clientRead: "bad certificate",
			serverErr:  []string{"incompatible key usage"},
		},
		{
			name: "server=other-CA",
			setup: func() (Config, Config) {
				_, c := good()
				s := o.config(t, o.server)
				s.CA = p.ca.Pool()
				return s, c
			},
			dialErr:   []string{"signed by unknown authority", "the coordinator's certificate is not signed by this end's CA"},
			serverErr: []string{"remote error", "bad certificate"},
		},
		{
			name:      "server=expired",
			setup:     func() (Config, Config) { _, c := good(); return p.config(t, expiredServer), c },
			dialErr:   []string{"expired", "a certificate has expired"},
			serverErr: []string{"remote error"},
		},
		{
			name: "server=wrong-name",
			setup: func() (Config, Config) {
				s, c := good()
				c.ServerName = "node7"
				return s, c
			},
			dialErr:   []string{"not node7", "valid for the name workers dial"},
			serverErr: []string{"remote error"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, clnt := tc.setup()
			l := tcpListen(t, srv)
			got := serve(l)
			ctx, cancel := context.WithTimeout(context.Background(), watchdog)
			defer cancel()
			c, err := tcpDialer(clnt).Dial(ctx, l.Addr())
			if tc.dialErr != nil {
				if err == nil {
					c.Close()
					t.Fatal("Dial succeeded; want the server refused")
				}
				t.Logf("client: %v", err)
				var he *HandshakeError
				if !errors.As(err, &he) || he.Server {
					t.Fatalf("Dial: %v (%T); want a client's *HandshakeError", err, err)
				}
				for _, s := range tc.dialErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("Dial error %q does not say %q", err, s)
					}
				}
			} else {
				if err != nil {
					t.Fatalf("Dial: %v; in TLS 1.3 the client's handshake ends before the server checks its certificate", err)
				}
				defer c.Close()
				_, err := c.Read(make([]byte, 1))
				t.Logf("client: %v", err)
				var pr *PeerRefusedError
				if !errors.As(err, &pr) || !strings.Contains(err.Error(), tc.clientRead) {
					t.Fatalf("client's Read: %v (%T); want a *PeerRefusedError saying %q", err, err, tc.clientRead)
				}
			}
			a := await(t, got, "the server's Read")
			if a.c != nil {
				defer a.c.Close()
			}
			t.Logf("server: %v", a.err)
			var he *HandshakeError
			if !errors.As(a.err, &he) || !he.Server {
				t.Fatalf("server's Read: %v (%T); want a server's *HandshakeError", a.err, a.err)
			}
			for _, s := range tc.serverErr {
				if !strings.Contains(a.err.Error(), s) {
					t.Errorf("server's error %q does not say %q", a.err, s)
				}
			}
			// A refused connection carries nothing either way.
			if _, err := a.c.Write([]byte("x")); !errors.As(err, &he) {
				t.Errorf("server's Write after a failed handshake: %v; want the handshake's error", err)
			}
		})
	}
}

// TestRefusedNoCertificate: a TLS client that shows no certificate is
// refused; it hears "certificate required".
func TestRefusedNoCertificate(t *testing.T) {
	p := testPKI(t)
	l := tcpListen(t, p.config(t, p.server))
	got := serve(l)
	nc, err := net.Dial("tcp", l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	tc := tls.Client(nc, &tls.Config{RootCAs: p.ca.Pool(), ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13})
	defer tc.Close()
	if err := tc.Handshake(); err != nil {
		t.Fatalf("client handshake: %v", err)
	}
	if _, err := tc.Read(make([]byte, 1)); err == nil || !strings.Contains(err.Error(), "certificate required") {
		t.Errorf("client's Read: %v; want the alert \"certificate required\"", err)
	}
	a := await(t, got, "the server's Read")
	defer a.c.Close()
	if a.err == nil || !strings.Contains(a.err.Error(), "didn't provide a certificate") {
		t.Errorf("server's Read: %v; want it to say the client gave no certificate", a.err)
	}
}

// TestRefusedTLS12: a client limited to TLS 1.2 is refused (TLS 1.3 is the
// minimum).
func TestRefusedTLS12(t *testing.T) {
	p := testPKI(t)
	l := tcpListen(t, p.config(t, p.server))
	got := serve(l)
	nc, err := net.Dial("tcp", l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	cert, err := p.client.Certificate()
	if err != nil {
		t.Fatal(err)
	}
	tc := tls.Client(nc, &tls.Config{RootCAs: p.ca.Pool(), ServerName: "127.0.0.1", MaxVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}})
	defer tc.Close()
	if err := tc.Handshake(); err == nil || !strings.Contains(err.Error(), "protocol version") {
		t.Errorf("TLS 1.2 client's handshake: %v; want a protocol version alert", err)
	}
	a := await(t, got, "the server's Read")
	defer a.c.Close()
	var he *HandshakeError
	if !errors.As(a.err, &he) {
		t.Errorf("server's Read: %v; want a *HandshakeError", a.err)
	}
}

// TestPlaintextPeer: a client that does not speak TLS gets
// Config.PlaintextReply in the clear and the server's Read fails saying
// the peer does not speak TLS; a TLS client of a server that does not
// speak TLS fails its Dial saying so.
func TestPlaintextPeer(t *testing.T) {
	p := testPKI(t)
	t.Run("client=plain", func(t *testing.T) {
		srv := p.config(t, p.server)
		srv.PlaintextReply = []byte("TLS required\n")
		l := tcpListen(t, srv)
		got := serve(l)
		nc, err := net.Dial("tcp", l.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		if _, err := nc.Write([]byte{0, 0, 0, 9, 8, 0, 0, 0, 1, 0, 0, 0, 2}); err != nil { // a star Handshake frame
			t.Fatal(err)
		}
		a := await(t, got, "the server's Read")
		defer a.c.Close()
		if a.err == nil || !strings.Contains(a.err.Error(), "does not speak TLS") {
			t.Errorf("server's Read: %v; want it to say the peer does not speak TLS", a.err)
		}
		_ = nc.SetReadDeadline(time.Now().Add(watchdog))
		reply := make([]byte, len(srv.PlaintextReply))
		if _, err := io.ReadFull(nc, reply); err != nil || string(reply) != string(srv.PlaintextReply) {
			t.Errorf("plain client read %q, %v; want %q", reply, err, srv.PlaintextReply)
		}
	})
	t.Run("server=plain", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			c, err := ln.Accept()
			if err == nil {
				_, _ = c.Write([]byte{0, 0, 0, 5, 0x0b, 'n', 'o', 'p', 'e'}) // an Abort frame
				_, _ = io.Copy(io.Discard, c)
				c.Close()
			}
		}()
		ctx, cancel := context.WithTimeout(context.Background(), watchdog)
		defer cancel()
		c, err := tcpDialer(p.config(t, p.client)).Dial(ctx, ln.Addr().String())
		if err == nil {
			c.Close()
			t.Fatal("Dial of a server that does not speak TLS succeeded")
		}
		if !strings.Contains(err.Error(), "does not speak TLS") {
			t.Errorf("Dial: %v; want it to say the peer does not speak TLS", err)
		}
	})
}

// TestHandshakeBounded: a client that connects and stays silent does not
// hold up Accept (another client gets through meanwhile), and the silent
// connection's Read fails with a deadline error once HandshakeTimeout
// has passed; a Dial to a server that accepts but never answers fails
// the same way.
func TestHandshakeBounded(t *testing.T) {
	p := testPKI(t)
	const hsTimeout = 300 * time.Millisecond
	t.Run("silent=client", func(t *testing.T) {
		srv := p.config(t, p.server)
		srv.HandshakeTimeout = hsTimeout
		l := tcpListen(t, srv)
		silent, err := net.Dial("tcp", l.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer silent.Close()
		first := await(t, async(func() accepted { c, err := l.Accept(); return accepted{c, err} }), "Accept of the silent client")
		if first.err != nil {
			t.Fatal(first.err)
		}
		defer first.c.Close()
		// A real client gets through while the silent one is pending.
		got := serve(l)
		ctx, cancel := context.WithTimeout(context.Background(), watchdog)
		defer cancel()
		c, err := tcpDialer(p.config(t, p.client)).Dial(ctx, l.Addr())
		if err != nil {
			t.Fatalf("Dial while a silent client is pending: %v", err)
		}
		defer c.Close()
		if _, err := c.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		if a := await(t, got, "the second client's Read"); a.err != nil {
			t.Fatalf("the second client's first byte: %v", a.err)
		} else {
			defer a.c.Close()
		}
		start := time.Now()
		err = await(t, async(func() accepted { _, err := first.c.Read(make([]byte, 1)); return accepted{nil, err} }), "Read of the silent client").err
		var he *HandshakeError
		if !errors.As(err, &he) || !he.TimedOut || !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("Read of the silent client after %v: %v; want a timed-out *HandshakeError", time.Since(start), err)
		}
	})
	t.Run("silent=server", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		done := make(chan struct{})
		defer close(done)
		go func() {
			c, err := ln.Accept()
			if err == nil {
				<-done
				c.Close()
			}
		}()
		clnt := p.config(t, p.client)
		clnt.HandshakeTimeout = hsTimeout
		err = await(t, async(func() accepted {
			c, err := tcpDialer(clnt).Dial(context.Background(), ln.Addr().String())
			return accepted{c, err}
		}), "Dial of a silent server").err
		var he *HandshakeError
		if !errors.As(err, &he) || !he.TimedOut || !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("Dial of a silent server: %v; want a timed-out *HandshakeError", err)
		}
	})
}
