package starcomm_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm"
	"github.com/starcomm/starcomm/comm"
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
	assert.Equal(t, "auto", cfg.Backend)
}

func TestConfigAllVariables(t *testing.T) {
	cfg, err := starcomm.ConfigFromLookup(lookup(map[string]string{
		"COBRE_COMM_BACKEND": "TCP", "COBRE_TCP_COORDINATOR": "10.0.0.1", "COBRE_TCP_PORT": "4000",
		"COBRE_TCP_RANK": "0", "COBRE_TCP_SIZE": "8", "COBRE_TCP_TIMEOUT_SECS": "2.5",
		"COBRE_TCP_BIND_ADDR": "127.0.0.1", "COBRE_TCP_CONNECT_TIMEOUT_MS": "1500", "COBRE_TCP_SPIN_US": "150",
	}))
	require.NoError(t, err)
	assert.Equal(t, starcomm.Config{Backend: "tcp", Coordinator: "10.0.0.1", Port: 4000, Rank: 0, Size: 8,
		Timeout: 2500 * time.Millisecond, BindAddr: "127.0.0.1", ConnectTimeout: 1500 * time.Millisecond,
		Spin: 150 * time.Microsecond}, cfg)
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
		{"timeout zero", "COBRE_TCP_TIMEOUT_SECS", "0", "positive"},
		{"timeout negative", "COBRE_TCP_TIMEOUT_SECS", "-5", "positive"},
		{"timeout not a number", "COBRE_TCP_TIMEOUT_SECS", "soon", "not a number"},
		{"timeout NaN", "COBRE_TCP_TIMEOUT_SECS", "NaN", "not a number"},
		{"connect timeout zero", "COBRE_TCP_CONNECT_TIMEOUT_MS", "0", "positive"},
		{"connect timeout not a number", "COBRE_TCP_CONNECT_TIMEOUT_MS", "1s", "not an integer"},
		{"spin negative", "COBRE_TCP_SPIN_US", "-1", "0..1000000"},
		{"spin not a number", "COBRE_TCP_SPIN_US", "fast", "not an integer"},
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
	t.Run("auto with a shm name is shm, not available", func(t *testing.T) {
		_, err := pick(map[string]string{"COBRE_SHM_NAME": "seg"})
		var na *comm.BackendNotAvailableError
		require.ErrorAs(t, err, &na)
		assert.Equal(t, "shm", na.Backend)
	})
	t.Run("unknown backend lists the known ones", func(t *testing.T) {
		_, err := pick(map[string]string{"COBRE_COMM_BACKEND": "mpi"})
		var ib *comm.InvalidBackendError
		require.ErrorAs(t, err, &ib)
		assert.Equal(t, "mpi", ib.Name)
		assert.Equal(t, []string{"auto", "tcp", "shm", "local"}, ib.Available)
		assert.ErrorContains(t, err, "auto, tcp, shm, local")
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
