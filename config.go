package starcomm

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/internal/errfile"
	"github.com/starcomm/starcomm/shm"
	"github.com/starcomm/starcomm/star"
	"github.com/starcomm/starcomm/transport/tcp"
)

// Environment variables (the COBRE_* names of the protocol's backends).
// The table in config_vars.go says what each one sets, allows and
// defaults to, and which backends read it.
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
	// EnvShmTimeoutSecs is the shm backend's hang timeout
	// (Config.ShmTimeout), its own: COBRE_TCP_TIMEOUT_SECS
	// is the tcp backend's.
	EnvShmTimeoutSecs = "COBRE_SHM_TIMEOUT_SECS"
	// EnvSpinUS is starcomm's own addition: how long, in microseconds, a
	// rank polls its TCP links for a small frame before parking
	// (star.Config.Spin; 0 turns polling off).
	EnvSpinUS = "COBRE_TCP_SPIN_US"
	// EnvSpinMaxUS is starcomm's addition: the most, in microseconds, the
	// spin grows to after waits that parking cut short
	// (star.Config.SpinMax; at or below COBRE_TCP_SPIN_US the spin stays
	// at that).
	EnvSpinMaxUS = "COBRE_TCP_SPIN_MAX_US"
	// EnvBufferBytes is starcomm's addition: the size, in bytes, it asks
	// for as each TCP socket's send and receive buffer
	// (tcp.Config.BufferSize; 0 leaves the system's default, with
	// autotuning).
	EnvBufferBytes = "COBRE_TCP_BUFFER_BYTES"
	// EnvLivenessSecs is starcomm's addition: the liveness timeout of the
	// control session, in seconds (star.Config.Liveness; 0 turns the
	// control session off).
	EnvLivenessSecs = "COBRE_TCP_LIVENESS_SECS"
	// EnvLog is the level of the library's log (stall reports, liveness
	// events) on standard error: off, error, warn, info or debug.
	EnvLog = "COBRE_LOG"
	// EnvDebug turns on the checks that cost time: "detail" compares every
	// rank's arguments to every collective (star.Config.CheckCollectives).
	EnvDebug = "COBRE_DEBUG"
	// EnvTLSCert, EnvTLSKey and EnvTLSCA turn on TLS with mutual
	// authentication for the tcp backend: PEM files of this rank's
	// certificate (chain), its private key, and the CA that signs every
	// rank's certificate; all three or none (Config.TLSCert, TLSKey,
	// TLSCA). See transport/mtls.
	EnvTLSCert = "COBRE_TCP_TLS_CERT"
	EnvTLSKey  = "COBRE_TCP_TLS_KEY"
	EnvTLSCA   = "COBRE_TCP_TLS_CA"
	// EnvErrorFile names the file where this rank records its first
	// failure for its launcher (Config.ErrorFile).
	EnvErrorFile = errfile.Env
	// EnvToken is the job's shared secret (Config.Token): rank 0 then
	// registers only workers that prove they hold it (see "Authentication"
	// in the README).
	EnvToken = "COBRE_TCP_TOKEN"
	// EnvTokenFile names a file that holds the token (Config.TokenFile),
	// so that the secret need not sit in the environment.
	EnvTokenFile = "COBRE_TCP_TOKEN_FILE"
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

// defaultPort is the spec's coordinator port (COBRE_TCP_PORT).
const defaultPort = 29500

// Config is everything the environment can set, as Go fields. Build one
// with DefaultConfig (then set fields) or ConfigFromEnv.
type Config struct {
	// Backend is auto, tcp, shm or local (COBRE_COMM_BACKEND, default
	// auto). Auto picks tcp when Coordinator is set, else shm when ShmName
	// is set, else tcp when Size > 1 or Rank > 0 (more than one rank: rank
	// 0 listens, a worker needs Coordinator), else local. Local is
	// single-rank: Size above 1 is an error.
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
	// RankFrom names the variables Rank and Size were read from when
	// COBRE_TCP_RANK was unset and a launcher's stood in for them
	// (launchers.go), such as "SLURM_PROCID, SLURM_NTASKS"; empty when they
	// came from COBRE_TCP_RANK and COBRE_TCP_SIZE or from Go. New names it
	// in start-up errors.
	RankFrom string
	// Timeout bounds every read and write of a collective and detects
	// crashed, hung and cut-off ranks (COBRE_TCP_TIMEOUT_SECS, default
	// star.DefaultConfig's, 60 s). At least 1 ms, the tcp transport's
	// least (the variable: 1 ms to a year).
	Timeout time.Duration
	// BindAddr is the address rank 0 listens on (COBRE_TCP_BIND_ADDR,
	// default tcp.DefaultConfig's, 0.0.0.0).
	BindAddr string
	// ConnectTimeout bounds start-up: a worker's retries to reach the
	// coordinator and rank 0's wait for every worker
	// (COBRE_TCP_CONNECT_TIMEOUT_MS, default star.DefaultConfig's, 30 s).
	ConnectTimeout time.Duration
	// ShmName names the shared-memory segment of the shm backend
	// (COBRE_SHM_NAME): letters, digits, '-' and '_', unique to the job.
	ShmName string
	// ShmTimeout is the shm backend's timeout: a rank that waits this long
	// for a peer that makes no progress declares it hung
	// (COBRE_SHM_TIMEOUT_SECS, default shm.DefaultTimeout, 60 s). At
	// least 1 ms, as Timeout (the variable: 1 ms to a year).
	ShmTimeout time.Duration
	// Spin is how long a rank polls its TCP links for a small frame before
	// it parks (COBRE_TCP_SPIN_US, default star.DefaultConfig's, 100 µs;
	// 0 turns polling off). See star.Config.Spin.
	Spin time.Duration
	// SpinMax is the most the spin grows to after polled waits that
	// parking cut short: after a wait of w up to SpinMax, a rank spins for
	// max(Spin, min(2w, SpinMax)) next time; after a longer one, or a
	// collective that moved a frame of more than 256 KiB, for Spin
	// (COBRE_TCP_SPIN_MAX_US, default star.DefaultConfig's, 1 ms; at or
	// below Spin, 0 included, the spin stays at Spin). See
	// star.Config.SpinMax.
	SpinMax time.Duration
	// BufferBytes is the size in bytes asked for as each TCP socket's send
	// and receive buffer (COBRE_TCP_BUFFER_BYTES, default
	// tcp.DefaultConfig's, 4 MiB; 0 leaves the system's default, with
	// autotuning). On Linux a side whose cap (net.core.wmem_max,
	// rmem_max) is below it is left to autotuning as well; see
	// tcp.Config.BufferSize.
	BufferBytes int
	// ErrorFile is the path of the file where this rank records its first
	// failure for its launcher (COBRE_ERROR_FILE; empty: no file), before
	// the failing call returns. The record is one line of JSON, written
	// under a temporary name and linked into place (it appears whole or
	// not at all), and never replaced (a rank's first failure wins):
	//
	//	{"time":"2026-11-28T04:24:27.38975664Z","rank":1,"size":3,"blamed":1,"op":"start-up","message":"comm: tcp backend initialization failed: ...","pid":26581}
	//
	// time (RFC 3339) is when the failure was returned to the program;
	// rank is the writing rank and size the communicator's size; blamed
	// is the rank at fault as this rank saw it (the Rank of its
	// comm.CollectiveFailedError), or -1 when unknown; op is the operation
	// that failed, a collective's name, "start-up" or "close"; message is
	// the error's text; pid is the writing process's id.
	ErrorFile string
	// Liveness is the control session's liveness timeout: a rank silent
	// this long (a frozen process, a dead host, a cut link) is declared
	// dead, however long Timeout is (COBRE_TCP_LIVENESS_SECS, default
	// star.DefaultConfig's, 10 s; 0 turns the control session off). Else
	// at least 10 ms: heartbeats go every tenth of it (the variable: 10 ms
	// to a year). See star.Config.Liveness.
	Liveness time.Duration
	// Log is the level of the library's log on standard error: off (the
	// default), error, warn, info or debug (COBRE_LOG). Logger, when set,
	// is used instead.
	Log string
	// Logger, if set, receives the library's log records (stall reports,
	// liveness events) instead of the standard error logger Log configures.
	Logger *slog.Logger
	// Debug is off (the default) or detail: every collective's arguments
	// are then compared across ranks, and a mismatch the wire cannot show
	// fails every rank, naming the one that differs (COBRE_DEBUG). See
	// star.Config.CheckCollectives.
	Debug string
	// Token is the job's shared secret, the same on every rank
	// (COBRE_TCP_TOKEN): rank 0 registers a worker, and accepts its control
	// session, only once it has answered a challenge with an HMAC keyed
	// with it. The token never crosses the wire, and prints as
	// [redacted]. Empty: no authentication. See star.Config.Token.
	Token star.Token
	// TokenFile is a file whose content, surrounding white space and a
	// leading UTF-8 byte-order mark removed, is the token (COBRE_TCP_TOKEN_FILE), read when the communicator
	// starts (and by ConfigFromEnv, which reports a file that cannot be
	// read or is empty). Token and TokenFile are not set together.
	TokenFile string
	// TLSCert, TLSKey and TLSCA are the PEM files of this rank's
	// certificate (chain), its private key and the CA that signs every
	// rank's certificate (COBRE_TCP_TLS_CERT, COBRE_TCP_TLS_KEY,
	// COBRE_TCP_TLS_CA). All three set: every connection of the tcp
	// backend is TLS 1.3 with mutual authentication (transport/mtls);
	// none: plain TCP. Rank 0's certificate must be valid for the name
	// workers dial (Coordinator). See the README's "TLS".
	TLSCert, TLSKey, TLSCA string
	// Listening, if set, is called on rank 0 with the port it listens on
	// (useful with Port 0) before it waits for workers.
	Listening func(port int)
}

// DefaultConfig returns the defaults: backend auto, port 29500, rank 0 of
// size 1, no error file, and the timeouts, spin, bind address and socket
// buffer size of star.DefaultConfig and tcp.DefaultConfig (timeout 60 s,
// connect timeout 30 s, spin 100 µs growing to at most 1 ms, bind
// address 0.0.0.0, 4 MiB), and
// shm's timeout (60 s).
func DefaultConfig() Config {
	sc, tc := star.DefaultConfig(), tcp.DefaultConfig()
	return Config{
		Backend:        BackendAuto,
		Port:           defaultPort,
		Size:           1,
		Timeout:        sc.Timeout,
		BindAddr:       tc.BindAddr,
		ConnectTimeout: sc.ConnectTimeout,
		ShmTimeout:     shm.DefaultTimeout,
		Spin:           sc.Spin,
		SpinMax:        sc.SpinMax,
		BufferBytes:    tc.BufferSize,
		Liveness:       sc.Liveness,
		Log:            LogOff,
		Debug:          DebugOff,
	}
}

// Values of COBRE_LOG and COBRE_DEBUG.
const (
	LogOff      = "off"
	DebugOff    = "off"
	DebugDetail = "detail"
)

// logLevels maps COBRE_LOG's values to slog levels.
var logLevels = map[string]slog.Level{"error": slog.LevelError, "warn": slog.LevelWarn, "info": slog.LevelInfo, "debug": slog.LevelDebug}

// logger returns the Logger c configures, or nil when logging is off.
func (c Config) logger() *slog.Logger {
	if c.Logger != nil {
		return c.Logger
	}
	level, ok := logLevels[strings.ToLower(c.Log)]
	if !ok {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// InvalidConfigurationError reports a configuration value that is set but
// not allowed. Var is the environment variable (or the Config field, for a
// Config built in Go), Value the rejected value, Allowed what is allowed.
type InvalidConfigurationError struct {
	Var     string
	Value   string
	Allowed string
}

// Error names the variable, its value and what it allows.
func (e *InvalidConfigurationError) Error() string {
	return fmt.Sprintf("starcomm: invalid %s=%q: %s", e.Var, e.Value, e.Allowed)
}

// UnknownVariableError reports an environment variable whose name starts
// with COBRE_ (or is a known name in other letter case) but that starcomm
// does not know: most often a misspelt one, which would otherwise be
// silently ignored. Suggestion is the closest known name, or "" when none
// is close. The variable's value is not reported (it may be a secret).
//
// Service is set instead when the variable is one Kubernetes puts in a
// pod's environment for a Service of its namespace whose name starts with
// "cobre" (COBRE_SERVICE_HOST, COBRE_PORT=tcp://..., COBRE_PORT_80_TCP_ADDR
// and the like for a Service named "cobre"): that Service's name.
type UnknownVariableError struct {
	Var        string
	Suggestion string
	Service    string
}

// Error names the variable and the known one it most resembles, or
// lists the known ones; for a Kubernetes Service's variable, it says so.
func (e *UnknownVariableError) Error() string {
	if e.Service != "" {
		return fmt.Sprintf("starcomm: unknown variable %s: Kubernetes sets it for the Service %q of the pod's namespace; set enableServiceLinks: false in the pod's spec, or give the Service a name that does not start with \"cobre\"", e.Var, e.Service)
	}
	if e.Suggestion != "" {
		return fmt.Sprintf("starcomm: unknown variable %s: did you mean %s?", e.Var, e.Suggestion)
	}
	return fmt.Sprintf("starcomm: unknown variable %s: not a starcomm variable (known: %s)", e.Var, strings.Join(knownNames(), ", "))
}

// SelectedBackend returns the backend c selects, in lower case: its
// Backend, or for auto (or "") the backend the other fields call for (see
// Config.Backend): tcp for a rank 0 of several ranks, which sets no
// Coordinator, too. It does not validate c.
func (c Config) SelectedBackend() string { return c.resolve() }

// resolve returns the backend c selects: its Backend, or for auto the
// backend the other fields call for (see Config.Backend).
func (c Config) resolve() string {
	b := strings.ToLower(strings.TrimSpace(c.Backend))
	if b != "" && b != BackendAuto {
		return b
	}
	switch {
	case c.Coordinator != "":
		return BackendTCP
	case c.ShmName != "":
		return BackendShm
	case c.Size > 1 || c.Rank > 0:
		// More than one rank is never silently run as one.
		return BackendTCP
	default:
		return BackendLocal
	}
}

// Validate checks c for the backend it selects (see Config.Backend) with
// the rules ConfigFromEnv applies to the variables, and returns every
// problem: a *comm.InvalidBackendError for an unknown backend, else one
// *InvalidConfigurationError per problem naming the Config field (joined
// with errors.Join when there are several). Auto with Size > 1 and no
// Coordinator selects tcp: fine on Rank 0, an error naming Coordinator on
// a worker. Local with Size > 1 is an error naming Size.
func (c Config) Validate() error {
	b := c.resolve()
	if !slices.Contains(Backends, b) {
		return invalidBackend(c.Backend, "Backend")
	}
	var errs []error
	failed := map[string]bool{}
	bad := func(v *variable, allowed string) {
		failed[v.name] = true
		errs = append(errs, &InvalidConfigurationError{Var: v.field, Value: shownValue(v.name, v.goValue(c)), Allowed: allowed})
	}
	for i := range variables {
		v := &variables[i]
		if v.check == nil || !v.readBy(b) {
			continue
		}
		if allowed := v.check(b, c); allowed != "" {
			bad(v, allowed)
		}
	}
	for _, p := range c.rankRules(b, fieldName) {
		if !slices.ContainsFunc(p.involves, func(n string) bool { return failed[n] }) {
			bad(lookupVariable(p.name), p.allowed)
		}
	}
	rank := rankGood
	if failed[EnvRank] {
		rank = rankBad
	}
	for i := range variables {
		v := &variables[i]
		if v.need != nil && v.need.when(b, c, rank) && v.show(c) == "" {
			errs = append(errs, &InvalidConfigurationError{Var: v.field, Value: "", Allowed: v.need.why})
		}
	}
	return joinErrors(errs)
}

// invalidBackend is the error of an unknown backend name, from where (a
// variable or a Config field).
func invalidBackend(name, where string) error {
	return &comm.InvalidBackendError{Name: name, Available: Backends, Var: where}
}

// joinErrors returns nil, the one error, or errors.Join of several, so
// that a single error can also be type-asserted.
func joinErrors(errs []error) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	return errors.Join(errs...)
}

// ConfigFromEnv reads the COBRE_* variables from the process environment
// (os.Environ). See ConfigFromEnviron.
func ConfigFromEnv() (Config, error) { return ConfigFromEnviron(os.Environ()) }

// ConfigFromEnviron reads the COBRE_* variables from environ, a list of
// "NAME=value" entries as os.Environ returns (a later entry for the same
// name wins, as in os/exec). It returns what ConfigFromLookup returns, and
// also one *UnknownVariableError for each variable that is named COBRE_*
// (or spelt like a known one in other letter case), set to a non-blank
// value and not one starcomm knows, whatever the backend; all errors are
// joined with errors.Join, unknown variables first.
func ConfigFromEnviron(environ []string) (Config, error) {
	vars := map[string]string{}
	for _, kv := range environ {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			continue
		}
		vars[name] = value
	}
	var unknown []error
	for _, name := range slices.Sorted(maps.Keys(vars)) {
		if strings.TrimSpace(vars[name]) == "" || lookupVariable(name) != nil || !looksOurs(name) {
			continue
		}
		if svc := serviceLink(name, vars[name]); svc != "" {
			unknown = append(unknown, &UnknownVariableError{Var: name, Service: svc})
			continue
		}
		unknown = append(unknown, &UnknownVariableError{Var: name, Suggestion: suggest(name)})
	}
	c, errs := configFromVars(func(name string) (string, bool) { v, ok := vars[name]; return v, ok })
	return c, joinErrors(append(unknown, errs...))
}

// Kubernetes's variables for a Service (enableServiceLinks, on by
// default): SVC_SERVICE_HOST, SVC_SERVICE_PORT, SVC_SERVICE_PORT_NAME,
// SVC_PORT_80_TCP and its _PROTO, _PORT and _ADDR; and SVC_PORT, whose
// value is then a URL such as tcp://10.96.0.12:80.
var (
	serviceLinkName = regexp.MustCompile(`^(COBRE(?:_[A-Z0-9_]*?)?)_(?:SERVICE_HOST|SERVICE_PORT(?:_[A-Z0-9_]+)?|PORT_[0-9]+_(?:TCP|UDP|SCTP)(?:_PROTO|_PORT|_ADDR)?)$`)
	servicePortName = regexp.MustCompile(`^(COBRE(?:_[A-Z0-9_]+)?)_PORT$`)
	servicePortURL  = regexp.MustCompile(`^(?:tcp|udp|sctp)://[^/]+:[0-9]+$`)
)

// serviceLink returns the name of the Kubernetes Service whose variable
// name=value looks like, or "".
func serviceLink(name, value string) string {
	m := serviceLinkName.FindStringSubmatch(name)
	if m == nil {
		if m = servicePortName.FindStringSubmatch(name); m == nil || !servicePortURL.MatchString(value) {
			return ""
		}
	}
	return strings.ReplaceAll(strings.ToLower(m[1]), "_", "-")
}

// ConfigFromLookup reads the COBRE_* variables through lookup (for
// instance os.LookupEnv). A variable set to blanks counts as unset. It
// returns a *comm.InvalidBackendError for an unknown backend, a
// *comm.MissingConfigurationError listing every required variable that is
// unset, and an *InvalidConfigurationError for each variable whose value
// is not allowed (several errors joined with errors.Join). Only the
// variables the selected backend reads are checked. Lookup cannot list the
// variables that are set, so misspelt ones are not reported: use
// ConfigFromEnv or ConfigFromEnviron for that.
func ConfigFromLookup(lookup func(string) (string, bool)) (Config, error) {
	c, errs := configFromVars(lookup)
	return c, joinErrors(errs)
}

// configFromVars parses the table's variables through lookup and applies
// the rules of the backend they select.
func configFromVars(lookup func(string) (string, bool)) (Config, []error) {
	c := DefaultConfig()
	lookup, src, err := fromLaunchers(lookup)
	if err != nil {
		return c, []error{err}
	}
	c.RankFrom = src.from()
	values := map[string]string{} // the non-blank variables, trimmed
	bad := map[string]error{}     // their parse errors
	for i := range variables {
		v := &variables[i]
		s, set := lookup(v.name)
		if s = strings.TrimSpace(s); s == "" {
			if set && v.setBlank != "" {
				bad[v.name] = &InvalidConfigurationError{Var: src.name(v.name), Allowed: v.setBlank}
			}
			continue
		}
		values[v.name] = s
		if err := v.parse(&c, s); err != nil {
			var na notAllowed
			if errors.As(err, &na) {
				err = &InvalidConfigurationError{Var: src.name(v.name), Value: shownValue(v.name, s), Allowed: src.rename(string(na)) + src.note(v.name)}
			}
			bad[v.name] = err
		}
	}
	if err := bad[EnvBackend]; err != nil {
		return c, []error{err}
	}
	b := c.resolve()
	var invalid []error
	for i := range variables {
		if v := &variables[i]; bad[v.name] != nil && v.readBy(b) {
			invalid = append(invalid, bad[v.name])
		}
	}
	for _, p := range c.rankRules(b, src.name) {
		if slices.ContainsFunc(p.involves, func(n string) bool { _, set := values[n]; return !set || bad[n] != nil }) {
			continue
		}
		bad[p.name] = &InvalidConfigurationError{Var: src.name(p.name), Value: shownValue(p.name, values[p.name]), Allowed: p.allowed + src.note(p.name)}
		invalid = append(invalid, bad[p.name])
	}
	rank := rankGood
	if _, set := values[EnvRank]; !set {
		rank = rankUnset
	} else if bad[EnvRank] != nil {
		rank = rankBad
	}
	if _, sizeSet := values[EnvSize]; rank == rankGood && !sizeSet && b == BackendLocal && c.resolve() != strings.ToLower(strings.TrimSpace(c.Backend)) {
		// COBRE_TCP_RANK=0 alone: a rank of a job whose size was
		// forgotten, not a job of one (under auto, which would run it
		// alone, while its workers fail).
		invalid = append(invalid, &InvalidConfigurationError{Var: src.name(EnvRank), Value: values[EnvRank],
			Allowed: fmt.Sprintf("is set without %s: give the job's size on every rank (%s=1 runs this rank alone)", src.name(EnvSize), src.name(EnvSize))})
	}
	var missing []string
	for i := range variables {
		v := &variables[i]
		if _, set := values[v.name]; !set && v.need != nil && v.need.when(b, c, rank) {
			missing = append(missing, v.name)
		}
	}
	var errs []error
	if len(missing) > 0 {
		errs = append(errs, &comm.MissingConfigurationError{Backend: b, MissingVars: missing})
	}
	return c, append(errs, invalid...)
}

// rankProblem is a rule that ties several variables together, broken.
type rankProblem struct {
	name     string   // the variable at fault
	allowed  string   // what is allowed
	involves []string // the variables the rule reads
}

// rankRules checks the rules that tie Rank, Size and Backend together
// (and, for tcp, Token and TokenFile), the TLS files' all-or-none rule,
// and Debug's need of the control session (Liveness), for backend b; name
// writes a variable's name as the error shows it.
func (c Config) rankRules(b string, name func(string) string) []rankProblem {
	var ps []rankProblem
	if b == BackendTCP && len(c.Token) > 0 && c.TokenFile != "" {
		// Whether the file can be read or not: both are set.
		ps = append(ps, rankProblem{EnvTokenFile, fmt.Sprintf("%s is set too: give the token in %s or in %s, not both", name(EnvToken), name(EnvToken), name(EnvTokenFile)), []string{EnvToken}})
	}
	if most := map[string]int{BackendTCP: star.MaxSize, BackendShm: shm.MaxSize}[b]; most > 0 && c.Size > most {
		ps = append(ps, rankProblem{EnvSize, fmt.Sprintf("must be at most %d with the %s backend", most, b), []string{EnvSize}})
	}
	switch b {
	case BackendTCP, BackendShm:
		if c.Rank >= c.Size {
			ps = append(ps, rankProblem{EnvRank, fmt.Sprintf("must be < %s (%d): ranks are 0..%d", name(EnvSize), c.Size, c.Size-1), []string{EnvRank, EnvSize}})
		}
	case BackendLocal:
		if c.Size > 1 {
			ps = append(ps, rankProblem{EnvSize, fmt.Sprintf("the local backend is single-rank: must be 1 (%s=%s runs several ranks)", name(EnvBackend), BackendTCP), []string{EnvSize}})
		}
		if c.Rank != 0 {
			ps = append(ps, rankProblem{EnvRank, "the local backend is single-rank: must be 0", []string{EnvRank}})
		}
	}
	if b == BackendTCP {
		ps = append(ps, c.tlsRules(name)...)
		if strings.EqualFold(c.Debug, DebugDetail) && c.Liveness == 0 {
			// The collective check runs over the control session.
			ps = append(ps, rankProblem{EnvDebug, fmt.Sprintf("%s needs the control session, which %s=0 turns off: set %s above 0, or %s to %s", DebugDetail, name(EnvLivenessSecs), name(EnvLivenessSecs), name(EnvDebug), DebugOff), []string{EnvDebug, EnvLivenessSecs}})
		}
	}
	return ps
}

// fieldName writes a variable's name as Validate's errors show it.
func fieldName(name string) string { return lookupVariable(name).field }

// goValue writes v's Config field as Validate's errors show it.
func (v *variable) goValue(c Config) string {
	return fmt.Sprint(reflect.ValueOf(c).FieldByName(v.field).Interface())
}
