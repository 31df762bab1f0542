//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

// syscall.Mkfifo is not on aix, solaris or illumos, whose token-file code is
// the same and is tested on the others.

package starcomm_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm"
	"github.com/starcomm/starcomm/star"
)

// TestConfigTokenFileKinds: COBRE_TCP_TOKEN_FILE naming a named pipe is
// refused at once, saying so, whether or not anyone writes to it (opening
// one that no one writes to blocks forever: the check must not open it so);
// a link to a regular file (as a mounted secret is) gives the file's token,
// its trailing CRLF removed; a file the process may not read says so (when
// not run as root, who may read any). Every error is an
// InvalidConfigurationError naming COBRE_TCP_TOKEN_FILE and showing no
// token.
func TestConfigTokenFileKinds(t *testing.T) {
	env := func(path string) map[string]string {
		return map[string]string{"COBRE_TCP_COORDINATOR": "h", "COBRE_TCP_RANK": "1", "COBRE_TCP_SIZE": "2", "COBRE_TCP_TOKEN_FILE": path}
	}
	invalid := func(t *testing.T, err error, want string) {
		t.Helper()
		var ic *starcomm.InvalidConfigurationError
		require.ErrorAs(t, err, &ic)
		assert.Equal(t, "COBRE_TCP_TOKEN_FILE", ic.Var)
		assert.Contains(t, err.Error(), want)
		assertNoToken(t, "the error", err.Error())
	}
	t.Run("fifo", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "fifo")
		require.NoError(t, syscall.Mkfifo(path, 0o600))
		_, err := starcomm.ConfigFromLookup(lookup(env(path)))
		invalid(t, err, "the token file is a named pipe, not a regular file: give a file that holds the token")
		cfg := starcomm.DefaultConfig()
		cfg.Backend, cfg.Size, cfg.TokenFile = "tcp", 1, path
		_, err = starcomm.New(t.Context(), cfg)
		var ic *starcomm.InvalidConfigurationError
		require.ErrorAs(t, err, &ic)
		assert.Contains(t, err.Error(), "a named pipe")
	})
	t.Run("symlink", func(t *testing.T) {
		dir := t.TempDir()
		target := writeFile(t, "token", testToken+"\r\n")
		link := filepath.Join(dir, "token")
		require.NoError(t, os.Symlink(target, link))
		cfg, err := starcomm.ConfigFromLookup(lookup(env(link)))
		require.NoError(t, err)
		assert.Equal(t, link, cfg.TokenFile)
		tok, err := starcomm.TokenOf(cfg)
		require.NoError(t, err)
		assert.Equal(t, star.Token(testToken), tok, "CRLF removed")
	})
	t.Run("unreadable", func(t *testing.T) {
		if os.Geteuid() == 0 {
			t.Skip("root may read any file")
		}
		path := writeFile(t, "token", testToken)
		require.NoError(t, os.Chmod(path, 0))
		_, err := starcomm.ConfigFromLookup(lookup(env(path)))
		invalid(t, err, "cannot read the token file (this process's user may not read it): open "+path+": permission denied")
	})
}
