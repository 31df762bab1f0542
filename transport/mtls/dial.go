package mtls

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/starcomm/starcomm/transport"
)

// Dialer opens TLS connections through an inner transport.Dialer, showing
// Config.Certificate and accepting only a server whose certificate is
// signed by Config.CA and valid for the name dialed (or
// Config.ServerName). It implements transport.Dialer and is safe for
// concurrent use.
type Dialer struct {
	inner transport.Dialer
	cfg   Config
	tls   *tls.Config
}

var _ transport.Dialer = (*Dialer)(nil)

// NewDialer wraps inner. It returns cfg's validation error, or an error
// saying why cfg's certificate is not usable by a client now (see
// Config.CheckCertificate).
func NewDialer(inner transport.Dialer, cfg Config) (*Dialer, error) {
	if err := cfg.CheckCertificate(x509.ExtKeyUsageClientAuth, time.Now()); err != nil {
		return nil, fmt.Errorf("mtls: dialer: %w", err)
	}
	return newDialer(inner, cfg), nil
}

// newDialer is NewDialer without the checks (tests build clients with bad
// certificates through it).
func newDialer(inner transport.Dialer, cfg Config) *Dialer {
	cert := cfg.Certificate
	return &Dialer{inner: inner, cfg: cfg, tls: &tls.Config{
		MinVersion: tls.VersionTLS13,
		// Always show the certificate, even when the server's list of
		// acceptable CAs does not name its issuer: the server's refusal
		// then says why ("unknown certificate authority"), where sending
		// none would say "certificate required".
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil },
		RootCAs:              cfg.CA,
		ServerName:           cfg.ServerName,
		// No resumption: connections live as long as the job.
		SessionTicketsDisabled:      true,
		DynamicRecordSizingDisabled: true,
	}}
}

// Dial connects through the inner dialer (which retries as it does) and
// runs the TLS handshake, within Config.HandshakeTimeout and ctx. It
// returns the inner dialer's error unchanged, or a *HandshakeError. The
// connection is a PollingConn when the inner one is a transport.Poller,
// else a *Conn. In TLS 1.3 the server checks this end's certificate after
// this end's handshake is over: a refusal comes from the first Read, as a
// *PeerRefusedError.
//
// A server that closes the connection during the handshake without a
// word (no TLS alert, no plaintext answer) is most often a coordinator
// ending, still listening on the port the next one will use: Dial then
// tries again, with backoff, until ctx ends, and its final error says how
// many times that happened.
func (d *Dialer) Dial(ctx context.Context, addr string) (transport.Conn, error) {
	backoff := 10 * time.Millisecond
	for cut := 0; ; cut++ {
		c, err := d.dialOnce(ctx, addr)
		if err == nil || !cutShort(err) {
			if err != nil && cut > 0 {
				err = fmt.Errorf("%w (before, the server closed %d connection(s) during the TLS handshake)", err, cut)
			}
			return c, err
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w (the server closed %d connection(s) during the TLS handshake until %w)", err, cut+1, ctx.Err())
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// dialOnce is one attempt of Dial.
func (d *Dialer) dialOnce(ctx context.Context, addr string) (transport.Conn, error) {
	inner, err := d.inner.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	cfg := d.tls
	if d.cfg.ServerName == "" {
		cfg = d.tls.Clone()
		cfg.ServerName = hostOf(addr)
	}
	c := newConn(inner, addr, func(raw net.Conn) *tls.Conn { return tls.Client(raw, cfg) })
	c.dialed = true
	hctx, cancel := context.WithTimeout(ctx, d.cfg.HandshakeTimeout)
	defer cancel()
	if err := c.tls.HandshakeContext(hctx); err != nil {
		c.hsErr = &HandshakeError{Peer: addr, TimedOut: timedOut(err, hctx), Err: err}
	}
	close(c.hsDone)
	if c.hsErr != nil {
		_ = inner.Close()
		return nil, c.hsErr
	}
	return c.wrap(), nil
}

// cutShort reports whether a handshake failed because the server closed
// the connection without an alert: end of stream or a reset, not a
// timeout.
func cutShort(err error) bool {
	var he *HandshakeError
	if !errors.As(err, &he) || he.TimedOut || isAlert(he.Err) {
		return false
	}
	return errors.Is(he.Err, io.EOF) || errors.Is(he.Err, io.ErrUnexpectedEOF) ||
		errors.Is(he.Err, syscall.ECONNRESET) || errors.Is(he.Err, syscall.EPIPE)
}

// hostOf is the host of host:port (addr itself if it has no port).
func hostOf(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return host
}
