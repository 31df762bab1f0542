package mtls

import (
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/starcomm/starcomm/internal/filekind"
)

// Config holds the settings of a Listener and a Dialer. Start from
// DefaultConfig (or Load, which reads PEM files) and set Certificate and
// CA; Validate names every missing or bad field.
type Config struct {
	// Certificate is this end's certificate chain and private key, shown
	// to the peer: the coordinator's to every worker, a worker's to the
	// coordinator. Its leaf must be valid now and signed by CA, for server
	// authentication on a Listener and client authentication on a Dialer
	// (a certificate with no extended key usage is valid for both).
	Certificate tls.Certificate
	// CA holds the certificate authorities that sign every rank's
	// certificate. A Listener accepts only clients whose certificate one
	// of them signed; a Dialer accepts only a server whose certificate one
	// of them signed.
	CA *x509.CertPool
	// ServerName, if not empty, is the name the server's certificate must
	// be valid for (a DNS name or an IP address in its subject alternative
	// names). Empty: the host of the address dialed, as HTTPS does.
	ServerName string
	// HandshakeTimeout bounds every TLS handshake: Dial's (within its
	// context too), and each accepted connection's, which runs in the
	// background from Accept. Default 10s.
	HandshakeTimeout time.Duration
	// PlaintextReply, if not empty, is written in the clear to a client
	// whose first bytes are not a TLS handshake (a peer configured
	// without TLS) before its connection fails, so that it learns why.
	// starcomm puts an Abort frame there saying that the coordinator
	// requires TLS.
	PlaintextReply []byte
}

// DefaultHandshakeTimeout is DefaultConfig's HandshakeTimeout.
const DefaultHandshakeTimeout = 10 * time.Second

// DefaultConfig returns a Config with the default handshake timeout and no
// certificates: set Certificate and CA (or use Load).
func DefaultConfig() Config {
	return Config{HandshakeTimeout: DefaultHandshakeTimeout}
}

// ConfigError is a field of Config that Validate rejects. Validate joins
// one ConfigError per bad field with errors.Join; errors.As finds the
// first.
type ConfigError struct {
	// Field is the name of the Config field, such as "CA".
	Field string
	// Reason says what is wrong, in plain words.
	Reason string
}

// Error names the field and what is wrong with it.
func (e *ConfigError) Error() string {
	return fmt.Sprintf("mtls: invalid Config.%s: %s", e.Field, e.Reason)
}

// Validate reports every missing or invalid field of c, each as a
// *ConfigError, joined with errors.Join; nil for a valid Config. It does
// not check the certificate against the CA (NewListener and NewDialer do,
// for their role).
func (c Config) Validate() error {
	var errs []error
	bad := func(field, reason string) { errs = append(errs, &ConfigError{Field: field, Reason: reason}) }
	switch {
	case len(c.Certificate.Certificate) == 0:
		bad("Certificate", "has no certificate; TLS with mutual authentication needs this end's certificate and key")
	case c.Certificate.PrivateKey == nil:
		bad("Certificate", "has no private key")
	}
	if c.CA == nil {
		bad("CA", "is nil; it must hold the certificate authority that signs every rank's certificate")
	}
	if c.HandshakeTimeout <= 0 {
		bad("HandshakeTimeout", fmt.Sprintf("is %v; it must be positive", c.HandshakeTimeout))
	}
	return errors.Join(errs...)
}

// CheckCertificate checks that c's certificate is valid at now and signed
// by c's CA for usage (x509.ExtKeyUsageServerAuth for a coordinator,
// x509.ExtKeyUsageClientAuth for a worker), and returns an error saying
// why not: expired or not yet valid (with the dates), signed by another
// authority, or not meant for that usage. NewListener and NewDialer call
// it, so that a rank whose certificate every peer would refuse fails
// before it connects, naming the reason.
func (c Config) CheckCertificate(usage x509.ExtKeyUsage, now time.Time) error {
	if err := c.Validate(); err != nil {
		return err
	}
	leaf, err := leafOf(c.Certificate)
	if err != nil {
		return err
	}
	if now.Before(leaf.NotBefore) {
		return fmt.Errorf("the certificate %q is not valid yet: valid from %s, the time here is %s", leaf.Subject.CommonName, leaf.NotBefore.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	if now.After(leaf.NotAfter) {
		return fmt.Errorf("the certificate %q expired at %s (the time here is %s)", leaf.Subject.CommonName, leaf.NotAfter.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	inter := x509.NewCertPool()
	for _, der := range c.Certificate.Certificate[1:] {
		if ic, err := x509.ParseCertificate(der); err == nil {
			inter.AddCert(ic)
		}
	}
	_, err = leaf.Verify(x509.VerifyOptions{Roots: c.CA, Intermediates: inter, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{usage}})
	var ua x509.UnknownAuthorityError
	var ci x509.CertificateInvalidError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ua):
		return fmt.Errorf("the certificate %q (issued by %q) is not signed by the CA: %w", leaf.Subject.CommonName, leaf.Issuer.CommonName, err)
	case errors.As(err, &ci) && ci.Reason == x509.IncompatibleUsage:
		return fmt.Errorf("the certificate %q is not valid for %s (its extended key usage does not allow it): %w", leaf.Subject.CommonName, usageName(usage), err)
	}
	return fmt.Errorf("the certificate %q does not verify against the CA: %w", leaf.Subject.CommonName, err)
}

// leafOf returns the parsed leaf of cert.
func leafOf(cert tls.Certificate) (*x509.Certificate, error) {
	if cert.Leaf != nil {
		return cert.Leaf, nil
	}
	if len(cert.Certificate) == 0 {
		return nil, errors.New("no certificate")
	}
	return x509.ParseCertificate(cert.Certificate[0])
}

func usageName(u x509.ExtKeyUsage) string {
	switch u {
	case x509.ExtKeyUsageServerAuth:
		return "server authentication (the coordinator's certificate)"
	case x509.ExtKeyUsageClientAuth:
		return "client authentication (a worker's certificate)"
	}
	return fmt.Sprintf("extended key usage %d", u)
}

// FileError is a PEM file Load cannot use. It wraps the cause.
type FileError struct {
	// What is "certificate", "key" or "CA".
	What string
	// Path is the file's path.
	Path string
	// Reason says what is wrong, in plain words.
	Reason string
	// Err is the cause, if any (such as fs.ErrNotExist).
	Err error
}

// Error names the file, what it was for and what is wrong with it.
func (e *FileError) Error() string {
	msg := fmt.Sprintf("mtls: %s file %s: %s", e.What, e.Path, e.Reason)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the cause.
func (e *FileError) Unwrap() error { return e.Err }

// maxPEMFile bounds what Load reads of one file: far more than any chain
// or CA bundle holds, and a device such as /dev/zero would never end.
const maxPEMFile = 16 << 20

// ReadPEM reads the PEM file at path, which holds what ("certificate",
// "key", "CA"), or returns a *FileError: it cannot be opened or read, it
// is not a regular file (a named pipe could block forever, a device never
// end; a link to a regular file, as a mounted secret is, is followed), or
// it is larger than 16 MiB. Load reads its files with it.
func ReadPEM(what, path string) ([]byte, error) {
	f, err := openPEM(path)
	if err != nil {
		return nil, &FileError{What: what, Path: path, Reason: "cannot be read", Err: err}
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, &FileError{What: what, Path: path, Reason: "cannot be read", Err: err}
	}
	if kind := filekind.NotRegular(fi.Mode()); kind != "" {
		return nil, &FileError{What: what, Path: path, Reason: "is " + kind + ", not a regular file: give a PEM file"}
	}
	b, err := io.ReadAll(io.LimitReader(f, maxPEMFile+1))
	switch {
	case err != nil:
		return nil, &FileError{What: what, Path: path, Reason: "cannot be read", Err: err}
	case len(b) > maxPEMFile:
		return nil, &FileError{What: what, Path: path, Reason: fmt.Sprintf("is larger than %d MiB: not a PEM file", maxPEMFile>>20)}
	}
	return b, nil
}

// Load reads this end's certificate chain, its private key and the CA
// certificates from PEM files and returns DefaultConfig with Certificate
// and CA set. Each problem is a *FileError naming the file (several are
// joined with errors.Join): a file that cannot be read, is not a regular
// file (a named pipe, a device, a directory) or is over 16 MiB, one with no PEM
// block of the right kind, a certificate or key that does not parse, a
// key that does not match the certificate. Load does not check dates or
// the signature: CheckCertificate (run by NewListener and NewDialer) does.
func Load(certFile, keyFile, caFile string) (Config, error) {
	c := DefaultConfig()
	var errs []error
	read := func(what, path string) []byte {
		b, err := ReadPEM(what, path)
		if err != nil {
			errs = append(errs, err)
			return nil
		}
		return b
	}
	certPEM, keyPEM, caPEM := read("certificate", certFile), read("key", keyFile), read("CA", caFile)
	if caPEM != nil {
		if pool, err := parseCA(caPEM); err != nil {
			errs = append(errs, &FileError{What: "CA", Path: caFile, Reason: err.Error()})
		} else {
			c.CA = pool
		}
	}
	var leaf *x509.Certificate
	if certPEM != nil {
		var err error
		if leaf, err = parseLeaf(certPEM); err != nil {
			errs = append(errs, &FileError{What: "certificate", Path: certFile, Reason: err.Error()})
		}
	}
	var key crypto.Signer
	if keyPEM != nil {
		var err error
		if key, err = parseKey(keyPEM); err != nil {
			errs = append(errs, &FileError{What: "key", Path: keyFile, Reason: err.Error()})
		}
	}
	if leaf != nil && key != nil {
		if pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool }); !ok || !pub.Equal(leaf.PublicKey) {
			errs = append(errs, &FileError{What: "key", Path: keyFile, Reason: fmt.Sprintf("does not match the certificate in %s (%q): it is the key of another certificate", certFile, leaf.Subject.CommonName)})
		} else if cert, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
			errs = append(errs, &FileError{What: "key", Path: keyFile, Reason: "cannot be used with the certificate in " + certFile, Err: err})
		} else {
			c.Certificate = cert
		}
	}
	return c, errors.Join(errs...)
}

// newTimeout is a context that ends after d.
func newTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}
