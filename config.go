package starcomm

import (
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/star"
)

// Environment variables (spec section 8 and the backend-selection spec).
const (
	EnvBackend          = "COBRE_COMM_BACKEND"
	EnvCoordinator      = "COBRE_TCP_COORDINATOR"
	EnvPort             = "COBRE_TCP_PORT"
	EnvRank             = "COBRE_TCP_RANK"
	EnvSize             = "COBRE_TCP_SIZE"
	EnvTimeoutSecs      = "COBRE_TCP_TIMEOUT_SECS"
	EnvBindAddr         = "COBRE_TCP_BIND_ADDR"
	EnvConnectTimeoutMS = "COBRE_TCP_CONNECT_TIMEOUT_MS"
	EnvShmName          = "COBRE_SHM_NAME"
	// EnvSpinUS is starcomm's own addition: how long, in microseconds, a
	// rank polls its TCP links for a small frame before parking
	// (star.Config.Spin; 0 turns polling off).
	EnvSpinUS = "COBRE_TCP_SPIN_US"
)

// Backend names.
const (
	BackendAuto  = "auto"
	BackendTCP   = "tcp"
	BackendShm   = "shm"
	BackendLocal = "local"
)

// Backends lists the backend names COBRE_COMM_BACKEND accepts.
var Backends = []string{BackendAuto, BackendTCP, BackendShm, BackendLocal}

// Config is everything the environment can set, as Go fields. Build one
// with DefaultConfig (then set fields) or ConfigFromEnv.
type Config struct {
	// Backend is auto, tcp, shm or local (COBRE_COMM_BACKEND, default auto).
	// Auto picks tcp when Coordinator is set, else shm when ShmName is set,
	// else local.
	Backend string
	// Coordinator is the host or IP address of rank 0, which workers dial
	// (COBRE_TCP_COORDINATOR). Rank 0 does not need it.
	Coordinator string
	// Port is the coordinator's TCP port (COBRE_TCP_PORT, default 29500).
	// In Go, Port 0 on rank 0 picks a free port (see Listening).
	Port int
	// Rank is this process's rank, 0..Size-1 (COBRE_TCP_RANK).
	Rank int
	// Size is the number of ranks (COBRE_TCP_SIZE).
	Size int
	// Timeout bounds every read and write of a collective and detects
	// crashed, hung and cut-off ranks (COBRE_TCP_TIMEOUT_SECS, default 60 s).
	Timeout time.Duration
	// BindAddr is the address rank 0 listens on (COBRE_TCP_BIND_ADDR,
	// default 0.0.0.0).
	BindAddr string
	// ConnectTimeout bounds start-up: a worker's retries to reach the
	// coordinator and rank 0's wait for every worker
	// (COBRE_TCP_CONNECT_TIMEOUT_MS, default 30000 ms).
	ConnectTimeout time.Duration
	// ShmName names the shared-memory segment of the shm backend
	// (COBRE_SHM_NAME).
	ShmName string
	// Spin is how long a rank polls its TCP links for a small frame before
	// it parks (COBRE_TCP_SPIN_US, default 100 µs; 0 turns polling off).
	// See star.Config.Spin.
	Spin time.Duration
	// Listening, if set, is called on rank 0 with the port it listens on
	// (useful with Port 0) before it waits for workers.
	Listening func(port int)
}

// DefaultConfig returns the defaults of the spec: backend auto, port 29500,
// timeout 60 s, bind address 0.0.0.0, connect timeout 30 s, rank 0 of size 1.
func DefaultConfig() Config {
	return Config{
		Backend:        BackendAuto,
		Port:           29500,
		Size:           1,
		Timeout:        60 * time.Second,
		BindAddr:       "0.0.0.0",
		ConnectTimeout: 30 * time.Second,
		Spin:           star.DefaultConfig().Spin,
	}
}

// InvalidConfigurationError reports a configuration value that is set but
// not allowed. Var is the environment variable (or the Config field, for a
// Config built in Go), Value the rejected value, Allowed what is allowed.
type InvalidConfigurationError struct {
	Var     string
	Value   string
	Allowed string
}

func (e *InvalidConfigurationError) Error() string {
	return fmt.Sprintf("starcomm: invalid %s=%q: %s", e.Var, e.Value, e.Allowed)
}

// resolve returns the backend auto stands for.
func (c Config) resolve() string {
	b := strings.ToLower(strings.TrimSpace(c.Backend))
	if b == "" || b == BackendAuto {
		switch {
		case c.Coordinator != "":
			return BackendTCP
		case c.ShmName != "":
			return BackendShm
		default:
			return BackendLocal
		}
	}
	return b
}

// Validate checks c for the backend it selects and returns the first
// problem, naming the Config field.
func (c Config) Validate() error {
	b := c.resolve()
	if !slices.Contains(Backends, b) {
		return invalidBackend(c.Backend)
	}
	if b != BackendTCP {
		return nil
	}
	switch {
	case c.Size < 1:
		return &InvalidConfigurationError{Var: "Size", Value: strconv.Itoa(c.Size), Allowed: "must be at least 1"}
	case c.Rank < 0 || c.Rank >= c.Size:
		return &InvalidConfigurationError{Var: "Rank", Value: strconv.Itoa(c.Rank), Allowed: fmt.Sprintf("must be in 0..%d (Size is %d)", c.Size-1, c.Size)}
	case c.Port < 0 || c.Port > 65535 || (c.Port == 0 && c.Rank != 0):
		return &InvalidConfigurationError{Var: "Port", Value: strconv.Itoa(c.Port), Allowed: "must be in 1..65535 (0 only on rank 0, to pick a free port)"}
	case c.Timeout <= 0:
		return &InvalidConfigurationError{Var: "Timeout", Value: c.Timeout.String(), Allowed: "must be positive"}
	case c.ConnectTimeout <= 0:
		return &InvalidConfigurationError{Var: "ConnectTimeout", Value: c.ConnectTimeout.String(), Allowed: "must be positive"}
	case c.Spin < 0:
		return &InvalidConfigurationError{Var: "Spin", Value: c.Spin.String(), Allowed: "must be zero (no polling) or positive"}
	case c.Rank > 0 && c.Size > 1 && c.Coordinator == "":
		return &InvalidConfigurationError{Var: "Coordinator", Value: "", Allowed: "workers (rank > 0) need the coordinator's host"}
	}
	return nil
}

func invalidBackend(name string) error {
	return &comm.InvalidBackendError{Name: name, Available: Backends}
}

// ConfigFromEnv reads the COBRE_* variables from the process environment.
// See ConfigFromLookup.
func ConfigFromEnv() (Config, error) { return ConfigFromLookup(os.LookupEnv) }

// ConfigFromLookup reads the COBRE_* variables through lookup (os.LookupEnv
// in production). It returns a *comm.InvalidBackendError for an unknown
// backend, a *comm.MissingConfigurationError listing every required
// variable that is unset, or an *InvalidConfigurationError naming the first
// variable whose value is not allowed (with all such errors joined).
func ConfigFromLookup(lookup func(string) (string, bool)) (Config, error) {
	c := DefaultConfig()
	get := func(name string) (string, bool) {
		v, ok := lookup(name)
		v = strings.TrimSpace(v)
		return v, ok && v != ""
	}
	if v, ok := get(EnvBackend); ok {
		c.Backend = strings.ToLower(v)
	}
	c.Coordinator, _ = get(EnvCoordinator)
	c.ShmName, _ = get(EnvShmName)
	backend := c.resolve()
	if !slices.Contains(Backends, backend) {
		return c, invalidBackend(c.Backend)
	}
	if backend != BackendTCP {
		return c, nil
	}

	var errs []error
	bad := func(name, value, allowed string) {
		errs = append(errs, &InvalidConfigurationError{Var: name, Value: value, Allowed: allowed})
	}
	integer := func(name string, lo, hi int64, allowed string) (int64, bool) {
		v, _ := get(name)
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			bad(name, v, "not an integer; "+allowed)
			return 0, false
		}
		if n < lo || n > hi {
			bad(name, v, allowed)
			return 0, false
		}
		return n, true
	}

	var missing []string
	_, hasRank := get(EnvRank)
	_, hasSize := get(EnvSize)
	if !hasRank {
		missing = append(missing, EnvRank)
	}
	if !hasSize {
		missing = append(missing, EnvSize)
	}
	rankOK, sizeOK := false, false
	if hasSize {
		var n int64
		if n, sizeOK = integer(EnvSize, 1, math.MaxInt32, "must be an integer >= 1"); sizeOK {
			c.Size = int(n)
		}
	}
	if hasRank {
		var n int64
		if n, rankOK = integer(EnvRank, 0, math.MaxInt32, "must be an integer >= 0 and < "+EnvSize); rankOK {
			c.Rank = int(n)
			if sizeOK && c.Rank >= c.Size {
				rankOK = false
				bad(EnvRank, strconv.Itoa(c.Rank), fmt.Sprintf("must be < %s (%d): ranks are 0..%d", EnvSize, c.Size, c.Size-1))
			}
		}
	}
	// Workers need the coordinator's address; rank 0 does not. With an
	// unknown rank, say it is needed unless this is known to be rank 0.
	if c.Coordinator == "" && (!hasRank || (rankOK && c.Rank > 0)) {
		missing = append(missing, EnvCoordinator)
	}
	if len(missing) > 0 {
		return c, &comm.MissingConfigurationError{Backend: BackendTCP, MissingVars: missing}
	}
	if _, ok := get(EnvPort); ok {
		if n, ok := integer(EnvPort, 1, 65535, "must be a TCP port in 1..65535"); ok {
			c.Port = int(n)
		}
	}
	if v, ok := get(EnvTimeoutSecs); ok {
		secs, err := strconv.ParseFloat(v, 64)
		switch {
		case err != nil || math.IsNaN(secs) || math.IsInf(secs, 0):
			bad(EnvTimeoutSecs, v, "not a number; must be a positive number of seconds")
		case secs <= 0:
			bad(EnvTimeoutSecs, v, "must be a positive number of seconds")
		case secs > 24*3600*365:
			bad(EnvTimeoutSecs, v, "must be at most one year")
		default:
			c.Timeout = time.Duration(secs * float64(time.Second))
		}
	}
	if v, ok := get(EnvBindAddr); ok {
		c.BindAddr = v
	}
	if _, ok := get(EnvConnectTimeoutMS); ok {
		if n, ok := integer(EnvConnectTimeoutMS, 1, math.MaxInt32, "must be a positive number of milliseconds"); ok {
			c.ConnectTimeout = time.Duration(n) * time.Millisecond
		}
	}
	if _, ok := get(EnvSpinUS); ok {
		if n, ok := integer(EnvSpinUS, 0, 1_000_000, "must be a number of microseconds in 0..1000000 (0: no polling)"); ok {
			c.Spin = time.Duration(n) * time.Microsecond
		}
	}
	if len(errs) > 0 {
		return c, errors.Join(errs...)
	}
	return c, nil
}
