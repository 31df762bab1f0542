// Command starcert makes a certificate authority and one certificate per
// rank for starcomm's TLS (COBRE_TCP_TLS_CERT, COBRE_TCP_TLS_KEY,
// COBRE_TCP_TLS_CA): enough to try TLS out, for tests and for benchmarks.
// Production deployments should take their CA and certificates from their
// own PKI (cert-manager, Vault, an organisation's CA); the README's "TLS"
// says what the certificates need.
//
//	go run ./cmd/starcert -dir certs -ranks 4 -hosts node0,10.0.0.10
//
// writes, in certs/ (created if missing; existing files are not
// overwritten):
//
//	ca.pem            the CA's certificate: COBRE_TCP_TLS_CA on every rank
//	ca-key.pem        the CA's key (mode 0600): keep it off the ranks; with
//	                  -ca-key, starcert issues more certificates from it
//	rank-R.pem        rank R's certificate: COBRE_TCP_TLS_CERT
//	rank-R-key.pem    its key (mode 0600): COBRE_TCP_TLS_KEY
//
// Every certificate is valid for both server and client authentication, and
// for the names and addresses of -hosts (the names workers dial to reach
// rank 0, COBRE_TCP_COORDINATOR), so any rank's may serve as rank 0's.
// Keys are ECDSA P-256. It prints each rank's variables.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/starcomm/starcomm/star"
	"github.com/starcomm/starcomm/transport/mtls"
	"github.com/starcomm/starcomm/transport/tcp"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// run is starcert with args (without the program name); it returns the
// exit code: 0, 1 on failure, 2 on a bad command line.
func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("starcert", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "directory to write the files to (required)")
	ranks := fs.Int("ranks", 4, "number of rank certificates, rank-0 to rank-(N-1), at most 1048576")
	hosts := fs.String("hosts", "localhost,127.0.0.1,::1", "comma-separated DNS names and IP addresses every certificate is valid for: the names workers dial to reach rank 0 (COBRE_TCP_COORDINATOR)")
	days := fs.Int("days", 30, "validity in days, from an hour ago, 1..36500 (100 years)")
	caCert := fs.String("ca-cert", "", "issue from this existing CA certificate (PEM) instead of making a new CA; needs -ca-key")
	caKey := fs.String("ca-key", "", "the existing CA's private key (PEM)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: starcert -dir DIR [-ranks N] [-hosts h1,h2] [-days D] [-ca-cert ca.pem -ca-key ca-key.pem]")
		fmt.Fprintln(stderr, "\nMakes a CA and one certificate per rank for COBRE_TCP_TLS_CERT, COBRE_TCP_TLS_KEY and COBRE_TCP_TLS_CA.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	bad := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "starcert: "+format+"\n", a...)
		fs.Usage()
		return 2
	}
	switch {
	case fs.NArg() > 0:
		return bad("unexpected argument %q", fs.Arg(0))
	case *dir == "":
		return bad("-dir is required")
	case *ranks < 1:
		return bad("-ranks must be at least 1, got %d", *ranks)
	case *ranks > star.MaxSize:
		return bad("-ranks is %d; a job has at most %d ranks", *ranks, star.MaxSize)
	case *days < 1:
		return bad("-days must be at least 1, got %d", *days)
	case *days > maxDays:
		return bad("-days must be at most %d (100 years), got %d", maxDays, *days)
	case (*caCert == "") != (*caKey == ""):
		return bad("-ca-cert and -ca-key go together")
	}
	names, err := splitHosts(*hosts)
	if err != nil {
		return bad("%v", err)
	}
	if err := write(*dir, *ranks, names, *days, *caCert, *caKey, stdout); err != nil {
		fmt.Fprintf(stderr, "starcert: %v\n", err)
		return 1
	}
	return 0
}

// maxDays is the longest -days: 100 years. A time.Duration holds no more
// than about 292 years, and certificates are dated up to the year 9999.
const maxDays = 36500

// splitHosts returns the names and addresses of -hosts, or an error
// naming the first that no worker could dial (it would only make a
// certificate that no connection accepts): each is an IP address (an IPv6
// one with or without brackets; a zone, "%eth0", is dropped: the
// certificate holds the address), a host name as COBRE_TCP_COORDINATOR
// takes it, or such a name under a wildcard ("*.jobs.example.org").
func splitHosts(s string) ([]string, error) {
	var hosts []string
	for _, h := range strings.Split(s, ",") {
		if h = strings.TrimSpace(h); h == "" {
			continue
		}
		if _, port, err := net.SplitHostPort(h); err == nil {
			return nil, fmt.Errorf("-hosts: %q: a certificate holds host names and IP addresses, without a port (drop \":%s\")", h, port)
		}
		if inner, ok := strings.CutPrefix(h, "["); ok {
			inner, closed := strings.CutSuffix(inner, "]")
			if a, err := netip.ParseAddr(inner); !closed || err != nil || !a.Is6() {
				return nil, fmt.Errorf("-hosts: %q: brackets must enclose an IPv6 address, such as [::1]", h)
			}
			h = inner
		}
		if a, err := netip.ParseAddr(h); err == nil && a.Zone() != "" {
			// A certificate holds the address; the zone is the
			// interface a rank reaches it through.
			h = a.WithZone("").String()
		}
		name := strings.TrimPrefix(h, "*.")
		if err := tcp.CheckHost(name); err != nil {
			return nil, fmt.Errorf("-hosts: %v (each entry is a host name or IP address that workers dial to reach rank 0)", err)
		}
		if name != h && net.ParseIP(name) != nil {
			return nil, fmt.Errorf("-hosts: %q: a wildcard goes before a host name, not an IP address", h)
		}
		hosts = append(hosts, h)
	}
	if len(hosts) == 0 {
		return nil, fmt.Errorf("-hosts must name at least one host name or IP address (got %q): the names workers dial to reach rank 0", s)
	}
	return hosts, nil
}

// write makes (or loads) the CA and the rank certificates and writes them.
func write(dir string, ranks int, hosts []string, days int, caCert, caKey string, stdout io.Writer) error {
	notBefore := time.Now().Add(-time.Hour).Truncate(time.Second)
	notAfter := notBefore.AddDate(0, 0, days)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var ca *mtls.CA
	caPath := filepath.Join(dir, "ca.pem")
	if caCert != "" {
		certPEM, err := mtls.ReadPEM("CA certificate", caCert)
		if err != nil {
			return err
		}
		keyPEM, err := mtls.ReadPEM("CA key", caKey)
		if err != nil {
			return err
		}
		if ca, err = mtls.LoadCA(certPEM, keyPEM); err != nil {
			return err
		}
		if err := create(caPath, ca.CertPEM(), 0o644); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	} else {
		var err error
		if ca, err = mtls.NewCA("starcomm CA", notBefore, notAfter); err != nil {
			return err
		}
		keyPEM, err := ca.KeyPEM()
		if err != nil {
			return err
		}
		if err := create(caPath, ca.CertPEM(), 0o644); err != nil {
			return err
		}
		if err := create(filepath.Join(dir, "ca-key.pem"), keyPEM, 0o600); err != nil {
			return err
		}
	}
	for r := range ranks {
		name := "rank-" + strconv.Itoa(r)
		i, err := ca.Issue(mtls.Leaf{Name: name, Hosts: hosts, NotBefore: notBefore, NotAfter: notAfter})
		if err != nil {
			return err
		}
		cert, key := filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
		if err := create(cert, i.CertPEM, 0o644); err != nil {
			return err
		}
		if err := create(key, i.KeyPEM, 0o600); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "rank %d: COBRE_TCP_TLS_CERT=%s COBRE_TCP_TLS_KEY=%s COBRE_TCP_TLS_CA=%s\n", r, cert, key, caPath)
	}
	fmt.Fprintf(stdout, "valid for %s until %s\n", strings.Join(hosts, ", "), notAfter.UTC().Format(time.RFC3339))
	return nil
}

// create writes a new file; an existing one is an error (fs.ErrExist).
func create(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
