package mtls

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
)

// HandshakeError is a TLS handshake that failed: Dial returns it, and the
// first Read or Write of an accepted connection whose handshake failed.
// Its message says what went wrong and, where it can, what to check.
type HandshakeError struct {
	// Peer is the address dialed, or the remote address of an accepted
	// connection.
	Peer string
	// Server is true on the accepting end (the coordinator).
	Server bool
	// TimedOut: the handshake did not end within HandshakeTimeout (or the
	// context, or the read deadline); errors.Is(err,
	// os.ErrDeadlineExceeded) then holds.
	TimedOut bool
	// Err is crypto/tls's error.
	Err error
}

// Error names the peer and whether the handshake failed or timed out.
func (e *HandshakeError) Error() string {
	who := "the coordinator at " + e.Peer
	if e.Server {
		who = "the client at " + e.Peer
	}
	msg := fmt.Sprintf("mtls: TLS handshake with %s failed: %v", who, e.Err)
	if e.TimedOut {
		msg = fmt.Sprintf("mtls: TLS handshake with %s did not complete in time: %v", who, e.Err)
	}
	if hint := e.hint(); hint != "" {
		msg += " (" + hint + ")"
	}
	return msg
}

// hint says what a failed handshake most likely means.
func (e *HandshakeError) hint() string {
	var (
		ua x509.UnknownAuthorityError
		hn x509.HostnameError
		ci x509.CertificateInvalidError
		rh tls.RecordHeaderError
	)
	switch {
	case e.TimedOut:
		if e.Server {
			return "the client sent no complete TLS handshake; it may not speak TLS"
		}
		return "the coordinator did not answer the TLS handshake"
	case errors.As(e.Err, &ua) && e.Server:
		return "the client's certificate is not signed by this end's CA"
	case errors.As(e.Err, &ua):
		return "the coordinator's certificate is not signed by this end's CA"
	case errors.As(e.Err, &hn):
		return "the coordinator's certificate must be valid for the name workers dial (its subject alternative names)"
	case errors.As(e.Err, &ci) && ci.Reason == x509.Expired:
		return "a certificate has expired, or a clock is wrong"
	case errors.As(e.Err, &ci) && ci.Reason == x509.IncompatibleUsage && e.Server:
		return "the client's certificate is not valid for client authentication: its extended key usage lacks clientAuth"
	case errors.As(e.Err, &ci) && ci.Reason == x509.IncompatibleUsage:
		return "the coordinator's certificate is not valid for server authentication: its extended key usage lacks serverAuth"
	case isAlert(e.Err) && e.Server:
		return "the client refused this end's certificate: is it signed by the CA the client trusts, valid for the name the client dials, and not expired?"
	case errors.As(e.Err, &rh):
		return "the peer does not speak TLS: is it configured with the same TLS settings?"
	}
	return ""
}

// Unwrap returns Err, and os.ErrDeadlineExceeded when TimedOut.
func (e *HandshakeError) Unwrap() []error {
	if e.TimedOut {
		return []error{e.Err, os.ErrDeadlineExceeded}
	}
	return []error{e.Err}
}

// PeerRefusedError is a TLS alert from the peer: it refused this end (most
// often its certificate). A worker whose certificate the coordinator
// refuses gets it from its first Read, since in TLS 1.3 the coordinator
// checks the client's certificate after the client's handshake is over.
type PeerRefusedError struct {
	// Peer is the address dialed, or the remote address.
	Peer string
	// Server is true on the accepting end (the coordinator).
	Server bool
	// Err is crypto/tls's error, "remote error: tls: ...".
	Err error
}

// Error names the peer, its alert and the usual reasons for it.
func (e *PeerRefusedError) Error() string {
	who := "the coordinator at " + e.Peer
	if e.Server {
		who = "the client at " + e.Peer
	}
	return fmt.Sprintf("mtls: %s refused this end's TLS session: %v (the alert says why: most often this end's certificate is not signed by the CA the peer trusts, is expired, or was not sent)", who, e.Err)
}

// Unwrap returns Err.
func (e *PeerRefusedError) Unwrap() error { return e.Err }

// timedOut reports whether a handshake error means time ran out.
func timedOut(err error, ctx context.Context) bool {
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) || ctx.Err() == context.DeadlineExceeded
}

// isAlert reports whether err is an alert the peer sent: crypto/tls
// reports one as a *net.OpError whose Op is "remote error" (the alert's
// own type is not exported).
func isAlert(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "remote error"
}

// asRecordHeader finds a tls.RecordHeaderError in err.
func asRecordHeader(err error, rh *tls.RecordHeaderError) bool { return errors.As(err, rh) }
