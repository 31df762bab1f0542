package starcomm

import (
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	"github.com/starcomm/starcomm/star"
	"github.com/starcomm/starcomm/transport/mtls"
)

// plaintextRefusal is what a TLS coordinator answers, in the clear, to a
// worker that connects without TLS: an Abort frame refusing its Handshake,
// so that its start-up fails saying why (a *star.RefusedError).
var plaintextRefusal = star.EncodeAbort("bad handshake: this coordinator requires TLS (" + EnvTLSCert + ", " + EnvTLSKey + ", " + EnvTLSCA +
	") and this connection spoke plain TCP: give every rank the TLS variables\nstarcomm-abort/1 rank=-1 op=" + star.OpStartup + " cause=refused")

// tlsConfig returns the TLS settings of cfg's tcp backend: nil without
// TLS files, else their contents checked for this rank's role (rank 0's
// certificate for server authentication, a worker's for client
// authentication), valid now and signed by the CA. A file that cannot be
// used is an *InvalidConfigurationError naming its variable, the path and
// what is wrong (several joined).
func tlsConfig(cfg Config) (*mtls.Config, error) {
	if cfg.TLSCert == "" && cfg.TLSKey == "" && cfg.TLSCA == "" {
		return nil, nil
	}
	m, err := mtls.Load(cfg.TLSCert, cfg.TLSKey, cfg.TLSCA)
	if err != nil {
		var errs []error
		for _, e := range unjoin(err) {
			var fe *mtls.FileError
			if !errors.As(e, &fe) {
				errs = append(errs, e)
				continue
			}
			allowed := fe.Reason
			if fe.Err != nil {
				allowed += ": " + fe.Err.Error()
			}
			errs = append(errs, &InvalidConfigurationError{Var: tlsVar(fe.What), Value: fe.Path, Allowed: "the " + fe.What + " file " + allowed})
		}
		return nil, joinErrors(errs)
	}
	usage := x509.ExtKeyUsageClientAuth
	if cfg.Rank == 0 {
		usage = x509.ExtKeyUsageServerAuth
	}
	if err := m.CheckCertificate(usage, time.Now()); err != nil {
		return nil, &InvalidConfigurationError{Var: EnvTLSCert, Value: cfg.TLSCert, Allowed: fmt.Sprintf("unusable with %s=%s: %v", EnvTLSCA, cfg.TLSCA, err)}
	}
	m.HandshakeTimeout = min(mtls.DefaultHandshakeTimeout, cfg.ConnectTimeout)
	m.PlaintextReply = plaintextRefusal
	return &m, nil
}

// tlsVar is the variable of an mtls.FileError's file.
func tlsVar(what string) string {
	switch what {
	case "key":
		return EnvTLSKey
	case "CA":
		return EnvTLSCA
	}
	return EnvTLSCert
}

// unjoin returns the errors errors.Join joined, or err alone.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
