package starcomm_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm"
	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/internal/errfile"
	"github.com/starcomm/starcomm/shm"
	"github.com/starcomm/starcomm/star"
	"github.com/starcomm/starcomm/testkit"
	"github.com/starcomm/starcomm/transport/tcp"
)

func lookup(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

func TestConfigDefaults(t *testing.T) {
	cfg, err := starcomm.ConfigFromLookup(lookup(map[string]string{
		"COBRE_TCP_COORDINATOR": "node0", "COBRE_TCP_RANK": "2", "COBRE_TCP_SIZE": "4",
	}))
	require.NoError(t, err)
	assert.Equal(t, "node0", cfg.Coordinator)
	assert.Equal(t, 29500, cfg.Port)
	assert.Equal(t, 2, cfg.Rank)
	assert.Equal(t, 4, cfg.Size)
	assert.Equal(t, 60*time.Second, cfg.Timeout)
	assert.Equal(t, "0.0.0.0", cfg.BindAddr)
	assert.Equal(t, 30*time.Second, cfg.ConnectTimeout)
	assert.Equal(t, 100*time.Microsecond, cfg.Spin)
	assert.Equal(t, time.Millisecond, cfg.SpinMax)
	assert.Equal(t, "auto", cfg.Backend)
}

func TestConfigAllVariables(t *testing.T) {
	cfg, err := starcomm.ConfigFromLookup(lookup(map[string]string{
		"COBRE_COMM_BACKEND": "TCP", "COBRE_TCP_COORDINATOR": "10.0.0.1", "COBRE_TCP_PORT": "4000",
		"COBRE_TCP_RANK": "0", "COBRE_TCP_SIZE": "8", "COBRE_TCP_TIMEOUT_SECS": "2.5",
		"COBRE_TCP_BIND_ADDR": "127.0.0.1", "COBRE_TCP_CONNECT_TIMEOUT_MS": "1500", "COBRE_TCP_SPIN_US": "150",
		"COBRE_TCP_SPIN_MAX_US": "2500", "COBRE_TCP_LIVENESS_SECS": "2.5", "COBRE_LOG": "WARN", "COBRE_DEBUG": "detail", "COBRE_TCP_BUFFER_BYTES": "212992",
	}))
	require.NoError(t, err)
	assert.Equal(t, starcomm.Config{Backend: "tcp", Coordinator: "10.0.0.1", Port: 4000, Rank: 0, Size: 8,
		Timeout: 2500 * time.Millisecond, BindAddr: "127.0.0.1", ConnectTimeout: 1500 * time.Millisecond,
		ShmTimeout: 60 * time.Second, Spin: 150 * time.Microsecond, SpinMax: 2500 * time.Microsecond, BufferBytes: 212992, Liveness: 2500 * time.Millisecond, Log: "warn", Debug: "detail"}, cfg)
}

// TestConfigCoordinatorNeedsNoAddress: rank 0 with backend tcp does not
// need COBRE_TCP_COORDINATOR.
func TestConfigCoordinatorNeedsNoAddress(t *testing.T) {
	cfg, err := starcomm.ConfigFromLookup(lookup(map[string]string{
		"COBRE_COMM_BACKEND": "tcp", "COBRE_TCP_RANK": "0", "COBRE_TCP_SIZE": "3",
	}))
	require.NoError(t, err)
	assert.Equal(t, 0, cfg.Rank)
	require.NoError(t, cfg.Validate())
}

func TestConfigMissingListsAll(t *testing.T) {
	cases := map[string]struct {
		env  map[string]string
		want []string
	}{
		"nothing":          {map[string]string{"COBRE_COMM_BACKEND": "tcp"}, []string{"COBRE_TCP_RANK", "COBRE_TCP_SIZE", "COBRE_TCP_COORDINATOR"}},
		"worker no coord":  {map[string]string{"COBRE_COMM_BACKEND": "tcp", "COBRE_TCP_RANK": "1", "COBRE_TCP_SIZE": "2"}, []string{"COBRE_TCP_COORDINATOR"}},
		"size only":        {map[string]string{"COBRE_TCP_COORDINATOR": "h", "COBRE_TCP_RANK": "1"}, []string{"COBRE_TCP_SIZE"}},
		"rank only":        {map[string]string{"COBRE_TCP_COORDINATOR": "h", "COBRE_TCP_SIZE": "2"}, []string{"COBRE_TCP_RANK"}},
		"empty is missing": {map[string]string{"COBRE_TCP_COORDINATOR": "h", "COBRE_TCP_SIZE": " ", "COBRE_TCP_RANK": ""}, []string{"COBRE_TCP_RANK", "COBRE_TCP_SIZE"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := starcomm.ConfigFromLookup(lookup(tc.env))
			var m *comm.MissingConfigurationError
			require.ErrorAs(t, err, &m)
			assert.ElementsMatch(t, tc.want, m.MissingVars)
			for _, v := range tc.want {
				assert.Contains(t, err.Error(), v)
			}
		})
	}
}

func TestConfigBadValues(t *testing.T) {
	base := func() map[string]string {
		return map[string]string{"COBRE_TCP_COORDINATOR": "h", "COBRE_TCP_RANK": "1", "COBRE_TCP_SIZE": "4"}
	}
	cases := []struct {
		name, varName, value, allowed string
	}{
		{"rank not a number", "COBRE_TCP_RANK", "one", "not an integer"},
		{"rank negative", "COBRE_TCP_RANK", "-1", ">= 0"},
		{"rank >= size", "COBRE_TCP_RANK", "4", "< COBRE_TCP_SIZE (4)"},
		{"size zero", "COBRE_TCP_SIZE", "0", ">= 1"},
		{"size not a number", "COBRE_TCP_SIZE", "4x", "not an integer"},
		{"port zero", "COBRE_TCP_PORT", "0", "1..65535"},
		{"port too large", "COBRE_TCP_PORT", "65536", "1..65535"},
		{"port not a number", "COBRE_TCP_PORT", "http", "not an integer"},
		{"timeout zero", "COBRE_TCP_TIMEOUT_SECS", "0", "0.001..31536000"},
		{"timeout negative", "COBRE_TCP_TIMEOUT_SECS", "-5", "0.001..31536000"},
		{"timeout not a number", "COBRE_TCP_TIMEOUT_SECS", "soon", "not a number"},
		{"timeout NaN", "COBRE_TCP_TIMEOUT_SECS", "NaN", "not a number"},
		{"timeout with a digit separator", "COBRE_TCP_TIMEOUT_SECS", "1_000", "not a number"},
		{"timeout as a hexadecimal float", "COBRE_TCP_TIMEOUT_SECS", "0x1p4", "not a number"},
		{"liveness with a digit separator", "COBRE_TCP_LIVENESS_SECS", "0_0", "not a number"},
		{"connect timeout zero", "COBRE_TCP_CONNECT_TIMEOUT_MS", "0", "1..2147483647"},
		{"connect timeout max int64", "COBRE_TCP_CONNECT_TIMEOUT_MS", "9223372036854775807", "must be a whole number of milliseconds in 1..2147483647"},
		{"connect timeout beyond int64", "COBRE_TCP_CONNECT_TIMEOUT_MS", "99999999999999999999", "must be a whole number of milliseconds in 1..2147483647"},
		{"connect timeout beyond int32", "COBRE_TCP_CONNECT_TIMEOUT_MS", "2147483648", "must be a whole number of milliseconds in 1..2147483647"},
		{"connect timeout not a number", "COBRE_TCP_CONNECT_TIMEOUT_MS", "1s", "not an integer"},
		{"spin negative", "COBRE_TCP_SPIN_US", "-1", "0..1000000"},
		{"spin not a number", "COBRE_TCP_SPIN_US", "fast", "not an integer"},
		{"spin max negative", "COBRE_TCP_SPIN_MAX_US", "-1", "must be a number of microseconds in 0..1000000 (0: the spin stays at COBRE_TCP_SPIN_US)"},
		{"spin max too large", "COBRE_TCP_SPIN_MAX_US", "1000001", "0..1000000"},
		{"spin max in milliseconds", "COBRE_TCP_SPIN_MAX_US", "1ms", "not an integer"},
		{"buffer negative", "COBRE_TCP_BUFFER_BYTES", "-1", "0..2147483647"},
		{"buffer too large", "COBRE_TCP_BUFFER_BYTES", "2147483648", "0..2147483647"},
		{"buffer with a unit", "COBRE_TCP_BUFFER_BYTES", "4MiB", "not an integer"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := base()
			env[tc.varName] = tc.value
			_, err := starcomm.ConfigFromLookup(lookup(env))
			var ic *starcomm.InvalidConfigurationError
			require.ErrorAs(t, err, &ic)
			assert.Equal(t, tc.varName, ic.Var)
			assert.Equal(t, tc.value, ic.Value)
			assert.Contains(t, err.Error(), tc.varName)
			assert.Contains(t, err.Error(), tc.value)
			assert.Contains(t, ic.Allowed, tc.allowed)
		})
	}
	// Several bad values are all reported.
	env := base()
	env["COBRE_TCP_PORT"], env["COBRE_TCP_TIMEOUT_SECS"] = "0", "x"
	_, err := starcomm.ConfigFromLookup(lookup(env))
	assert.ErrorContains(t, err, "COBRE_TCP_PORT")
	assert.ErrorContains(t, err, "COBRE_TCP_TIMEOUT_SECS")
}

// TestConfigSizeBounds: COBRE_TCP_SIZE is refused at parse time above
// what its backend supports (star.MaxSize for tcp, shm.MaxSize for shm),
// the message naming the bound and the backend; the bound itself passes,
// and star.New and shm.New would refuse one more.
func TestConfigSizeBounds(t *testing.T) {
	for _, tc := range []struct {
		backend string
		env     map[string]string
		most    int
	}{
		{"tcp", map[string]string{"COBRE_TCP_COORDINATOR": "h", "COBRE_TCP_RANK": "1"}, star.MaxSize},
		{"shm", map[string]string{"COBRE_SHM_NAME": "seg", "COBRE_TCP_RANK": "1"}, shm.MaxSize},
	} {
		t.Run(tc.backend, func(t *testing.T) {
			tc.env["COBRE_TCP_SIZE"] = strconv.Itoa(tc.most)
			cfg, err := starcomm.ConfigFromLookup(lookup(tc.env))
			require.NoError(t, err)
			assert.Equal(t, tc.most, cfg.Size)
			over := strconv.Itoa(tc.most + 1)
			tc.env["COBRE_TCP_SIZE"] = over
			_, err = starcomm.ConfigFromLookup(lookup(tc.env))
			var ic *starcomm.InvalidConfigurationError
			require.ErrorAs(t, err, &ic)
			assert.Equal(t, "COBRE_TCP_SIZE", ic.Var)
			assert.Equal(t, over, ic.Value)
			assert.Equal(t, fmt.Sprintf("must be at most %d with the %s backend", tc.most, tc.backend), ic.Allowed)
		})
	}
}

// TestConfigDurationBounds: every duration variable is refused, at parse
// time, outside the range its row states, with an
// *InvalidConfigurationError naming the variable, the value as given and
// the range: a liveness timeout so short that the heartbeat ticker panics
// (under 10 ns) or that becomes 0, off (under 1 ns); a collective timeout
// that becomes 0s, or that the tcp transport refuses at start-up (under
// 1 ms); a connect timeout too large for an int32 of milliseconds.
func TestConfigDurationBounds(t *testing.T) {
	tcpEnv := map[string]string{"COBRE_TCP_COORDINATOR": "h", "COBRE_TCP_RANK": "1", "COBRE_TCP_SIZE": "4"}
	shmEnv := map[string]string{"COBRE_SHM_NAME": "seg", "COBRE_TCP_RANK": "1", "COBRE_TCP_SIZE": "4"}
	const (
		timeoutRange  = "must be a number of seconds in 0.001..31536000 (1 ms to a year)"
		livenessRange = "must be 0 (off) or a number of seconds in 0.01..31536000 (10 ms to a year)"
		connectRange  = "must be a whole number of milliseconds in 1..2147483647"
	)
	refused := []struct {
		base        map[string]string
		name, value string
		allowed     string
	}{
		{tcpEnv, "COBRE_TCP_LIVENESS_SECS", "1e-9", livenessRange},
		{tcpEnv, "COBRE_TCP_LIVENESS_SECS", "1e-12", livenessRange},
		{tcpEnv, "COBRE_TCP_LIVENESS_SECS", "0.009", livenessRange},
		{tcpEnv, "COBRE_TCP_LIVENESS_SECS", "-1", livenessRange},
		{tcpEnv, "COBRE_TCP_LIVENESS_SECS", "31536001", livenessRange},
		{tcpEnv, "COBRE_TCP_LIVENESS_SECS", "soon", "not a number; " + livenessRange},
		{tcpEnv, "COBRE_TCP_TIMEOUT_SECS", "1e-12", timeoutRange},
		{tcpEnv, "COBRE_TCP_TIMEOUT_SECS", "1e-6", timeoutRange},
		{tcpEnv, "COBRE_TCP_TIMEOUT_SECS", "0.0009", timeoutRange},
		{tcpEnv, "COBRE_TCP_TIMEOUT_SECS", "1e-400", timeoutRange},
		{tcpEnv, "COBRE_TCP_TIMEOUT_SECS", "31536000.5", timeoutRange},
		{tcpEnv, "COBRE_TCP_TIMEOUT_SECS", "1e400", timeoutRange},
		{tcpEnv, "COBRE_TCP_TIMEOUT_SECS", "+Inf", timeoutRange},
		{tcpEnv, "COBRE_TCP_TIMEOUT_SECS", "NaN", "not a number; " + timeoutRange},
		{shmEnv, "COBRE_SHM_TIMEOUT_SECS", "1e-12", timeoutRange},
		{shmEnv, "COBRE_SHM_TIMEOUT_SECS", "0.0005", timeoutRange},
		{shmEnv, "COBRE_SHM_TIMEOUT_SECS", "0", timeoutRange},
		{shmEnv, "COBRE_SHM_TIMEOUT_SECS", "4e7", timeoutRange},
		{tcpEnv, "COBRE_TCP_CONNECT_TIMEOUT_MS", "9223372036854775807", connectRange},
		{tcpEnv, "COBRE_TCP_CONNECT_TIMEOUT_MS", "99999999999999999999", connectRange},
		{tcpEnv, "COBRE_TCP_CONNECT_TIMEOUT_MS", "2147483648", connectRange},
		{tcpEnv, "COBRE_TCP_CONNECT_TIMEOUT_MS", "-1", connectRange},
		{tcpEnv, "COBRE_TCP_CONNECT_TIMEOUT_MS", "0.5", "not an integer; " + connectRange},
		{shmEnv, "COBRE_TCP_CONNECT_TIMEOUT_MS", "-5", connectRange},
	}
	for _, tc := range refused {
		t.Run("refused/"+tc.name+"="+tc.value, func(t *testing.T) {
			env := maps.Clone(tc.base)
			env[tc.name] = tc.value
			_, err := starcomm.ConfigFromLookup(lookup(env))
			var ic *starcomm.InvalidConfigurationError
			require.ErrorAs(t, err, &ic)
			assert.EqualError(t, err, fmt.Sprintf("starcomm: invalid %s=%q: %s", tc.name, tc.value, tc.allowed))
		})
	}
	accepted := []struct {
		base        map[string]string
		name, value string
		field       func(starcomm.Config) time.Duration
		want        time.Duration
	}{
		{tcpEnv, "COBRE_TCP_LIVENESS_SECS", "0.01", func(c starcomm.Config) time.Duration { return c.Liveness }, 10 * time.Millisecond},
		{tcpEnv, "COBRE_TCP_LIVENESS_SECS", "0", func(c starcomm.Config) time.Duration { return c.Liveness }, 0},
		{tcpEnv, "COBRE_TCP_LIVENESS_SECS", "0.0", func(c starcomm.Config) time.Duration { return c.Liveness }, 0},
		{tcpEnv, "COBRE_TCP_LIVENESS_SECS", "31536000", func(c starcomm.Config) time.Duration { return c.Liveness }, 365 * 24 * time.Hour},
		{tcpEnv, "COBRE_TCP_TIMEOUT_SECS", "0.001", func(c starcomm.Config) time.Duration { return c.Timeout }, time.Millisecond},
		{tcpEnv, "COBRE_TCP_TIMEOUT_SECS", "1e-3", func(c starcomm.Config) time.Duration { return c.Timeout }, time.Millisecond},
		{tcpEnv, "COBRE_TCP_TIMEOUT_SECS", "0.0015", func(c starcomm.Config) time.Duration { return c.Timeout }, 1500 * time.Microsecond},
		{tcpEnv, "COBRE_TCP_TIMEOUT_SECS", "31536000", func(c starcomm.Config) time.Duration { return c.Timeout }, 365 * 24 * time.Hour},
		{shmEnv, "COBRE_SHM_TIMEOUT_SECS", "0.001", func(c starcomm.Config) time.Duration { return c.ShmTimeout }, time.Millisecond},
		{tcpEnv, "COBRE_TCP_CONNECT_TIMEOUT_MS", "1", func(c starcomm.Config) time.Duration { return c.ConnectTimeout }, time.Millisecond},
		{tcpEnv, "COBRE_TCP_CONNECT_TIMEOUT_MS", "2147483647", func(c starcomm.Config) time.Duration { return c.ConnectTimeout }, 2147483647 * time.Millisecond},
	}
	for _, tc := range accepted {
		t.Run("accepted/"+tc.name+"="+tc.value, func(t *testing.T) {
			env := maps.Clone(tc.base)
			env[tc.name] = tc.value
			cfg, err := starcomm.ConfigFromLookup(lookup(env))
			require.NoError(t, err)
			assert.Equal(t, tc.want, tc.field(cfg))
			require.NoError(t, cfg.Validate())
		})
	}
}

// TestConfigLeastTimeoutStarts: the least collective timeout the parser
// accepts is one the tcp transport accepts too: New starts with it (a
// size-1 tcp communicator, which validates the transport's configuration
// and opens no socket), and the tcp transport refuses anything shorter,
// which the parser therefore refuses.
func TestConfigLeastTimeoutStarts(t *testing.T) {
	cfg, err := starcomm.ConfigFromLookup(lookup(map[string]string{"COBRE_COMM_BACKEND": "tcp", "COBRE_TCP_RANK": "0", "COBRE_TCP_SIZE": "1",
		"COBRE_TCP_TIMEOUT_SECS": "0.001", "COBRE_TCP_CONNECT_TIMEOUT_MS": "1", "COBRE_TCP_LIVENESS_SECS": "0.01"}))
	require.NoError(t, err)
	c, err := starcomm.New(context.Background(), cfg)
	require.NoError(t, err)
	require.NoError(t, c.Close())
	tc := tcp.DefaultConfig()
	tc.Timeout = cfg.Timeout - 1
	assert.Error(t, tc.Validate(), "the tcp transport's least Timeout is no longer 1 ms: change minTimeout")
}

func TestBackendSelection(t *testing.T) {
	ctx := context.Background()
	pick := func(env map[string]string) (comm.Communicator, error) {
		cfg, err := starcomm.ConfigFromLookup(lookup(env))
		if err != nil {
			return nil, err
		}
		return starcomm.New(ctx, cfg)
	}
	t.Run("auto with nothing is local", func(t *testing.T) {
		c, err := pick(map[string]string{})
		require.NoError(t, err)
		assert.IsType(t, &comm.Local{}, c)
		assert.Equal(t, 1, c.Size())
	})
	t.Run("explicit local ignores tcp variables", func(t *testing.T) {
		c, err := pick(map[string]string{"COBRE_COMM_BACKEND": "local", "COBRE_TCP_COORDINATOR": "h"})
		require.NoError(t, err)
		assert.IsType(t, &comm.Local{}, c)
	})
	t.Run("auto with a coordinator is tcp", func(t *testing.T) {
		_, err := pick(map[string]string{"COBRE_TCP_COORDINATOR": "h"})
		var m *comm.MissingConfigurationError
		require.ErrorAs(t, err, &m, "tcp was selected, so its variables are required")
		assert.Equal(t, "tcp", m.Backend)
	})
	t.Run("tcp of size 1 opens no socket", func(t *testing.T) {
		c, err := pick(map[string]string{"COBRE_COMM_BACKEND": "tcp", "COBRE_TCP_RANK": "0", "COBRE_TCP_SIZE": "1", "COBRE_TCP_PORT": "1"})
		require.NoError(t, err)
		require.NoError(t, c.Barrier(ctx))
		require.NoError(t, c.Close())
	})
	t.Run("auto with a shm name is shm, which needs the rank and size", func(t *testing.T) {
		_, err := pick(map[string]string{"COBRE_SHM_NAME": "seg"})
		var m *comm.MissingConfigurationError
		require.ErrorAs(t, err, &m)
		assert.Equal(t, "shm", m.Backend)
		assert.Equal(t, []string{"COBRE_TCP_RANK", "COBRE_TCP_SIZE"}, m.MissingVars)
	})
	t.Run("auto with a shm name, rank and size is a shm communicator", func(t *testing.T) {
		c, err := pick(map[string]string{"COBRE_SHM_NAME": testkit.ShmName(t), "COBRE_TCP_RANK": "0", "COBRE_TCP_SIZE": "1"})
		if runtime.GOOS != "linux" {
			var na *comm.BackendNotAvailableError
			require.ErrorAs(t, err, &na)
			assert.Equal(t, "shm", na.Backend)
			return
		}
		require.NoError(t, err)
		assert.IsType(t, &shm.Comm{}, c)
		assert.Equal(t, shm.KindPOSIX, starcomm.SharedMemory(c).Kind())
		require.NoError(t, c.Barrier(ctx))
		require.NoError(t, c.Close())
	})
	t.Run("unknown backend lists the known ones", func(t *testing.T) {
		_, err := pick(map[string]string{"COBRE_COMM_BACKEND": "mpi"})
		var ib *comm.InvalidBackendError
		require.ErrorAs(t, err, &ib)
		assert.Equal(t, "mpi", ib.Name)
		assert.Equal(t, []string{"auto", "tcp", "shm", "local"}, ib.Available)
		assert.ErrorContains(t, err, "auto, tcp, shm, local")
		assert.Equal(t, "COBRE_COMM_BACKEND", ib.Var)
		assert.ErrorContains(t, err, `unknown backend "mpi" in COBRE_COMM_BACKEND`)

		cfg := starcomm.DefaultConfig()
		cfg.Backend = "mpi"
		err = cfg.Validate()
		require.ErrorAs(t, err, &ib)
		assert.Equal(t, "Backend", ib.Var, "Config.Validate names the field")
	})
	t.Run("Go config validation names the field", func(t *testing.T) {
		cfg := starcomm.DefaultConfig()
		cfg.Backend, cfg.Size, cfg.Rank = "tcp", 2, 1
		_, err := starcomm.New(ctx, cfg)
		var ic *starcomm.InvalidConfigurationError
		require.ErrorAs(t, err, &ic)
		assert.Equal(t, "Coordinator", ic.Var)
	})
	t.Run("unreachable coordinator is InitializationFailed", func(t *testing.T) {
		cfg := starcomm.DefaultConfig()
		cfg.Backend, cfg.Size, cfg.Rank, cfg.Coordinator, cfg.Port = "tcp", 2, 1, "127.0.0.1", freePort(t)
		cfg.ConnectTimeout = 300 * time.Millisecond
		_, err := starcomm.New(ctx, cfg)
		var ife *comm.InitializationFailedError
		require.ErrorAs(t, err, &ife)
		assert.Equal(t, "tcp", ife.Backend)
		assert.True(t, errors.Is(err, context.DeadlineExceeded) || errors.Is(err, errDeadline()), "%v", err)
	})
}

// parseEnviron parses env ("NAME=value" entries) with ConfigFromEnviron
// and, when env names no unknown variable, checks that ConfigFromLookup
// agrees.
func parseEnviron(t *testing.T, env ...string) (starcomm.Config, error) {
	t.Helper()
	cfg, err := starcomm.ConfigFromEnviron(env)
	var unknown *starcomm.UnknownVariableError
	if !errors.As(err, &unknown) {
		m := map[string]string{}
		for _, kv := range env {
			k, v, _ := strings.Cut(kv, "=")
			m[k] = v
		}
		cfg2, err2 := starcomm.ConfigFromLookup(lookup(m))
		assert.Equal(t, fmt.Sprint(err), fmt.Sprint(err2), "ConfigFromLookup disagrees")
		cfg.Listening, cfg2.Listening = nil, nil
		assert.Equal(t, cfg, cfg2, "ConfigFromLookup disagrees")
	}
	return cfg, err
}

// envCase names a subtest after its environment: NAME=value,NAME=value.
func envCase(env []string) string {
	if len(env) == 0 {
		return "empty"
	}
	return strings.Join(env, ",")
}

// allErrors flattens errors.Join trees.
func allErrors(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, allErrors(e)...)
		}
		return out
	}
	if err == nil {
		return nil
	}
	return []error{err}
}

// TestConfigBackendRules: a size above 1 (or a rank above 0) is never run
// as one rank; auto still picks tcp for a coordinator, shm for a segment
// name, else local; local is single-rank.
func TestConfigBackendRules(t *testing.T) {
	cases := []struct {
		env     []string
		backend string   // the backend selected, when there is no error
		missing []string // the MissingConfigurationError's variables
		// missingBackend is the MissingConfigurationError's backend
		// ("" means tcp).
		missingBackend string
		invalid        string // the InvalidConfigurationError's variable
		msg            string // the whole error message, when given
	}{
		// auto, more than one rank, no coordinator
		{env: []string{"COBRE_TCP_SIZE=4", "COBRE_TCP_RANK=0"}, backend: "tcp"},
		{env: []string{"COBRE_TCP_SIZE=4", "COBRE_TCP_RANK=2"}, missing: []string{"COBRE_TCP_COORDINATOR"},
			msg: "comm: tcp backend: missing required configuration: COBRE_TCP_COORDINATOR"},
		{env: []string{"COBRE_TCP_SIZE=4"}, missing: []string{"COBRE_TCP_COORDINATOR", "COBRE_TCP_RANK"}},
		{env: []string{"COBRE_TCP_RANK=2"}, missing: []string{"COBRE_TCP_COORDINATOR", "COBRE_TCP_SIZE"}},
		{env: []string{"COBRE_COMM_BACKEND=auto", "COBRE_TCP_SIZE=4", "COBRE_TCP_RANK=3"}, missing: []string{"COBRE_TCP_COORDINATOR"}},
		{env: []string{"COBRE_TCP_SIZE=4", "COBRE_TCP_RANK=4"}, invalid: "COBRE_TCP_RANK",
			msg: `starcomm: invalid COBRE_TCP_RANK="4": must be < COBRE_TCP_SIZE (4): ranks are 0..3`},
		{env: []string{"COBRE_TCP_SIZE=1", "COBRE_TCP_RANK=1"}, invalid: "COBRE_TCP_RANK"},
		{env: []string{"COBRE_TCP_SIZE=4", "COBRE_TCP_RANK=one"}, invalid: "COBRE_TCP_RANK"},
		{env: []string{"COBRE_TCP_SIZE=four", "COBRE_TCP_RANK=0"}, invalid: "COBRE_TCP_SIZE",
			msg: `starcomm: invalid COBRE_TCP_SIZE="four": not an integer; must be an integer >= 1 (at most 1048576 with the tcp backend, 32768 with shm)`},
		{env: []string{"COBRE_TCP_SIZE=2147483648", "COBRE_TCP_RANK=0"}, invalid: "COBRE_TCP_SIZE",
			msg: `starcomm: invalid COBRE_TCP_SIZE="2147483648": must be an integer >= 1 (at most 1048576 with the tcp backend, 32768 with shm)`},
		{env: []string{"COBRE_TCP_SIZE=0"}, invalid: "COBRE_TCP_SIZE"},
		// The collective check needs the control session.
		{env: []string{"COBRE_TCP_SIZE=2", "COBRE_TCP_RANK=0", "COBRE_DEBUG=detail", "COBRE_TCP_LIVENESS_SECS=0"}, invalid: "COBRE_DEBUG",
			msg: `starcomm: invalid COBRE_DEBUG="detail": detail needs the control session, which COBRE_TCP_LIVENESS_SECS=0 turns off: set COBRE_TCP_LIVENESS_SECS above 0, or COBRE_DEBUG to off`},
		{env: []string{"COBRE_TCP_SIZE=2", "COBRE_TCP_RANK=0", "COBRE_DEBUG=detail", "COBRE_TCP_LIVENESS_SECS=0.5"}, backend: "tcp"},
		{env: []string{"COBRE_TCP_SIZE=2", "COBRE_TCP_RANK=0", "COBRE_DEBUG=off", "COBRE_TCP_LIVENESS_SECS=0"}, backend: "tcp"},
		{env: []string{"COBRE_TCP_SIZE=4", "COBRE_TCP_RANK=0", "COBRE_TCP_PORT=0"}, invalid: "COBRE_TCP_PORT"},
		// auto, what was already so
		{env: nil, backend: "local"},
		{env: []string{"COBRE_TCP_SIZE=1"}, backend: "local"},
		{env: []string{"COBRE_TCP_SIZE=1", "COBRE_TCP_RANK=0"}, backend: "local"},
		{env: []string{"COBRE_TCP_RANK=0"}, invalid: "COBRE_TCP_RANK", msg: `starcomm: invalid COBRE_TCP_RANK="0": is set without COBRE_TCP_SIZE: give the job's size on every rank (COBRE_TCP_SIZE=1 runs this rank alone)`},
		{env: []string{"COBRE_TCP_PORT=http"}, backend: "local"}, // local does not read the port
		{env: []string{"COBRE_TCP_COORDINATOR=h", "COBRE_TCP_SIZE=4", "COBRE_TCP_RANK=2"}, backend: "tcp"},
		{env: []string{"COBRE_TCP_COORDINATOR=h", "COBRE_TCP_SIZE=1", "COBRE_TCP_RANK=0"}, backend: "tcp"},
		{env: []string{"COBRE_SHM_NAME=seg"}, missing: []string{"COBRE_TCP_RANK", "COBRE_TCP_SIZE"}, missingBackend: "shm",
			msg: "comm: shm backend: missing required configuration: COBRE_TCP_RANK, COBRE_TCP_SIZE"},
		{env: []string{"COBRE_SHM_NAME=seg", "COBRE_TCP_SIZE=4", "COBRE_TCP_RANK=2"}, backend: "shm"},
		{env: []string{"COBRE_SHM_NAME=seg", "COBRE_TCP_SIZE=4", "COBRE_TCP_RANK=4"}, invalid: "COBRE_TCP_RANK"},
		{env: []string{"COBRE_SHM_NAME=a/b", "COBRE_TCP_SIZE=4", "COBRE_TCP_RANK=0"}, invalid: "COBRE_SHM_NAME",
			msg: `starcomm: invalid COBRE_SHM_NAME="a/b": must hold only letters, digits, '-' and '_' (found '/')`},
		{env: []string{"COBRE_SHM_NAME=seg", "COBRE_TCP_SIZE=4", "COBRE_TCP_RANK=0", "COBRE_SHM_TIMEOUT_SECS=0"}, invalid: "COBRE_SHM_TIMEOUT_SECS"},
		{env: []string{"COBRE_SHM_NAME=seg", "COBRE_TCP_SIZE=4", "COBRE_TCP_RANK=0", "COBRE_TCP_PORT=x", "COBRE_TCP_TIMEOUT_SECS=x"}, backend: "shm"}, // shm reads neither
		{env: []string{"COBRE_SHM_NAME=seg", "COBRE_TCP_SIZE=4", "COBRE_TCP_RANK=0", "COBRE_TCP_CONNECT_TIMEOUT_MS=0"}, invalid: "COBRE_TCP_CONNECT_TIMEOUT_MS"},
		// explicit backends
		{env: []string{"COBRE_COMM_BACKEND=tcp", "COBRE_TCP_SIZE=4", "COBRE_TCP_RANK=0"}, backend: "tcp"},
		{env: []string{"COBRE_COMM_BACKEND=local", "COBRE_TCP_SIZE=4"}, invalid: "COBRE_TCP_SIZE",
			msg: `starcomm: invalid COBRE_TCP_SIZE="4": the local backend is single-rank: must be 1 (COBRE_COMM_BACKEND=tcp runs several ranks)`},
		{env: []string{"COBRE_COMM_BACKEND=local", "COBRE_TCP_SIZE=4", "COBRE_TCP_RANK=0", "COBRE_TCP_COORDINATOR=h"}, invalid: "COBRE_TCP_SIZE"},
		{env: []string{"COBRE_COMM_BACKEND=local", "COBRE_TCP_RANK=2"}, invalid: "COBRE_TCP_RANK",
			msg: `starcomm: invalid COBRE_TCP_RANK="2": the local backend is single-rank: must be 0`},
		{env: []string{"COBRE_COMM_BACKEND=local", "COBRE_TCP_SIZE=x"}, invalid: "COBRE_TCP_SIZE"},
		{env: []string{"COBRE_COMM_BACKEND=local", "COBRE_TCP_SIZE=1", "COBRE_TCP_RANK=0"}, backend: "local"},
		{env: []string{"COBRE_COMM_BACKEND=local", "COBRE_TCP_COORDINATOR=h", "COBRE_TCP_PORT=x"}, backend: "local"},
		{env: []string{"COBRE_COMM_BACKEND=shm", "COBRE_SHM_NAME=seg", "COBRE_TCP_RANK=0", "COBRE_TCP_SIZE=x"}, invalid: "COBRE_TCP_SIZE"},
		{env: []string{"COBRE_COMM_BACKEND=shm", "COBRE_TCP_RANK=0", "COBRE_TCP_SIZE=2"}, missing: []string{"COBRE_SHM_NAME"}, missingBackend: "shm"},
		{env: []string{"COBRE_COMM_BACKEND=shm", "COBRE_SHM_NAME=seg", "COBRE_TCP_RANK=1", "COBRE_TCP_SIZE=2", "COBRE_TCP_COORDINATOR=h"}, backend: "shm"},
	}
	for _, tc := range cases {
		t.Run(envCase(tc.env), func(t *testing.T) {
			cfg, err := parseEnviron(t, tc.env...)
			if tc.backend != "" {
				require.NoError(t, err)
				assert.Equal(t, tc.backend, starcomm.Resolve(cfg))
				assert.NoError(t, cfg.Validate(), "Validate agrees with the environment's rules")
				return
			}
			require.Error(t, err)
			if tc.msg != "" {
				assert.EqualError(t, err, tc.msg)
			}
			var m *comm.MissingConfigurationError
			if tc.missing != nil {
				require.ErrorAs(t, err, &m)
				want := tc.missingBackend
				if want == "" {
					want = "tcp"
				}
				assert.Equal(t, want, m.Backend)
				assert.Equal(t, tc.missing, m.MissingVars)
			} else {
				assert.False(t, errors.As(err, &m), "unexpected %v", m)
			}
			var ic *starcomm.InvalidConfigurationError
			if tc.invalid != "" {
				require.ErrorAs(t, err, &ic)
				assert.Equal(t, tc.invalid, ic.Var)
				assert.Len(t, allErrors(err), 1, "one error only: %v", err)
			} else {
				assert.False(t, errors.As(err, &ic), "unexpected %v", ic)
			}
		})
	}
}

// TestConfigValidateRules: Validate applies the environment's rules to a
// Config built in Go, naming the fields.
func TestConfigValidateRules(t *testing.T) {
	def := starcomm.DefaultConfig
	with := func(f func(*starcomm.Config)) starcomm.Config { c := def(); f(&c); return c }
	cases := []struct {
		name    string
		cfg     starcomm.Config
		backend string   // the backend selected
		invalid []string // the fields named, in order; none: valid
		msg     string
	}{
		{"Size=4,Rank=0", with(func(c *starcomm.Config) { c.Size = 4 }), "tcp", nil, ""},
		{"Size=4,Rank=2", with(func(c *starcomm.Config) { c.Size, c.Rank = 4, 2 }), "tcp", []string{"Coordinator"},
			`starcomm: invalid Coordinator="": workers (rank > 0) need the coordinator's host`},
		{"Size=4,Rank=2,Coordinator=h", with(func(c *starcomm.Config) { c.Size, c.Rank, c.Coordinator = 4, 2, "h" }), "tcp", nil, ""},
		{"Size=1,Rank=1", with(func(c *starcomm.Config) { c.Rank = 1 }), "tcp", []string{"Rank"},
			`starcomm: invalid Rank="1": must be < Size (1): ranks are 0..0`},
		{"Size=4,Rank=0,ShmName=seg", with(func(c *starcomm.Config) { c.Size, c.ShmName = 4, "seg" }), "shm", nil, ""},
		{"Size=4,Rank=4,ShmName=seg", with(func(c *starcomm.Config) { c.Size, c.Rank, c.ShmName = 4, 4, "seg" }), "shm", []string{"Rank"}, ""},
		{"Backend=shm,Size=2", with(func(c *starcomm.Config) { c.Backend, c.Size = "shm", 2 }), "shm", []string{"ShmName"},
			`starcomm: invalid ShmName="": required by the shm backend: the segment's name`},
		{"ShmName=a.b,ShmTimeout=0", with(func(c *starcomm.Config) { c.ShmName, c.ShmTimeout = "a.b", 0 }), "shm", []string{"ShmName", "ShmTimeout"}, ""},
		{"default", def(), "local", nil, ""},
		{"zero", starcomm.Config{}, "local", nil, ""},
		{"Backend=local,Size=4", with(func(c *starcomm.Config) { c.Backend, c.Size = "local", 4 }), "local", []string{"Size"},
			`starcomm: invalid Size="4": the local backend is single-rank: must be 1 (Backend=tcp runs several ranks)`},
		{"Backend=local,Rank=1", with(func(c *starcomm.Config) { c.Backend, c.Rank = "local", 1 }), "local", []string{"Rank"}, ""},
		{"Backend=local,Port=-1", with(func(c *starcomm.Config) { c.Backend, c.Port = "local", -1 }), "local", nil, ""},
		{"Backend=tcp,Size=0", with(func(c *starcomm.Config) { c.Backend, c.Size = "tcp", 0 }), "tcp", []string{"Size"}, ""},
		{"Backend=shm,Size=0", with(func(c *starcomm.Config) { c.Backend, c.Size, c.ShmName = "shm", 0, "seg" }), "shm", []string{"Size"},
			`starcomm: invalid Size="0": must be at least 1`},
		{"Backend=tcp,Rank=-1", with(func(c *starcomm.Config) { c.Backend, c.Rank = "tcp", -1 }), "tcp", []string{"Rank"}, ""},
		{"Backend=tcp,Size=2,Rank=1,Port=0", with(func(c *starcomm.Config) { c.Backend, c.Size, c.Rank, c.Coordinator, c.Port = "tcp", 2, 1, "h", 0 }), "tcp", []string{"Port"}, ""},
		{"Backend=tcp,Port=0", with(func(c *starcomm.Config) { c.Backend, c.Port = "tcp", 0 }), "tcp", nil, ""},
		{"Size=2,Debug=detail,Liveness=0", with(func(c *starcomm.Config) { c.Size, c.Debug, c.Liveness = 2, "detail", 0 }), "tcp", []string{"Debug"},
			`starcomm: invalid Debug="detail": detail needs the control session, which Liveness=0 turns off: set Liveness above 0, or Debug to off`},
		{"Backend=tcp,Port=-1,Timeout=0,ConnectTimeout=-1s,Spin=-1ns", with(func(c *starcomm.Config) {
			c.Backend, c.Port, c.Timeout, c.ConnectTimeout, c.Spin = "tcp", -1, 0, -time.Second, -1
		}), "tcp", []string{"Port", "Timeout", "ConnectTimeout", "Spin"}, ""},
		{"Backend=tcp,Spin=0", with(func(c *starcomm.Config) { c.Backend, c.Spin = "tcp", 0 }), "tcp", nil, ""},
		{"Backend=tcp,SpinMax=-1", with(func(c *starcomm.Config) { c.Backend, c.SpinMax = "tcp", -1 }), "tcp", []string{"SpinMax"}, ""},
		{"Backend=tcp,SpinMax=0", with(func(c *starcomm.Config) { c.Backend, c.SpinMax = "tcp", 0 }), "tcp", nil, ""},
		{"Backend=tcp,BufferBytes=-1", with(func(c *starcomm.Config) { c.Backend, c.BufferBytes = "tcp", -1 }), "tcp", []string{"BufferBytes"},
			`starcomm: invalid BufferBytes="-1": must be 0 (the system's default) or a number of bytes up to 2147483647`},
		{"Backend=tcp,BufferBytes=0", with(func(c *starcomm.Config) { c.Backend, c.BufferBytes = "tcp", 0 }), "tcp", nil, ""},
		{"Backend=shm,BufferBytes=-1", with(func(c *starcomm.Config) { c.Backend, c.BufferBytes, c.ShmName = "shm", -1, "seg" }), "shm", nil, ""},
		{"Backend=tcp,Timeout=999us", with(func(c *starcomm.Config) { c.Backend, c.Timeout = "tcp", 999*time.Microsecond }), "tcp", []string{"Timeout"},
			`starcomm: invalid Timeout="999µs": must be at least 1ms`},
		{"Backend=tcp,Timeout=1ms", with(func(c *starcomm.Config) { c.Backend, c.Timeout = "tcp", time.Millisecond }), "tcp", nil, ""},
		{"Backend=tcp,Liveness=9ns", with(func(c *starcomm.Config) { c.Backend, c.Liveness = "tcp", 9 }), "tcp", []string{"Liveness"},
			`starcomm: invalid Liveness="9ns": must be 0 (off) or at least 10ms`},
		{"Backend=tcp,Liveness=-1s", with(func(c *starcomm.Config) { c.Backend, c.Liveness = "tcp", -time.Second }), "tcp", []string{"Liveness"}, ""},
		{"Backend=tcp,Liveness=0", with(func(c *starcomm.Config) { c.Backend, c.Liveness = "tcp", 0 }), "tcp", nil, ""},
		{"Backend=tcp,Liveness=10ms", with(func(c *starcomm.Config) { c.Backend, c.Liveness = "tcp", 10*time.Millisecond }), "tcp", nil, ""},
		{"ShmName=seg,ShmTimeout=1ns", with(func(c *starcomm.Config) { c.ShmName, c.ShmTimeout = "seg", 1 }), "shm", []string{"ShmTimeout"},
			`starcomm: invalid ShmTimeout="1ns": must be at least 1ms`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.backend, starcomm.Resolve(tc.cfg))
			err := tc.cfg.Validate()
			if tc.invalid == nil {
				require.NoError(t, err)
				return
			}
			var got []string
			for _, e := range allErrors(err) {
				var ic *starcomm.InvalidConfigurationError
				require.ErrorAs(t, e, &ic)
				got = append(got, ic.Var)
			}
			assert.Equal(t, tc.invalid, got, "%v", err)
			if tc.msg != "" {
				assert.EqualError(t, err, tc.msg)
			}
		})
	}
	t.Run("Backend=mpi", func(t *testing.T) {
		var ib *comm.InvalidBackendError
		require.ErrorAs(t, with(func(c *starcomm.Config) { c.Backend = "mpi" }).Validate(), &ib)
	})
}

// TestConfigUnknownVariables: a COBRE_* variable starcomm does not know is
// an error naming it and the closest known name, whatever the backend.
func TestConfigUnknownVariables(t *testing.T) {
	worker := []string{"COBRE_TCP_RANK=2", "COBRE_TCP_SIZE=4"}
	cases := []struct {
		env        []string
		unknown    string // the unknown variable
		suggestion string
		msg        string // the whole error message
		missing    bool   // a MissingConfigurationError comes too
	}{
		{env: append([]string{"COBRE_TCP_CORDINATOR=node0"}, worker...), unknown: "COBRE_TCP_CORDINATOR", suggestion: "COBRE_TCP_COORDINATOR", missing: true,
			msg: "starcomm: unknown variable COBRE_TCP_CORDINATOR: did you mean COBRE_TCP_COORDINATOR?\n" +
				"comm: tcp backend: missing required configuration: COBRE_TCP_COORDINATOR"},
		{env: []string{"COBRE_TCP_TIMEOUT_SEC=5"}, unknown: "COBRE_TCP_TIMEOUT_SEC", suggestion: "COBRE_TCP_TIMEOUT_SECS",
			msg: "starcomm: unknown variable COBRE_TCP_TIMEOUT_SEC: did you mean COBRE_TCP_TIMEOUT_SECS?"},
		{env: []string{"COBRE_COMM_BACKED=tcp", "COBRE_TCP_RANK=0", "COBRE_TCP_SIZE=4"}, unknown: "COBRE_COMM_BACKED", suggestion: "COBRE_COMM_BACKEND",
			msg: "starcomm: unknown variable COBRE_COMM_BACKED: did you mean COBRE_COMM_BACKEND?"},
		{env: []string{"COBRE_COMM_BACKEND=local", "COBRE_TCP_SPIN_MS=5"}, unknown: "COBRE_TCP_SPIN_MS", suggestion: "COBRE_TCP_SPIN_US"},
		{env: []string{"COBRE_ERRORFILE=/tmp/e"}, unknown: "COBRE_ERRORFILE", suggestion: "COBRE_ERROR_FILE"},
		{env: []string{"COBRE_RANK=1"}, unknown: "COBRE_RANK", suggestion: "COBRE_TCP_RANK"},
		{env: []string{"cobre_tcp_size=4"}, unknown: "cobre_tcp_size", suggestion: "COBRE_TCP_SIZE",
			msg: "starcomm: unknown variable cobre_tcp_size: did you mean COBRE_TCP_SIZE?"},
		{env: []string{"COBRE_XYZZY_PLUGH=1"}, unknown: "COBRE_XYZZY_PLUGH",
			msg: "starcomm: unknown variable COBRE_XYZZY_PLUGH: not a starcomm variable (known: COBRE_COMM_BACKEND, COBRE_TCP_COORDINATOR, COBRE_TCP_PORT, " +
				"COBRE_TCP_RANK, COBRE_TCP_SIZE, COBRE_TCP_TIMEOUT_SECS, COBRE_TCP_BIND_ADDR, COBRE_TCP_CONNECT_TIMEOUT_MS, COBRE_SHM_NAME, COBRE_SHM_TIMEOUT_SECS, COBRE_TCP_SPIN_US, COBRE_TCP_SPIN_MAX_US, COBRE_TCP_BUFFER_BYTES, COBRE_TCP_LIVENESS_SECS, COBRE_TCP_TLS_CERT, COBRE_TCP_TLS_KEY, COBRE_TCP_TLS_CA, COBRE_LOG, COBRE_DEBUG, COBRE_TCP_TOKEN, COBRE_TCP_TOKEN_FILE, COBRE_ERROR_FILE)"},
		{env: []string{"COBRE_SHM_NAME=seg", "COBRE_TCP_RANK=0", "COBRE_TCP_SIZE=2", "COBRE_VERBOSE=1"}, unknown: "COBRE_VERBOSE"},
		{env: []string{"COBRE_SHM_TIMEOUT=5"}, unknown: "COBRE_SHM_TIMEOUT", suggestion: "COBRE_SHM_TIMEOUT_SECS"},
	}
	for _, tc := range cases {
		t.Run(envCase(tc.env), func(t *testing.T) {
			_, err := starcomm.ConfigFromEnviron(tc.env)
			var u *starcomm.UnknownVariableError
			require.ErrorAs(t, err, &u)
			assert.Equal(t, tc.unknown, u.Var)
			assert.Equal(t, tc.suggestion, u.Suggestion)
			if tc.msg != "" {
				assert.EqualError(t, err, tc.msg)
			}
			var m *comm.MissingConfigurationError
			assert.Equal(t, tc.missing, errors.As(err, &m), "%v", err)
			assert.Len(t, allErrors(err), map[bool]int{false: 1, true: 2}[tc.missing])
		})
	}
	// Not unknown: blank, not COBRE_, known.
	for _, env := range [][]string{
		{"COBRE_TCP_CORDINATOR="}, {"COBRE_TCP_CORDINATOR= "}, {"COBREX=1"}, {"XCOBRE_TCP_SIZE=4"}, {"PATH=/bin", "HOME=/root"},
		{"COBRE_TCP_SIZE=1", "COBRE_ERROR_FILE=/tmp/e"}, {"=C:=C:\\"}, {"NOEQUALS"},
	} {
		t.Run(envCase(env), func(t *testing.T) {
			_, err := starcomm.ConfigFromEnviron(env)
			require.NoError(t, err)
		})
	}
}

// TestConfigServiceLinks: the variables Kubernetes sets for a Service
// whose name starts with "cobre" are unknown, and the error says where
// they come from and what to do.
func TestConfigServiceLinks(t *testing.T) {
	cases := []struct{ name, value, service string }{
		{"COBRE_SERVICE_HOST", "10.96.0.12", "cobre"},
		{"COBRE_SERVICE_PORT", "8080", "cobre"},
		{"COBRE_SERVICE_PORT_HTTP", "8080", "cobre"},
		{"COBRE_PORT", "tcp://10.96.0.12:8080", "cobre"},
		{"COBRE_PORT_8080_TCP", "tcp://10.96.0.12:8080", "cobre"},
		{"COBRE_PORT_8080_TCP_PROTO", "tcp", "cobre"},
		{"COBRE_PORT_8080_TCP_PORT", "8080", "cobre"},
		{"COBRE_PORT_53_UDP_ADDR", "10.96.0.12", "cobre"},
		{"COBRE_DB_SERVICE_HOST", "10.96.0.13", "cobre-db"},
		{"COBRE_DB_PORT", "tcp://10.96.0.13:5432", "cobre-db"},
		{"COBRE_DB_PORT_5432_SCTP_ADDR", "10.96.0.13", "cobre-db"},
		// Not a Service's: a misspelt port, a COBRE_PORT that is no URL.
		{"COBRE_PORT", "29500", ""},
		{"COBRE_TCP_PORTS", "29500", ""},
		{"COBRE_PORT_8080", "x", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name+"="+tc.value, func(t *testing.T) {
			_, err := starcomm.ConfigFromEnviron([]string{tc.name + "=" + tc.value})
			var u *starcomm.UnknownVariableError
			require.ErrorAs(t, err, &u)
			assert.Equal(t, tc.service, u.Service)
			if tc.service != "" {
				assert.Equal(t, "starcomm: unknown variable "+tc.name+`: Kubernetes sets it for the Service "`+tc.service+
					`" of the pod's namespace; set enableServiceLinks: false in the pod's spec, or give the Service a name that does not start with "cobre"`, u.Error())
				if !strings.Contains(tc.name, tc.value) {
					assert.NotContains(t, err.Error(), tc.value, "the value is not shown")
				}
			} else {
				assert.NotContains(t, u.Error(), "Kubernetes")
			}
		})
	}
}

// TestConfigUnknownVariablesAllAtOnce: every unknown variable is reported,
// sorted by name, with the other configuration errors after them.
func TestConfigUnknownVariablesAllAtOnce(t *testing.T) {
	_, err := starcomm.ConfigFromEnviron([]string{
		"COBRE_TCP_TIMEOUT_SEC=5", "PATH=/bin", "COBRE_TCP_CORDINATOR=h", "COBRE_COMM_BACKED=tcp", "COBRE_XYZZY_PLUGH=1",
		"COBRE_TCP_SIZE=4", "COBRE_TCP_RANK=2", "COBRE_TCP_PORT=0",
	})
	var got []string
	for _, e := range allErrors(err) {
		var u *starcomm.UnknownVariableError
		var m *comm.MissingConfigurationError
		var ic *starcomm.InvalidConfigurationError
		switch {
		case errors.As(e, &u):
			got = append(got, u.Var+"->"+u.Suggestion)
		case errors.As(e, &m):
			got = append(got, "missing "+strings.Join(m.MissingVars, " "))
		case errors.As(e, &ic):
			got = append(got, "invalid "+ic.Var)
		default:
			t.Errorf("unexpected error %v", e)
		}
	}
	assert.Equal(t, []string{
		"COBRE_COMM_BACKED->COBRE_COMM_BACKEND",
		"COBRE_TCP_CORDINATOR->COBRE_TCP_COORDINATOR",
		"COBRE_TCP_TIMEOUT_SEC->COBRE_TCP_TIMEOUT_SECS",
		"COBRE_XYZZY_PLUGH->",
		"missing COBRE_TCP_COORDINATOR",
		"invalid COBRE_TCP_PORT",
	}, got)
}

// TestConfigSuggestion: the closest known name when one is close, else "".
func TestConfigSuggestion(t *testing.T) {
	for name, want := range map[string]string{
		"COBRE_TCP_CORDINATOR":           "COBRE_TCP_COORDINATOR",
		"COBRE_TCP_COORDINATR":           "COBRE_TCP_COORDINATOR",
		"COBRE_TCP_COORDIANTOR":          "COBRE_TCP_COORDINATOR", // a swap is one edit
		"COBRE_TCP_TIMEOUT_SEC":          "COBRE_TCP_TIMEOUT_SECS",
		"COBRE_TCP_TIMEOUT":              "COBRE_TCP_TIMEOUT_SECS",
		"COBRE_TIMEOUT_SECS":             "COBRE_TCP_TIMEOUT_SECS",
		"COBRE_TCP_CONNECT_TIMEOUT_SECS": "COBRE_TCP_CONNECT_TIMEOUT_MS",
		"COBRE_COMM_BACKED":              "COBRE_COMM_BACKEND",
		"COBRE_BACKEND":                  "COBRE_COMM_BACKEND",
		"COBRE_TCP_RANKS":                "COBRE_TCP_RANK",
		"COBRE_SIZE":                     "COBRE_TCP_SIZE",
		"COBRE_TCP_BINDADDR":             "COBRE_TCP_BIND_ADDR",
		"COBRE_SHM_NAMES":                "COBRE_SHM_NAME",
		"COBRE_ERR_FILE":                 "COBRE_ERROR_FILE",
		"cobre_tcp_port":                 "COBRE_TCP_PORT",
		"COBRE_XYZZY_PLUGH":              "",
		"COBRE_VERBOSE":                  "",
		"COBRE_":                         "",
		"COBRE_TCP_NODELAY":              "",
		"COBRE_LOG_LEVEL":                "",
	} {
		t.Run("name="+name, func(t *testing.T) {
			assert.Equal(t, want, starcomm.SuggestVariable(name))
		})
	}
}

// clearCobreEnv blanks every COBRE_* variable of the test's environment
// for the rest of the test (a blank variable is unset for starcomm).
func clearCobreEnv(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "COBRE_") {
			t.Setenv(k, "")
		}
	}
}

// TestConfigFromEnvReadsEnviron: ConfigFromEnv sees every variable of the
// process environment, so it reports unknown ones.
func TestConfigFromEnvReadsEnviron(t *testing.T) {
	clearCobreEnv(t)
	t.Setenv("COBRE_TCP_CORDINATOR", "node0")
	t.Setenv("COBRE_TCP_SIZE", "1")
	_, err := starcomm.ConfigFromEnv()
	var u *starcomm.UnknownVariableError
	require.ErrorAs(t, err, &u)
	assert.Equal(t, "COBRE_TCP_COORDINATOR", u.Suggestion)
	_, err = starcomm.FromEnv(context.Background())
	require.ErrorAs(t, err, &u)
}

// TestConfigHosts: COBRE_TCP_COORDINATOR and COBRE_TCP_BIND_ADDR take a
// host name or IP address without a port; an IPv6 address may keep its
// brackets, which are dropped. A port, a URL, brackets around another
// thing, a ':' that does not make an IPv6 address, or anything else that
// is neither an IP address nor a well-formed host name (what a worker's
// dial refuses, rank 0 refuses too) is an
// InvalidConfigurationError naming the variable and saying what is wrong,
// both from the environment and from Validate.
func TestConfigHosts(t *testing.T) {
	ifname := anInterface(t)
	for _, tc := range []struct {
		value, want string // want: the host kept, or "" for an error
		why         string // in the error
	}{
		{"node0", "node0", ""},
		{"10.0.0.1", "10.0.0.1", ""},
		{"::1", "::1", ""},
		{"[::1]", "::1", ""},
		{"[fe80::1%" + ifname + "]", "fe80::1%" + ifname, ""},
		{"fe80::1%" + ifname, "fe80::1%" + ifname, ""},
		// A zone is an interface of this host; the system would refuse
		// any other only at connect ("invalid argument").
		{"fe80::1%nosuchif0", "", `zone "nosuchif0" names no network interface of this host (it has `},
		{"[fe80::1%nosuchif0]", "", `zone "nosuchif0" names no network interface of this host`},
		{"fe80::1%99999", "", `zone "99999" names no network interface of this host`},
		{"::", "::", ""},
		{"node0:29500", "", "without a port; the port goes in COBRE_TCP_PORT"},
		{"10.0.0.1:80", "", "without a port; the port goes in COBRE_TCP_PORT"},
		{"[::1]:29500", "", "without a port; the port goes in COBRE_TCP_PORT"},
		{"tcp://node0", "", "not a URL"},
		{"[node0]", "", "brackets must enclose an IPv6 address"},
		{"[10.0.0.1]", "", "brackets must enclose an IPv6 address"},
		{"[::1", "", "brackets must enclose an IPv6 address"},
		{"1:2:3", "", "neither a host name"},
		{"node 0", "", "white space or a slash"},
		{"node0/24", "", "white space or a slash"},
		// What a worker's dial refuses, rank 0 refuses too.
		{"node0!", "", `"node0!" is not a host name: '!' is not a letter, digit, '-' or '_'`},
		{"999.1.1.1", "", `"999.1.1.1" is not a valid IPv4 address`},
		{"-node0", "", "neither starts nor ends with '-'"},
		{"a..b", "", "each dot-separated label has 1 to 63 characters"},
		{"node0.", "node0.", ""},
		{"node_0.example", "node_0.example", ""},
	} {
		for _, v := range []struct{ env, field string }{{"COBRE_TCP_COORDINATOR", "Coordinator"}, {"COBRE_TCP_BIND_ADDR", "BindAddr"}} {
			t.Run(v.env+"="+tc.value, func(t *testing.T) {
				rank := "1"
				if v.env == "COBRE_TCP_BIND_ADDR" {
					rank = "0"
				}
				cfg, err := starcomm.ConfigFromLookup(lookup(map[string]string{"COBRE_COMM_BACKEND": "tcp", "COBRE_TCP_RANK": rank, "COBRE_TCP_SIZE": "2", v.env: tc.value}))
				got := cfg.Coordinator
				if v.env == "COBRE_TCP_BIND_ADDR" {
					got = cfg.BindAddr
				}
				goCfg := starcomm.DefaultConfig()
				goCfg.Backend, goCfg.Rank, goCfg.Size, goCfg.Coordinator = "tcp", 1, 2, "node0"
				if v.env == "COBRE_TCP_BIND_ADDR" {
					goCfg.BindAddr = tc.value
				} else {
					goCfg.Coordinator = tc.value
				}
				verr := goCfg.Validate()
				if tc.want != "" {
					require.NoError(t, err)
					assert.Equal(t, tc.want, got)
					assert.NoError(t, verr)
					return
				}
				var ic *starcomm.InvalidConfigurationError
				require.ErrorAs(t, err, &ic)
				assert.Equal(t, v.env, ic.Var)
				assert.Equal(t, tc.value, ic.Value)
				assert.Contains(t, ic.Allowed, tc.why)
				require.ErrorAs(t, verr, &ic)
				assert.Equal(t, v.field, ic.Var)
				assert.Contains(t, ic.Allowed, tc.why)
			})
		}
	}
}

// TestConfigEnvironEntries: a later entry wins; blanks are trimmed.
func TestConfigEnvironEntries(t *testing.T) {
	cfg, err := starcomm.ConfigFromEnviron([]string{"COBRE_TCP_SIZE=4", "COBRE_TCP_SIZE=1", "COBRE_TCP_BIND_ADDR= 10.0.0.1 ", "COBRE_TCP_RANK=0=0"})
	var ic *starcomm.InvalidConfigurationError
	require.ErrorAs(t, err, &ic) // "0=0" is the value of COBRE_TCP_RANK
	assert.Equal(t, "COBRE_TCP_RANK", ic.Var)
	assert.Equal(t, "0=0", ic.Value)
	assert.Equal(t, 1, cfg.Size)
	cfg, err = starcomm.ConfigFromEnviron([]string{"COBRE_COMM_BACKEND=tcp", "COBRE_TCP_SIZE=1", "COBRE_TCP_RANK=0", "COBRE_TCP_BIND_ADDR= 10.0.0.1 "})
	require.NoError(t, err)
	assert.Equal(t, "10.0.0.1", cfg.BindAddr)
}

// TestConfigErrorFile: COBRE_ERROR_FILE is any non-blank path, read
// whatever the backend.
func TestConfigErrorFile(t *testing.T) {
	assert.Equal(t, errfile.Env, starcomm.EnvErrorFile)
	assert.Equal(t, "COBRE_ERROR_FILE", starcomm.EnvErrorFile)
	cases := []struct {
		env  []string
		want string
	}{
		{[]string{"COBRE_ERROR_FILE=/tmp/rank0.json"}, "/tmp/rank0.json"},
		{[]string{"COBRE_ERROR_FILE=rel/dir with spaces/e.json"}, "rel/dir with spaces/e.json"},
		{[]string{"COBRE_ERROR_FILE="}, ""},
		{[]string{"COBRE_ERROR_FILE=  "}, ""},
		{[]string{}, ""},
		{[]string{"COBRE_COMM_BACKEND=local", "COBRE_ERROR_FILE=/e"}, "/e"},
		{[]string{"COBRE_COMM_BACKEND=shm", "COBRE_SHM_NAME=j", "COBRE_TCP_RANK=0", "COBRE_TCP_SIZE=2", "COBRE_ERROR_FILE=/e"}, "/e"},
		{[]string{"COBRE_TCP_COORDINATOR=h", "COBRE_TCP_RANK=1", "COBRE_TCP_SIZE=2", "COBRE_ERROR_FILE=/e"}, "/e"},
	}
	for _, tc := range cases {
		t.Run(envCase(tc.env), func(t *testing.T) {
			cfg, err := parseEnviron(t, tc.env...)
			require.NoError(t, err)
			assert.Equal(t, tc.want, cfg.ErrorFile)
		})
	}
	assert.Empty(t, starcomm.DefaultConfig().ErrorFile)
}

// TestConfigDefaultsFromStarAndTCP: the defaults are star's and tcp's, not
// copies of them, and star and tcp agree where both have one.
func TestConfigDefaultsFromStarAndTCP(t *testing.T) {
	d, sc, tc := starcomm.DefaultConfig(), star.DefaultConfig(), tcp.DefaultConfig()
	cases := []struct {
		name      string
		got, want any
	}{
		{"Timeout=star", d.Timeout, sc.Timeout},
		{"Timeout=tcp", d.Timeout, tc.Timeout},
		{"ConnectTimeout=star", d.ConnectTimeout, sc.ConnectTimeout},
		{"ConnectTimeout=tcp", d.ConnectTimeout, tc.ConnectTimeout},
		{"Spin=star", d.Spin, sc.Spin},
		{"SpinMax=star", d.SpinMax, sc.SpinMax},
		{"ShmTimeout=shm", d.ShmTimeout, shm.DefaultTimeout},
		{"ShmTimeout=tcp's", d.ShmTimeout, d.Timeout},
		{"BindAddr=tcp", d.BindAddr, tc.BindAddr},
		{"Backend=auto", d.Backend, "auto"},
		{"Port=29500", d.Port, 29500},
		{"Size=1", d.Size, 1},
		{"Rank=0", d.Rank, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { assert.Equal(t, c.want, c.got) })
	}
	// An environment that sets nothing gives the defaults.
	cfg, err := starcomm.ConfigFromEnviron(nil)
	require.NoError(t, err)
	cfg.Listening = nil
	assert.Equal(t, d, cfg)
}

// TestConfigVariableTable: every Config field but Listening is set by
// exactly one variable of the table, and every row names a real field.
func TestConfigVariableTable(t *testing.T) {
	names, fields := starcomm.VariableFields()
	var want []string
	for f := range reflect.TypeFor[starcomm.Config]().Fields() {
		if f.Name != "Listening" && f.Name != "Logger" && f.Name != "RankFrom" { // Go only, or set by launchers
			want = append(want, f.Name)
		}
	}
	assert.ElementsMatch(t, want, fields)
	assert.Len(t, slices.Compact(slices.Sorted(slices.Values(names))), len(names), "duplicate names")
	for _, n := range names {
		assert.True(t, strings.HasPrefix(n, "COBRE_"), n)
		assert.Empty(t, starcomm.SuggestVariable(n+"_UNRELATED_SUFFIX_TOO_LONG"), n)
	}
}

// TestConfigREADMETable: the README's configuration table is the table of
// variables, row for row (variable, default, meaning), so neither can
// change without the other. The rows to paste are logged on failure.
func TestConfigREADMETable(t *testing.T) {
	f, err := os.Open("README.md")
	require.NoError(t, err)
	defer f.Close()
	var table []string
	inSection := false
	for sc := bufio.NewScanner(f); sc.Scan(); {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			inSection = line == "## Configuration"
			continue
		}
		if inSection && strings.HasPrefix(line, "|") {
			table = append(table, line)
		}
	}
	want := strings.Split(strings.TrimSpace(starcomm.ConfigMarkdown()), "\n")
	if !assert.Equal(t, want, table, "README.md's configuration table, row for row, vs the table of variables") {
		t.Logf("generated rows:\n%s", starcomm.ConfigMarkdown())
	}
}

// TestRecordConfigError: a configuration ConfigFromEnv refuses, given to
// RecordConfigError, is recorded in COBRE_ERROR_FILE, blaming this rank,
// with the message ConfigFromEnv returned: a program that reads the
// variables and then adjusts the Config before New (as starbench does)
// still lets its launcher name the rank. ConfigFromEnv itself writes
// nothing (a program may probe it).
func TestRecordConfigError(t *testing.T) {
	clearCobreEnv(t)
	path := filepath.Join(t.TempDir(), "rank.json")
	t.Setenv("COBRE_ERROR_FILE", path)
	t.Setenv("COBRE_TCP_RANK", "1")
	t.Setenv("COBRE_TCP_SIZE", "3")
	t.Setenv("COBRE_TCP_COORDINATOR", "node0")
	t.Setenv("COBRE_TCP_PORT", "abc")
	cfg, err := starcomm.ConfigFromEnv()
	var ic *starcomm.InvalidConfigurationError
	require.ErrorAs(t, err, &ic)
	assert.Equal(t, "COBRE_TCP_PORT", ic.Var)
	_, serr := os.Stat(path)
	require.ErrorIs(t, serr, fs.ErrNotExist, "ConfigFromEnv wrote a record")
	starcomm.RecordConfigError(cfg, err)
	rec, rerr := errfile.Read(path)
	require.NoError(t, rerr, "no error record")
	assert.Equal(t, err.Error(), rec.Message)
	assert.Equal(t, 1, rec.Rank)
	assert.Equal(t, 1, rec.Blamed, "the record blames this rank")
	assert.Equal(t, 3, rec.Size)
	assert.Equal(t, star.OpStartup, rec.Op)

}

// TestNewRecordsStartupFailure: a start-up that fails before the backend
// runs (a setting the tcp transport refuses, rank 0's listen failing, a
// Config Validate refuses) is recorded in the error file, blaming this
// rank, with the message New returns; so a launcher can name the rank and
// what went wrong.
func TestNewRecordsStartupFailure(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer held.Close()
	port := held.Addr().(*net.TCPAddr).Port
	tcpCfg := func(rank int, f func(*starcomm.Config)) starcomm.Config {
		c := starcomm.DefaultConfig()
		c.Backend, c.Rank, c.Size, c.Coordinator, c.BindAddr = "tcp", rank, 2, "127.0.0.1", "127.0.0.1"
		f(&c)
		return c
	}
	cases := []struct {
		name string
		cfg  starcomm.Config
		is   func(error) bool
		msg  string // a fragment of the message
	}{
		{"rank=0/listen=address-in-use", tcpCfg(0, func(c *starcomm.Config) { c.Port = port }),
			func(err error) bool { var a *tcp.AddrInUseError; return errors.As(err, &a) }, "127.0.0.1:" + strconv.Itoa(port)},
		{"rank=1/bind-address-with-port", tcpCfg(1, func(c *starcomm.Config) { c.BindAddr = "127.0.0.1:80" }),
			func(err error) bool { var ic *starcomm.InvalidConfigurationError; return errors.As(err, &ic) }, `BindAddr="127.0.0.1:80": must be a host name or IP address without a port`},
		{"rank=1/bind-address-with-port/from-slurm", tcpCfg(1, func(c *starcomm.Config) { c.BindAddr, c.RankFrom = "127.0.0.1:80", "SLURM_PROCID, SLURM_NTASKS" }),
			func(err error) bool { var ic *starcomm.InvalidConfigurationError; return errors.As(err, &ic) }, `BindAddr="127.0.0.1:80"`},
		{"rank=1/invalid-config", tcpCfg(1, func(c *starcomm.Config) { c.Liveness = 5 }),
			func(err error) bool { var ic *starcomm.InvalidConfigurationError; return errors.As(err, &ic) }, `Liveness="5ns"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.ErrorFile = filepath.Join(t.TempDir(), "rank.json")
			_, err := starcomm.New(context.Background(), tc.cfg)
			require.Error(t, err)
			assert.True(t, tc.is(err), "%T: %v", err, err)
			rec, rerr := errfile.Read(tc.cfg.ErrorFile)
			require.NoError(t, rerr, "no error record")
			assert.Equal(t, tc.cfg.Rank, rec.Rank)
			assert.Equal(t, tc.cfg.Rank, rec.Blamed, "the record blames this rank")
			assert.Equal(t, 2, rec.Size)
			assert.Equal(t, star.OpStartup, rec.Op)
			assert.Equal(t, err.Error(), rec.Message)
			assert.Contains(t, rec.Message, tc.msg)
		})
	}
	// A start-up that fails in the protocol says where the rank came from.
	// (The held port accepts the connection and never answers.)
	t.Run("rank=1/no-answer/from-slurm", func(t *testing.T) {
		cfg := tcpCfg(1, func(c *starcomm.Config) {
			c.Port, c.ConnectTimeout, c.RankFrom = port, 300*time.Millisecond, "SLURM_PROCID, SLURM_NTASKS"
		})
		cfg.ErrorFile = filepath.Join(t.TempDir(), "rank.json")
		_, err := starcomm.New(context.Background(), cfg)
		var ife *comm.InitializationFailedError
		require.ErrorAs(t, err, &ife)
		assert.Contains(t, err.Error(), "comm: tcp backend initialization failed: rank 1 of 2 from SLURM_PROCID, SLURM_NTASKS: ")
		// The record is the error New returned, origin included; what
		// listens at rank 0's address never answered, so it blames rank 0.
		rec, rerr := errfile.Read(cfg.ErrorFile)
		require.NoError(t, rerr, "no error record")
		assert.Equal(t, err.Error(), rec.Message)
		assert.Equal(t, 0, rec.Blamed)
		assert.Equal(t, star.OpStartup, rec.Op)
	})
	// Rank 0 whose workers never came: its record blames the first rank
	// missing, so a launcher follows the blame to it.
	t.Run("rank=0/missing-ranks", func(t *testing.T) {
		cfg := starcomm.DefaultConfig()
		cfg.Backend, cfg.Rank, cfg.Size, cfg.BindAddr, cfg.Port = "tcp", 0, 4, "127.0.0.1", 0
		cfg.ConnectTimeout, cfg.RankFrom = 200*time.Millisecond, "SLURM_PROCID, SLURM_NTASKS"
		cfg.ErrorFile = filepath.Join(t.TempDir(), "rank.json")
		_, err := starcomm.New(context.Background(), cfg)
		var ife *comm.InitializationFailedError
		require.ErrorAs(t, err, &ife)
		assert.Contains(t, err.Error(), "rank 0 of 4 from SLURM_PROCID, SLURM_NTASKS: ")
		assert.Contains(t, err.Error(), "missing ranks [1 2 3]")
		rec, rerr := errfile.Read(cfg.ErrorFile)
		require.NoError(t, rerr, "no error record")
		assert.Equal(t, err.Error(), rec.Message)
		assert.Equal(t, 1, rec.Blamed, "the record blames the first missing rank")
	})
}

// TestStartupBlamesCoordinator: a worker's failed start-up blames rank 0
// in its error record when, as far as it can tell, rank 0 failed it: no
// one listened at rank 0's address for the whole connect timeout, or what
// accepted the connection closed it before answering the Handshake. It
// blames itself when the failure is its own: its context ended, or rank
// 0 refused it for its settings (here a size that is not the job's).
func TestStartupBlamesCoordinator(t *testing.T) {
	worker := func(t *testing.T, port int, f func(*starcomm.Config)) starcomm.Config {
		c := starcomm.DefaultConfig()
		c.Backend, c.Rank, c.Size, c.Coordinator, c.Port = "tcp", 1, 2, "127.0.0.1", port
		c.ConnectTimeout = 300 * time.Millisecond
		c.ErrorFile = filepath.Join(t.TempDir(), "rank.json")
		if f != nil {
			f(&c)
		}
		return c
	}
	// closedPort is a port no one listens on (it was just released).
	closedPort := func(t *testing.T) int {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		port := ln.Addr().(*net.TCPAddr).Port
		require.NoError(t, ln.Close())
		return port
	}
	blamed := func(t *testing.T, cfg starcomm.Config, ctx context.Context) (int, error) {
		t.Helper()
		_, err := starcomm.New(ctx, cfg)
		var ife *comm.InitializationFailedError
		require.ErrorAs(t, err, &ife)
		rec, rerr := errfile.Read(cfg.ErrorFile)
		require.NoError(t, rerr, "no error record")
		assert.Equal(t, err.Error(), rec.Message)
		assert.Equal(t, star.OpStartup, rec.Op)
		return rec.Blamed, err
	}

	t.Run("nobody-listens", func(t *testing.T) {
		b, err := blamed(t, worker(t, closedPort(t), nil), context.Background())
		assert.ErrorIs(t, err, os.ErrDeadlineExceeded)
		assert.Equal(t, 0, b, "%v", err)
	})
	t.Run("closed-before-answering", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer ln.Close()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				_ = c.Close()
			}
		}()
		b, err := blamed(t, worker(t, ln.Addr().(*net.TCPAddr).Port, nil), context.Background())
		assert.Contains(t, err.Error(), "coordinator")
		assert.Equal(t, 0, b, "%v", err)
	})
	t.Run("own-context-ended", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		b, err := blamed(t, worker(t, closedPort(t), func(c *starcomm.Config) { c.ConnectTimeout = time.Minute }), ctx)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, 1, b, "%v", err)
	})
	t.Run("refused-for-its-size", func(t *testing.T) {
		var ports = make(chan int, 1)
		root := starcomm.DefaultConfig()
		root.Backend, root.Rank, root.Size, root.BindAddr, root.Port = "tcp", 0, 2, "127.0.0.1", 0
		root.ConnectTimeout = 2 * time.Second
		root.Listening = func(p int) { ports <- p }
		ctx, cancel := context.WithCancel(context.Background())
		rootDone := make(chan error, 1)
		go func() {
			c, err := starcomm.New(ctx, root)
			if c != nil {
				_ = c.Close()
			}
			rootDone <- err
		}()
		defer func() {
			cancel()
			<-rootDone
		}()
		b, err := blamed(t, worker(t, <-ports, func(c *starcomm.Config) { c.Size = 3 }), context.Background())
		var re *star.RefusedError
		require.ErrorAs(t, err, &re)
		assert.Contains(t, err.Error(), "size mismatch")
		assert.Equal(t, 1, b, "%v", err)
	})
}

// TestStarrunNamesRankFailingStartup: a real 2-rank job under starrun
// whose rank 0 cannot listen (its --bind address, from a range reserved
// for documentation, is on no interface of this host; starrun checks only
// that no one listens on the port): rank 0's FromEnv records the failure
// in its COBRE_ERROR_FILE, so starrun names rank 0 and quotes its error,
// rather than "no rank left an error record".
func TestStarrunNamesRankFailingStartup(t *testing.T) {
	skipUnlessChaos(t)
	bin := starrunPath(t)
	self, err := os.Executable()
	require.NoError(t, err)
	const port = "29599"
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// --settle 0: rank 1, dialling the address no one listens on, is
	// stopped at once.
	cmd := exec.CommandContext(ctx, bin, "-n", "2", "--port", port, "--bind", "192.0.2.1", "--settle", "0", "--", self)
	cmd.Env = append(launcherFreeEnv(), envLauncherChild+"=1", "GORACE=atexit_sleep_ms=0")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err = cmd.Run()
	var ee *exec.ExitError
	require.True(t, errors.As(err, &ee), "starrun: %v\n%s", err, stderr.String())
	assert.Equal(t, 1, ee.ExitCode(), "starrun's exit code: rank 0's\n%s", stderr.String())
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	last := lines[len(lines)-1]
	want := regexp.MustCompile(`^starrun: rank 0 \(pid \d+\) exited with code 1: root cause \(its error: "comm: .*192\.0\.2\.1:` + port + `.*"\)$`)
	assert.Regexp(t, want, last, "the last line\n%s", stderr.String())
}

// envHangUpCoordinator makes the test binary, as rank 0, a coordinator
// that takes one worker's Handshake and closes the connection without an
// answer (as a rank 0 that dies in start-up does), then waits to be
// stopped; as any other rank, launcherChild.
const envHangUpCoordinator = "STARCOMM_TEST_HANGUP_COORDINATOR"

// hangUpCoordinator is the child of envHangUpCoordinator.
func hangUpCoordinator() int {
	if os.Getenv("COBRE_TCP_RANK") != "0" {
		return launcherChild()
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(os.Getenv("COBRE_TCP_BIND_ADDR"), os.Getenv("COBRE_TCP_PORT")))
	if err != nil {
		fmt.Fprintln(os.Stderr, "listen:", err)
		return 1
	}
	c, err := ln.Accept()
	if err != nil {
		fmt.Fprintln(os.Stderr, "accept:", err)
		return 1
	}
	var hs [star.HeaderSize + 8]byte
	if _, err := io.ReadFull(c, hs[:]); err != nil {
		fmt.Fprintln(os.Stderr, "handshake:", err)
		return 1
	}
	_ = c.Close()
	// starrun stops this rank once the worker has failed.
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, os.Interrupt)
	<-stop
	_ = ln.Close()
	return 1
}

// TestStarrunNamesCoordinatorGoneInStartup: a real 2-rank job under
// starrun whose rank 0 closes the worker's connection after its Handshake,
// before any Ack (as a rank 0 that crashes in start-up does), and then
// lingers until starrun stops it. The worker fails first, and its error
// record blames rank 0, so starrun names rank 0 as the root cause, quoting
// the worker's accusation. (The worker's record blamed the worker itself
// before, and starrun named it.)
func TestStarrunNamesCoordinatorGoneInStartup(t *testing.T) {
	skipUnlessChaos(t)
	bin := starrunPath(t)
	self, err := os.Executable()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-n", "2", "--", self)
	cmd.Env = append(launcherFreeEnv(), envHangUpCoordinator+"=1", "GORACE=atexit_sleep_ms=0", "COBRE_TCP_CONNECT_TIMEOUT_MS=20000")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err = cmd.Run()
	var ee *exec.ExitError
	require.True(t, errors.As(err, &ee), "starrun: %v\n%s", err, stderr.String())
	assert.Equal(t, 1, ee.ExitCode(), "starrun's exit code: the worker's\n%s", stderr.String())
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	last := lines[len(lines)-1]
	want := regexp.MustCompile(`^starrun: rank 0 \(pid \d+\) [^:]*: root cause \(blamed by rank 1: "comm: tcp backend initialization failed: rank 1: wait for the coordinator's Ack .*EOF"\); rank 1 failed first`)
	assert.Regexp(t, want, last, "the last line\n%s", stderr.String())
}

// TestStarrunBind: starrun's workers dial the address rank 0 binds
// (--bind 127.0.0.2, --bind [::1], an inherited COBRE_TCP_BIND_ADDR), so
// the job runs; before, they dialed 127.0.0.1 and were refused. Real
// processes over TCP.
func TestStarrunBind(t *testing.T) {
	skipUnlessChaos(t)
	bin := starrunPath(t)
	self, err := os.Executable()
	require.NoError(t, err)
	for _, tc := range []struct {
		name  string
		flags []string
		env   []string
		probe string // an address that must be bindable here
	}{
		{"bind=127.0.0.2", []string{"--bind", "127.0.0.2"}, nil, "127.0.0.2:0"},
		{"bind=[::1]", []string{"--bind", "[::1]"}, nil, "[::1]:0"},
		{"inherited=127.0.0.3", nil, []string{"COBRE_TCP_BIND_ADDR=127.0.0.3"}, "127.0.0.3:0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", tc.probe)
			if err != nil {
				t.Skipf("cannot listen on %s here: %v", tc.probe, err)
			}
			require.NoError(t, ln.Close())
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			args := append(append([]string{"-n", "3"}, tc.flags...), "--", self)
			cmd := exec.CommandContext(ctx, bin, args...)
			cmd.Env = append(append(launcherFreeEnv(), envLauncherChild+"=1", "GORACE=atexit_sleep_ms=0", "COBRE_TCP_CONNECT_TIMEOUT_MS=10000"), tc.env...)
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			require.NoError(t, cmd.Run(), "stderr:\n%s", stderr.String())
			for r := range 3 {
				assert.Contains(t, stdout.String(), fmt.Sprintf("[%d] rank=%d size=3", r, r))
			}
			assert.Equal(t, 3, strings.Count(stdout.String(), " sum=3\n"), stdout.String())
		})
	}
}

// TestIPv6Brackets: over real TCP on the IPv6 loopback, rank 0 built in Go
// with BindAddr "[::1]" and a worker built by FromEnv with
// COBRE_TCP_COORDINATOR=[::1] (brackets kept) form a job whose allreduce
// is right.
func TestIPv6Brackets(t *testing.T) {
	ln, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback on this host: %v", err)
	}
	require.NoError(t, ln.Close())
	testkit.CheckGoroutines(t)
	cfg := starcomm.DefaultConfig()
	cfg.Backend, cfg.Rank, cfg.Size, cfg.Port, cfg.BindAddr = "tcp", 0, 2, 0, "[::1]"
	cfg.ConnectTimeout, cfg.Timeout = 10*time.Second, 10*time.Second
	port := make(chan int, 1)
	cfg.Listening = func(p int) { port <- p }
	coord := testkit.Async(func() rankOutcome {
		c, err := starcomm.New(context.Background(), cfg)
		return rankOutcome{c, err}
	})
	var p int
	select {
	case p = <-port:
	case o := <-coord:
		t.Fatalf("rank 0 did not start: %v", o.err)
	}
	setWorkerEnv(t, 1, 2, p, map[string]string{"COBRE_TCP_COORDINATOR": "[::1]"})
	w, err := starcomm.FromEnv(context.Background())
	require.NoError(t, err)
	o := <-coord
	require.NoError(t, o.err)
	comms := []comm.Communicator{o.c, w}
	sums := make([][]int64, 2)
	require.NoError(t, errors.Join(testkit.RunRanks(comms, func(c comm.Communicator) error {
		sums[c.Rank()] = make([]int64, 1)
		return comm.Allreduce(context.Background(), c, []int64{int64(c.Rank() + 1)}, sums[c.Rank()], comm.Sum)
	})...))
	assert.Equal(t, [][]int64{{3}, {3}}, sums)
	require.NoError(t, testkit.CloseAll(comms))
}

// TestConfigRankWithoutSize: COBRE_TCP_RANK without COBRE_TCP_SIZE, under
// auto, is an error naming both, not a job of one (rank 0 ran alone and
// succeeded while its workers failed for the missing size); with the
// size, or with the local backend chosen, it is not.
func TestConfigRankWithoutSize(t *testing.T) {
	_, err := starcomm.ConfigFromEnviron([]string{"COBRE_TCP_RANK=0", "SLURM_PROCID=0", "SLURM_NTASKS=2"})
	var ic *starcomm.InvalidConfigurationError
	require.ErrorAs(t, err, &ic)
	assert.Equal(t, "COBRE_TCP_RANK", ic.Var)
	assert.EqualError(t, err, `starcomm: invalid COBRE_TCP_RANK="0": is set without COBRE_TCP_SIZE: give the job's size on every rank (COBRE_TCP_SIZE=1 runs this rank alone)`)
	for _, env := range [][]string{
		{"COBRE_TCP_RANK=0", "COBRE_TCP_SIZE=1"},
		{"COBRE_TCP_RANK=0", "COBRE_COMM_BACKEND=local"},
		{"SLURM_PROCID=0", "SLURM_NTASKS=1"},
		{},
	} {
		c, err := starcomm.ConfigFromEnviron(env)
		require.NoError(t, err, "%v", env)
		assert.Equal(t, "local", starcomm.Resolve(c), "%v", env)
	}
}

// anInterface returns the name of one of this host's network interfaces,
// for an IPv6 zone that the configuration accepts.
func anInterface(t *testing.T) string {
	t.Helper()
	ifs, err := net.Interfaces()
	if err != nil || len(ifs) == 0 {
		t.Fatalf("net.Interfaces: %v (%d)", err, len(ifs))
	}
	return ifs[0].Name
}

// TestConfigSpinsReachStar: COBRE_TCP_SPIN_US and COBRE_TCP_SPIN_MAX_US as
// the tcp backend hands them to star: the defaults as they are (100 µs
// growing to 1 ms), 0 for the spin turns polling off (as do sockets that
// cannot be polled), and 0 for the most keeps the spin fixed (star's own
// zero would mean its default, so it becomes -1).
func TestConfigSpinsReachStar(t *testing.T) {
	const us = time.Microsecond
	cases := []struct {
		name          string
		env           map[string]string
		canPoll       bool
		spin, spinMax time.Duration
	}{
		{"defaults", nil, true, 100 * us, 1000 * us},
		{"both set", map[string]string{"COBRE_TCP_SPIN_US": "50", "COBRE_TCP_SPIN_MAX_US": "5000"}, true, 50 * us, 5000 * us},
		{"fixed spin", map[string]string{"COBRE_TCP_SPIN_MAX_US": "0"}, true, 100 * us, -1},
		{"no polling", map[string]string{"COBRE_TCP_SPIN_US": "0"}, true, -1, 1000 * us},
		{"sockets that cannot be polled", nil, false, -1, 1000 * us},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"COBRE_COMM_BACKEND": "tcp", "COBRE_TCP_RANK": "0", "COBRE_TCP_SIZE": "2"}
			maps.Copy(env, tc.env)
			cfg, err := starcomm.ConfigFromLookup(lookup(env))
			require.NoError(t, err)
			spin, spinMax := starcomm.StarSpins(cfg, tc.canPoll)
			assert.Equal(t, tc.spin, spin, "Spin")
			assert.Equal(t, tc.spinMax, spinMax, "SpinMax")
		})
	}
}
