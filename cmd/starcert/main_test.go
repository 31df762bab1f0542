package main

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm"
	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/testkit"
	"github.com/starcomm/starcomm/transport/mtls"
)

// starcert runs the command and returns its exit code and outputs.
func starcert(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestWrites: starcert writes a CA and one certificate per rank; each
// rank's files load, are signed by the CA, serve as a coordinator's (valid
// for every -hosts name) and a worker's certificate; keys are private; it
// prints every rank's variables; and it never overwrites a file.
func TestWrites(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	code, out, errOut := starcert("-dir", dir, "-ranks", "3", "-hosts", "node0, 10.0.0.10,[::1],*.jobs.example.org,fe80::1%eth0", "-days", "2")
	require.Equal(t, 0, code, errOut)
	ca := filepath.Join(dir, "ca.pem")
	for r := range 3 {
		cert, key := filepath.Join(dir, "rank-"+strconv.Itoa(r)+".pem"), filepath.Join(dir, "rank-"+strconv.Itoa(r)+"-key.pem")
		assert.Contains(t, out, "rank "+strconv.Itoa(r)+": COBRE_TCP_TLS_CERT="+cert+" COBRE_TCP_TLS_KEY="+key+" COBRE_TCP_TLS_CA="+ca)
		c, err := mtls.Load(cert, key, ca)
		require.NoError(t, err)
		for _, u := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
			assert.NoError(t, c.CheckCertificate(u, time.Now()))
		}
		assert.Error(t, c.CheckCertificate(x509.ExtKeyUsageClientAuth, time.Now().Add(3*24*time.Hour)), "valid for -days only")
		leaf, err := x509.ParseCertificate(c.Certificate.Certificate[0])
		require.NoError(t, err)
		for _, h := range []string{"node0", "10.0.0.10", "::1", "rank3.jobs.example.org", "fe80::1"} {
			assert.NoError(t, leaf.VerifyHostname(h))
		}
		assert.Error(t, leaf.VerifyHostname("localhost"), "only the -hosts given")
		st, err := os.Stat(key)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "a key is readable by its owner only")
	}
	st, err := os.Stat(filepath.Join(dir, "ca-key.pem"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	before, err := os.ReadFile(ca)
	require.NoError(t, err)
	code, _, errOut = starcert("-dir", dir)
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "file exists")
	after, err := os.ReadFile(ca)
	require.NoError(t, err)
	assert.Equal(t, before, after, "the CA was not overwritten")
}

// TestExistingCA: with -ca-cert and -ca-key, starcert issues certificates
// from an existing CA: they verify against its certificate.
func TestExistingCA(t *testing.T) {
	first := t.TempDir()
	code, _, errOut := starcert("-dir", first, "-ranks", "1")
	require.Equal(t, 0, code, errOut)
	more := t.TempDir()
	code, _, errOut = starcert("-dir", more, "-ranks", "2", "-ca-cert", filepath.Join(first, "ca.pem"), "-ca-key", filepath.Join(first, "ca-key.pem"))
	require.Equal(t, 0, code, errOut)
	_, err := os.Stat(filepath.Join(more, "ca-key.pem"))
	assert.True(t, errors.Is(err, os.ErrNotExist), "the CA's key is not copied")
	c, err := mtls.Load(filepath.Join(more, "rank-1.pem"), filepath.Join(more, "rank-1-key.pem"), filepath.Join(first, "ca.pem"))
	require.NoError(t, err)
	assert.NoError(t, c.CheckCertificate(x509.ExtKeyUsageClientAuth, time.Now()))
	code, _, errOut = starcert("-dir", t.TempDir(), "-ca-cert", filepath.Join(first, "rank-0.pem"), "-ca-key", filepath.Join(first, "rank-0-key.pem"))
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "not a CA's")
}

// TestUsage: bad command lines exit 2 saying what is wrong.
func TestUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		says string
	}{
		{nil, "-dir is required"},
		{[]string{"-dir", "d", "-ranks", "0"}, "-ranks must be at least 1"},
		{[]string{"-dir", "d", "-ranks", "100000000"}, "-ranks is 100000000; a job has at most 1048576 ranks"},
		{[]string{"-dir", "d", "-days", "0"}, "-days must be at least 1"},
		{[]string{"-dir", "d", "-days", "106752"}, "-days must be at most 36500 (100 years), got 106752"},
		{[]string{"-dir", "d", "-days", "9999999999999"}, "-days must be at most 36500"},
		{[]string{"-dir", "d", "-ca-cert", "ca.pem"}, "-ca-cert and -ca-key go together"},
		{[]string{"-dir", "d", "extra"}, `unexpected argument "extra"`},
		{[]string{"-bogus"}, "flag provided but not defined"},
		{[]string{"-dir", "d", "-hosts", ""}, `-hosts must name at least one host name or IP address (got "")`},
		{[]string{"-dir", "d", "-hosts", " , "}, "-hosts must name at least one"},
		{[]string{"-dir", "d", "-hosts", "node0,a b"}, `-hosts: "a b" is not a host name`},
		{[]string{"-dir", "d", "-hosts", "!!"}, `-hosts: "!!" is not a host name`},
		{[]string{"-dir", "d", "-hosts", "999.1.1.1"}, `"999.1.1.1" is not a valid IPv4 address`},
		{[]string{"-dir", "d", "-hosts", "*.10.0.0.1"}, "a wildcard goes before a host name"},
		{[]string{"-dir", "d", "-hosts", "[node0]"}, "brackets must enclose an IPv6 address"},
		{[]string{"-dir", "d", "-hosts", "[::1"}, "brackets must enclose an IPv6 address"},
		{[]string{"-dir", "d", "-hosts", "node0:29500"}, `-hosts: "node0:29500": a certificate holds host names and IP addresses, without a port (drop ":29500")`},
		{[]string{"-dir", "d", "-hosts", "10.0.0.1:29500"}, "without a port"},
		{[]string{"-dir", "d", "-hosts", "[::1]:29500"}, "without a port"},
	} {
		code, _, errOut := starcert(tc.args...)
		assert.Equal(t, 2, code, "%v", tc.args)
		assert.Contains(t, errOut, tc.says, "%v", tc.args)
	}
}

// TestCAFileNotRegular: -ca-cert or -ca-key naming a device or a named
// pipe exits 1 saying what the file is (before, /dev/zero was read until
// "fatal error: out of memory", and a named pipe nobody wrote to hung).
func TestCAFileNotRegular(t *testing.T) {
	first := t.TempDir()
	code, _, errOut := starcert("-dir", first, "-ranks", "1")
	require.Equal(t, 0, code, errOut)
	code, _, errOut = starcert("-dir", t.TempDir(), "-ca-cert", "/dev/zero", "-ca-key", filepath.Join(first, "ca-key.pem"))
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "CA certificate file /dev/zero: is a device, not a regular file")
	code, _, errOut = starcert("-dir", t.TempDir(), "-ca-cert", filepath.Join(first, "ca.pem"), "-ca-key", "/dev/urandom")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "CA key file /dev/urandom: is a device, not a regular file")
}

// TestLongValidity: the longest -days gives certificates valid from an
// hour ago until that many days later (before -days was checked, 106752
// days and more overflowed a time.Duration: starcert exited 0 with
// certificates that expired before they were issued, "until 1734-08-19").
func TestLongValidity(t *testing.T) {
	dir := t.TempDir()
	code, out, errOut := starcert("-dir", dir, "-ranks", "1", "-days", "36500")
	require.Equal(t, 0, code, errOut)
	c, err := mtls.Load(filepath.Join(dir, "rank-0.pem"), filepath.Join(dir, "rank-0-key.pem"), filepath.Join(dir, "ca.pem"))
	require.NoError(t, err)
	leaf, err := x509.ParseCertificate(c.Certificate.Certificate[0])
	require.NoError(t, err)
	want := time.Now().AddDate(0, 0, 36500)
	assert.WithinDuration(t, want, leaf.NotAfter, 2*time.Hour, "NotAfter")
	assert.True(t, leaf.NotBefore.Before(leaf.NotAfter), "NotBefore %v, NotAfter %v", leaf.NotBefore, leaf.NotAfter)
	assert.NoError(t, c.CheckCertificate(x509.ExtKeyUsageServerAuth, time.Now()))
	assert.Contains(t, out, "until "+leaf.NotAfter.UTC().Format(time.RFC3339))
}

// TestJob: a 2-rank job over real TCP with TLS starts from starcert's
// files (the default -hosts cover 127.0.0.1) and runs a collective.
func TestJob(t *testing.T) {
	testkit.CheckGoroutines(t)
	dir := t.TempDir()
	code, _, errOut := starcert("-dir", dir, "-ranks", "2")
	require.Equal(t, 0, code, errOut)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	port := make(chan int, 1)
	comms, errs := make([]comm.Communicator, 2), make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		c := starcomm.DefaultConfig()
		c.Backend, c.Rank, c.Size, c.Coordinator, c.BindAddr = starcomm.BackendTCP, r, 2, "127.0.0.1", "127.0.0.1"
		c.TLSCert, c.TLSKey, c.TLSCA = filepath.Join(dir, "rank-"+strconv.Itoa(r)+".pem"), filepath.Join(dir, "rank-"+strconv.Itoa(r)+"-key.pem"), filepath.Join(dir, "ca.pem")
		if r == 0 {
			c.Port, c.Listening = 0, func(p int) { port <- p }
		} else {
			c.Port = <-port
		}
		wg.Go(func() { comms[r], errs[r] = starcomm.New(ctx, c) })
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	require.NoError(t, errors.Join(testkit.RunRanks(comms, func(c comm.Communicator) error { return c.Barrier(ctx) })...))
	require.NoError(t, testkit.CloseAll(comms))
}
