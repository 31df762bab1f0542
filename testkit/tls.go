package testkit

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/starcomm/starcomm/transport"
	"github.com/starcomm/starcomm/transport/mtls"
	"github.com/starcomm/starcomm/transport/tcp"
)

// zeroTime asks mtls for its default validity.
var zeroTime time.Time

// TLSHosts are the names a test coordinator's certificate is valid for.
var TLSHosts = []string{"127.0.0.1", "::1", "localhost"}

// TLSNetwork is a Network of TLS (transport/mtls) over real TCP sockets on
// the loopback interface, with a CA of its own: every rank shows a
// certificate it signed. Listen picks a free port.
type TLSNetwork struct {
	TCP tcp.Config
	// CA signs Server's and Client's certificates.
	CA *mtls.CA
	// Server is the coordinator's settings (a certificate valid for
	// TLSHosts), Client the workers'.
	Server, Client mtls.Config
}

// NewTLSNetwork makes a new CA and a certificate for each end.
func NewTLSNetwork() (*TLSNetwork, error) {
	ca, err := mtls.NewCA("starcomm test CA", zeroTime, zeroTime)
	if err != nil {
		return nil, err
	}
	srv, err := ca.Issue(mtls.Leaf{Name: "rank-0", Hosts: TLSHosts})
	if err != nil {
		return nil, err
	}
	clnt, err := ca.Issue(mtls.Leaf{Name: "worker"})
	if err != nil {
		return nil, err
	}
	n := &TLSNetwork{TCP: NewTCPNetwork().Config, CA: ca}
	if n.Server, err = ca.Config(srv); err != nil {
		return nil, err
	}
	if n.Client, err = ca.Config(clnt); err != nil {
		return nil, err
	}
	return n, nil
}

// Listen listens with TLS on a free loopback port.
func (n *TLSNetwork) Listen() (transport.Listener, error) {
	ln, err := tcp.Listen(n.TCP, 0)
	if err != nil {
		return nil, err
	}
	l, err := mtls.NewListener(ln, n.Server)
	if err != nil {
		ln.Close()
		return nil, err
	}
	return l, nil
}

// Dialer returns a TLS dialer over a retrying TCP dialer. It panics if
// the client settings are invalid (NewTLSNetwork's never are).
func (n *TLSNetwork) Dialer() transport.Dialer {
	d, err := mtls.NewDialer(tcp.NewDialer(n.TCP), n.Client)
	if err != nil {
		panic(fmt.Sprintf("testkit: TLS dialer: %v", err))
	}
	return d
}

// TLSFiles are the PEM files of a job's CA and of one certificate per rank,
// as WriteTLSFiles writes them.
type TLSFiles struct {
	// Dir holds the files.
	Dir string
	// CA is the CA's certificate (COBRE_TCP_TLS_CA).
	CA string
	// Cert and Key are rank r's certificate and key (COBRE_TCP_TLS_CERT,
	// COBRE_TCP_TLS_KEY).
	Cert, Key []string
	// Authority is the CA, to issue more certificates.
	Authority *mtls.CA
}

// WriteTLSFiles makes a CA and size rank certificates in dir (rank 0's
// valid for TLSHosts plus hosts) and writes them as PEM files: ca.pem,
// rank-R.pem and rank-R-key.pem.
func WriteTLSFiles(dir string, size int, hosts ...string) (*TLSFiles, error) {
	ca, err := mtls.NewCA("starcomm test CA", zeroTime, zeroTime)
	if err != nil {
		return nil, err
	}
	f := &TLSFiles{Dir: dir, CA: filepath.Join(dir, "ca.pem"), Authority: ca}
	if err := os.WriteFile(f.CA, ca.CertPEM(), 0o644); err != nil {
		return nil, err
	}
	for r := range size {
		leaf := mtls.Leaf{Name: "rank-" + strconv.Itoa(r)}
		if r == 0 {
			leaf.Hosts = append(append([]string{}, TLSHosts...), hosts...)
		}
		cert, key, err := f.WriteLeaf(leaf)
		if err != nil {
			return nil, err
		}
		f.Cert, f.Key = append(f.Cert, cert), append(f.Key, key)
	}
	return f, nil
}

// WriteLeaf issues a certificate for l from the files' CA and writes it as
// NAME.pem and NAME-key.pem in the directory, NAME being l.Name.
func (f *TLSFiles) WriteLeaf(l mtls.Leaf) (cert, key string, err error) {
	i, err := f.Authority.Issue(l)
	if err != nil {
		return "", "", err
	}
	cert, key = filepath.Join(f.Dir, l.Name+".pem"), filepath.Join(f.Dir, l.Name+"-key.pem")
	if err := os.WriteFile(cert, i.CertPEM, 0o644); err != nil {
		return "", "", err
	}
	return cert, key, os.WriteFile(key, i.KeyPEM, 0o600)
}

// Env returns the TLS variables of rank r.
func (f *TLSFiles) Env(r int) []string {
	return []string{"COBRE_TCP_TLS_CERT=" + f.Cert[r], "COBRE_TCP_TLS_KEY=" + f.Key[r], "COBRE_TCP_TLS_CA=" + f.CA}
}
