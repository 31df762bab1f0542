package mtls

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"
)

// CA is a certificate authority made by NewCA: enough to try TLS out, to
// test it and to benchmark it (cmd/starcert and starbench --tls use it).
// A production deployment takes its CA and certificates from its own PKI
// (cert-manager, Vault, an organisation's CA); any that meet the
// requirements in the package documentation will do.
type CA struct {
	// Cert is the CA's self-signed certificate.
	Cert *x509.Certificate
	// Key is its private key.
	Key crypto.Signer
}

// DefaultValidity is how long certificates made by NewCA and Issue are
// valid when no end is given.
const DefaultValidity = 30 * 24 * time.Hour

// clockSkew is how far back a certificate's validity starts when no start
// is given, so that hosts whose clocks lag a little accept it.
const clockSkew = time.Hour

// NewCA makes a self-signed CA named name (its common name) with a new
// ECDSA P-256 key, valid from notBefore to notAfter (zero: from an hour
// ago, for DefaultValidity).
func NewCA(name string, notBefore, notAfter time.Time) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	notBefore, notAfter = validity(notBefore, notAfter)
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key}, nil
}

// Leaf describes a certificate for Issue to make.
type Leaf struct {
	// Name is the certificate's common name (for people: "rank-2").
	Name string
	// Hosts are the DNS names and IP addresses the certificate is valid
	// for (its subject alternative names): the coordinator's must include
	// the name workers dial. A worker's needs none.
	Hosts []string
	// NotBefore and NotAfter bound its validity (zero: from an hour ago,
	// for DefaultValidity).
	NotBefore, NotAfter time.Time
	// Usages are its extended key usages (nil: server and client
	// authentication, so that one certificate serves any rank).
	Usages []x509.ExtKeyUsage
}

// Issued is a certificate Issue made, with its new private key, in PEM.
type Issued struct {
	// CertPEM is the certificate (a COBRE_TCP_TLS_CERT file).
	CertPEM []byte
	// KeyPEM is its private key, PKCS #8 (a COBRE_TCP_TLS_KEY file: keep
	// it readable by its rank only).
	KeyPEM []byte
}

// Issue makes a certificate for l signed by ca, with a new ECDSA P-256
// key.
func (ca *CA) Issue(l Leaf) (*Issued, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	notBefore, notAfter := validity(l.NotBefore, l.NotAfter)
	usages := l.Usages
	if usages == nil {
		usages = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: l.Name},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usages,
	}
	for _, h := range l.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &Issued{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

// Certificate returns i as a tls.Certificate (for Config.Certificate).
func (i *Issued) Certificate() (tls.Certificate, error) { return tls.X509KeyPair(i.CertPEM, i.KeyPEM) }

// CertPEM returns the CA's certificate in PEM (a COBRE_TCP_TLS_CA file).
func (ca *CA) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw})
}

// KeyPEM returns the CA's private key in PEM (PKCS #8): needed only to
// issue more certificates, never by a rank.
func (ca *CA) KeyPEM() ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(ca.Key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// Pool returns a pool holding the CA's certificate (for Config.CA).
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Config returns DefaultConfig with Certificate set to i and CA to ca.
func (ca *CA) Config(i *Issued) (Config, error) {
	cert, err := i.Certificate()
	if err != nil {
		return Config{}, err
	}
	c := DefaultConfig()
	c.Certificate, c.CA = cert, ca.Pool()
	return c, nil
}

// LoadCA reads a CA that NewCA made (or any CA certificate and its
// private key, in PEM) to issue more certificates.
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	cert, err := parseLeaf(certPEM)
	if err != nil {
		return nil, fmt.Errorf("mtls: CA certificate %v", err)
	}
	if !cert.IsCA {
		return nil, errors.New("mtls: the CA certificate is not a CA's (basic constraints CA:FALSE)")
	}
	key, err := parseKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("mtls: CA key %v", err)
	}
	if pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool }); !ok || !pub.Equal(cert.PublicKey) {
		return nil, errors.New("mtls: the CA key does not match the CA certificate")
	}
	return &CA{Cert: cert, Key: key}, nil
}

func validity(notBefore, notAfter time.Time) (time.Time, time.Time) {
	if notBefore.IsZero() {
		notBefore = time.Now().Add(-clockSkew).Truncate(time.Second)
	}
	if notAfter.IsZero() {
		notAfter = notBefore.Add(DefaultValidity)
	}
	return notBefore, notAfter
}

func newSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}
