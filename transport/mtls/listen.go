package mtls

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"time"

	"github.com/starcomm/starcomm/transport"
)

// Listener accepts TLS connections on an inner transport.Listener and
// requires every client to present a certificate signed by Config.CA
// (tls.RequireAndVerifyClientCert). It implements transport.Listener.
type Listener struct {
	inner transport.Listener
	cfg   Config
	tls   *tls.Config
	// plaintext is written in the clear to a client that does not speak
	// TLS (see Config.PlaintextReply).
	plaintext []byte
}

var _ transport.Listener = (*Listener)(nil)

// NewListener wraps inner. It returns cfg's validation error, or an error
// saying why cfg's certificate is not usable by a server now (see
// Config.CheckCertificate).
func NewListener(inner transport.Listener, cfg Config) (*Listener, error) {
	if err := cfg.CheckCertificate(x509.ExtKeyUsageServerAuth, time.Now()); err != nil {
		return nil, fmt.Errorf("mtls: listener: %w", err)
	}
	return newListener(inner, cfg), nil
}

// newListener is NewListener without the checks (tests build servers
// with bad certificates through it).
func newListener(inner transport.Listener, cfg Config) *Listener {
	return &Listener{inner: inner, cfg: cfg, plaintext: cfg.PlaintextReply, tls: &tls.Config{
		MinVersion:                  tls.VersionTLS13,
		Certificates:                []tls.Certificate{cfg.Certificate},
		ClientAuth:                  tls.RequireAndVerifyClientCert,
		ClientCAs:                   cfg.CA,
		SessionTicketsDisabled:      true,
		DynamicRecordSizingDisabled: true,
	}}
}

// Accept waits for the next connection of the inner listener and returns
// it as a TLS connection at once; its handshake runs in the background,
// bounded by Config.HandshakeTimeout (and by a read deadline set on the
// connection), and its first Read or Write waits for it. A client that
// stays silent therefore never holds up Accept, and a handshake that
// fails (no certificate, one signed by another CA, an expired one, a
// client that does not speak TLS) fails that Read or Write with a
// *HandshakeError. The connection is a PollingConn when the inner one is
// a transport.Poller, else a *Conn. Accept's errors are the inner
// listener's.
func (l *Listener) Accept() (transport.Conn, error) {
	inner, err := l.inner.Accept()
	if err != nil {
		return nil, err
	}
	c := newConn(inner, remote(inner), func(raw net.Conn) *tls.Conn { return tls.Server(raw, l.tls) })
	go c.serverHandshake(l)
	return c.wrap(), nil
}

// answerPlaintext writes Config.PlaintextReply to a client whose first
// bytes were not a TLS record, so that a peer configured without TLS
// learns why it is refused.
func (l *Listener) answerPlaintext(c *Conn) {
	var rh tls.RecordHeaderError
	if len(l.plaintext) == 0 || !asRecordHeader(c.hsErr, &rh) || rh.Conn == nil {
		return
	}
	_ = c.inner.SetWriteDeadline(time.Now().Add(plaintextWait))
	_, _ = c.inner.Write(l.plaintext)
}

// plaintextWait bounds the write of Config.PlaintextReply.
const plaintextWait = time.Second

// Close closes the inner listener; connections already accepted stay open.
func (l *Listener) Close() error { return l.inner.Close() }

// Addr is the inner listener's address.
func (l *Listener) Addr() string { return l.inner.Addr() }

// remote names an inner conn's peer for messages.
func remote(c transport.Conn) string {
	if a, ok := c.(interface{ RemoteAddr() net.Addr }); ok {
		return a.RemoteAddr().String()
	}
	return "the peer"
}
