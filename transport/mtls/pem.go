package mtls

import (
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
)

// blocks returns the PEM blocks of b, or an error saying that b holds none
// (and, for a file that is plainly something else, what it looks like).
func blocks(b []byte) ([]*pem.Block, error) {
	var out []*pem.Block
	rest := b
	for {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		out = append(out, blk)
	}
	if len(out) == 0 {
		if len(strings.TrimSpace(string(b))) == 0 {
			return nil, errors.New("is empty; want PEM")
		}
		return nil, errors.New("holds no PEM block (want \"-----BEGIN ...-----\" lines; a DER file must be converted to PEM)")
	}
	return out, nil
}

// parseLeaf returns the first certificate of a PEM chain; every
// CERTIFICATE block must parse.
func parseLeaf(b []byte) (*x509.Certificate, error) {
	bs, err := blocks(b)
	if err != nil {
		return nil, err
	}
	var leaf *x509.Certificate
	for i, blk := range bs {
		if blk.Type != "CERTIFICATE" {
			if strings.HasSuffix(blk.Type, "PRIVATE KEY") {
				return nil, fmt.Errorf("holds a %s: the private key belongs in the key file, not the certificate file", blk.Type)
			}
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d of the file does not parse: %v", i+1, err)
		}
		if leaf == nil {
			leaf = c
		}
	}
	if leaf == nil {
		return nil, fmt.Errorf("holds no CERTIFICATE block (found %s)", types(bs))
	}
	return leaf, nil
}

// parseKey returns the private key of a PEM key file (PKCS #8, PKCS #1 or
// SEC 1).
func parseKey(b []byte) (crypto.Signer, error) {
	bs, err := blocks(b)
	if err != nil {
		return nil, err
	}
	for _, blk := range bs {
		if !strings.HasSuffix(blk.Type, "PRIVATE KEY") {
			continue
		}
		if strings.Contains(blk.Type, "ENCRYPTED") || blk.Headers["Proc-Type"] != "" {
			return nil, errors.New("holds an encrypted private key; give the key unencrypted (readable by this rank only, mode 0600)")
		}
		var key any
		if k, err := x509.ParsePKCS8PrivateKey(blk.Bytes); err == nil {
			key = k
		} else if k, err := x509.ParsePKCS1PrivateKey(blk.Bytes); err == nil {
			key = k
		} else if k, err := x509.ParseECPrivateKey(blk.Bytes); err == nil {
			key = k
		} else {
			return nil, fmt.Errorf("its %s does not parse as PKCS #8, PKCS #1 or SEC 1", blk.Type)
		}
		s, ok := key.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("its key of type %T cannot sign", key)
		}
		return s, nil
	}
	if _, err := parseLeaf(b); err == nil {
		return nil, errors.New("holds a certificate, not a private key (are the certificate and key files swapped?)")
	}
	return nil, fmt.Errorf("holds no PRIVATE KEY block (found %s)", types(bs))
}

// parseCA returns a pool of every certificate in a PEM file.
func parseCA(b []byte) (*x509.CertPool, error) {
	bs, err := blocks(b)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	n := 0
	for i, blk := range bs {
		if blk.Type != "CERTIFICATE" {
			if strings.HasSuffix(blk.Type, "PRIVATE KEY") {
				return nil, fmt.Errorf("holds a %s: give the CA's certificate only (its key must not be shipped to the ranks)", blk.Type)
			}
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d of the file does not parse: %v", i+1, err)
		}
		pool.AddCert(c)
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("holds no CERTIFICATE block (found %s)", types(bs))
	}
	return pool, nil
}

// types lists the PEM block types of bs, for messages.
func types(bs []*pem.Block) string {
	ts := make([]string, len(bs))
	for i, b := range bs {
		ts[i] = fmt.Sprintf("%q", b.Type)
	}
	return strings.Join(ts, ", ")
}
