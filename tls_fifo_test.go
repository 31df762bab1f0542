//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

// syscall.Mkfifo is not on aix, solaris or illumos, whose TLS file checks
// are the same and are tested on the others.

package starcomm_test

import (
	"context"
	"errors"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm"
)

// TestTLSFileNotRegular: a TLS variable naming a named pipe nobody writes
// to, or a device that never ends, fails New at once with an
// *InvalidConfigurationError naming the variable and what the file is, as
// a token file does. Before, a named pipe hung New forever (no timeout
// applies to reading the files), and /dev/zero was read until the
// process ran out of memory ("fatal error: out of memory").
func TestTLSFileNotRegular(t *testing.T) {
	f := tlsFiles(t, 1)
	fifo := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	for _, tc := range []struct {
		name, path, says string
		set              func(c *starcomm.Config, p string)
		variable         string
	}{
		{"ca=named-pipe", fifo, "is a named pipe, not a regular file", func(c *starcomm.Config, p string) { c.TLSCA = p }, "COBRE_TCP_TLS_CA"},
		{"cert=/dev/zero", "/dev/zero", "is a device, not a regular file", func(c *starcomm.Config, p string) { c.TLSCert = p }, "COBRE_TCP_TLS_CERT"},
		{"key=/dev/urandom", "/dev/urandom", "is a device, not a regular file", func(c *starcomm.Config, p string) { c.TLSKey = p }, "COBRE_TCP_TLS_KEY"},
		{"ca=directory", t.TempDir(), "is a directory, not a regular file", func(c *starcomm.Config, p string) { c.TLSCA = p }, "COBRE_TCP_TLS_CA"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tlsConfig(f, 0, 1, 0)
			tc.set(&c, tc.path)
			done := make(chan error, 1)
			go func() {
				comm, err := starcomm.New(context.Background(), c)
				if comm != nil {
					comm.Close()
				}
				done <- err
			}()
			var err error
			select {
			case err = <-done:
			case <-time.After(5 * time.Second):
				t.Fatalf("New did not return within 5s")
			}
			var ic *starcomm.InvalidConfigurationError
			require.True(t, errors.As(err, &ic), "%T %v", err, err)
			assert.Equal(t, tc.variable, ic.Var)
			assert.Equal(t, tc.path, ic.Value)
			assert.ErrorContains(t, err, tc.says)
		})
	}
}
