package starcomm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/starcomm/starcomm/internal/filekind"
	"github.com/starcomm/starcomm/shm"
	"github.com/starcomm/starcomm/star"
	"github.com/starcomm/starcomm/transport/tcp"
)

// variables is the table of the COBRE_* variables: one row per variable,
// in the order the README lists them. ConfigFromLookup, ConfigFromEnviron
// and Config.Validate walk it; it also names the known variables for the
// unknown-variable check and its suggestions, and writes the README's
// configuration table (configMarkdown). Adding a variable is adding a
// Config field and a row here.
var variables = []variable{
	{name: EnvBackend, field: "Backend", codec: backendName,
		meaning: "`auto`, `tcp`, `shm` or `local`. `auto` picks `tcp` when `COBRE_TCP_COORDINATOR` is set, else `shm` when `COBRE_SHM_NAME` is set, else `tcp` when `COBRE_TCP_SIZE` > 1 or `COBRE_TCP_RANK` > 0 (more than one rank is never run as one: rank 0 listens, a worker without `COBRE_TCP_COORDINATOR` is an error; `COBRE_TCP_RANK` without `COBRE_TCP_SIZE` is an error), else `local`. `local` is single-rank: a size above 1 is an error"},
	{name: EnvCoordinator, field: "Coordinator", reads: tcpOnly, need: requiredOnWorkers, check: hostOK(func(c Config) string { return c.Coordinator }), codec: hostText(func(c *Config) *string { return &c.Coordinator }),
		meaning: "host name or IP address of rank 0, without a port (an IPv6 address with or without brackets), which workers dial; a name that does not resolve yet is retried until the connect timeout. Rank 0 never dials it (it only checks its form when set)"},
	{name: EnvPort, field: "Port", reads: tcpOnly, check: portInRange, codec: whole(1, 65535, "must be a TCP port in 1..65535", func(c *Config) *int { return &c.Port }),
		meaning: "rank 0's TCP port, 1..65535, the same on every rank"},
	{name: EnvRank, field: "Rank", reads: ranked, need: requiredByRanked, check: rule(func(c Config) bool { return c.Rank >= 0 }, "must be >= 0"), codec: whole(0, math.MaxInt32, "must be an integer >= 0 and < "+EnvSize, func(c *Config) *int { return &c.Rank }),
		meaning: "this process's rank, 0..size-1; 0 is the coordinator (`tcp`) or the leader of shared-memory regions (`shm`). Unset: the rank and size of the launcher that started the process (`OMPI_COMM_WORLD_RANK`, `SLURM_PROCID`, `JOB_COMPLETION_INDEX`; see \"Rank and size from Slurm, Kubernetes or mpirun\")"},
	{name: EnvSize, field: "Size", reads: ranked, need: requiredByRanked, check: sizeAtLeast1, codec: whole(1, math.MaxInt32, fmt.Sprintf("must be an integer >= 1 (at most %d with the tcp backend, %d with shm)", star.MaxSize, shm.MaxSize), func(c *Config) *int { return &c.Size }),
		meaning: "number of ranks, >= 1, the same on every rank; at most 1048576 (`tcp`) or 32768 (`shm`)"},
	{name: EnvTimeoutSecs, field: "Timeout", reads: tcpOnly, check: atLeast(func(c Config) time.Duration { return c.Timeout }, minTimeout), codec: seconds(minTimeout, func(c *Config) *time.Duration { return &c.Timeout }),
		meaning: "timeout of collectives, in seconds (decimals allowed, 0.001..31536000: 1 ms to a year): a read or write, polled or not, that makes no progress this long declares the peer failed. A worker's `Close` waits for rank 0's Shutdown at most this timeout T plus min(T/2, 500 ms), and then up to a twentieth of that sum (at most 250 ms) more (2.63 s for 2 s, 1.58 s for 1 s); less when its control session finds rank 0 unresponsive or gone first. Also TCP_USER_TIMEOUT (capped at its 24.8-day maximum)"},
	{name: EnvBindAddr, field: "BindAddr", reads: tcpOnly, check: hostOK(func(c Config) string { return c.BindAddr }), codec: hostText(func(c *Config) *string { return &c.BindAddr }),
		meaning: "address rank 0 listens on, without a port: `0.0.0.0` for every IPv4 interface, `::` for every interface, or one of its addresses (IPv4 or IPv6) to accept connections through that interface only"},
	{name: EnvConnectTimeoutMS, field: "ConnectTimeout", reads: tcpAndShm, check: rule(func(c Config) bool { return c.ConnectTimeout > 0 }, "must be positive"), codec: wholeDuration(time.Millisecond, 1, math.MaxInt32, "must be a whole number of milliseconds in 1..2147483647", func(c *Config) *time.Duration { return &c.ConnectTimeout }),
		meaning: "start-up bound (1..2147483647): rank 0's wait for every worker, and a worker's connect retries; rank 0 answers every worker at once when all have joined (or names the missing rank), so a worker waits for that answer up to this long after it registered (plus min(half of it, 500 ms)). `shm`: how long a rank waits for every rank to join the segment"},
	{name: EnvShmName, field: "ShmName", reads: shmOnly, need: requiredByShm, check: shmNameOK, codec: shmName,
		meaning: "selects the shm backend under `auto`, and names its segment, `/dev/shm/starcomm-NAME`: letters, digits, `-` and `_`, at most 200; every rank of a job gives the same name, and no two live jobs may (a second one is refused). Rank and size come from `COBRE_TCP_RANK` and `COBRE_TCP_SIZE`. See \"The shm backend\""},
	{name: EnvShmTimeoutSecs, field: "ShmTimeout", reads: shmOnly, check: atLeast(func(c Config) time.Duration { return c.ShmTimeout }, minTimeout), codec: seconds(minTimeout, func(c *Config) *time.Duration { return &c.ShmTimeout }),
		meaning: "the shm backend's timeout, in seconds (decimals allowed, 0.001..31536000: 1 ms to a year): a rank that waits this long for a peer whose progress does not move declares the least advanced peer hung; a dead process is noticed at once, without it"},
	{name: EnvSpinUS, field: "Spin", reads: tcpOnly, check: rule(func(c Config) bool { return c.Spin >= 0 }, "must be zero (no polling) or positive"), codec: wholeDuration(time.Microsecond, 0, 1_000_000, "must be a number of microseconds in 0..1000000 (0: no polling)", func(c *Config) *time.Duration { return &c.Spin }),
		meaning: "starcomm's addition: microseconds a rank polls its TCP links for a small frame (payload <= 256 KiB) before it parks, 0..1000000; 0 turns polling off. The least spin: it grows up to `COBRE_TCP_SPIN_MAX_US` after waits that parking cut short. See \"Performance\""},
	{name: EnvSpinMaxUS, field: "SpinMax", reads: tcpOnly, check: rule(func(c Config) bool { return c.SpinMax >= 0 }, "must be zero (a fixed spin) or positive"), codec: wholeDuration(time.Microsecond, 0, 1_000_000, "must be a number of microseconds in 0..1000000 (0: the spin stays at "+EnvSpinUS+")", func(c *Config) *time.Duration { return &c.SpinMax }),
		meaning: "starcomm's addition: the most, in microseconds (0..1000000), the spin grows to. After a polled wait of w microseconds up to this, a rank polls for max(`COBRE_TCP_SPIN_US`, min(2w, this)) next time, and after a longer wait (a peer that computes), or a collective that moved a frame of more than 256 KiB (the copies bound those), for `COBRE_TCP_SPIN_US` again: where a collective's round outlasts the spin (more ranks than cores, slow wake-ups), ranks keep polling through it instead of parking; a rank that waits for a late peer burns at most this much CPU per collective. At or below `COBRE_TCP_SPIN_US` (0 included) the spin stays at `COBRE_TCP_SPIN_US`. See \"Performance\""},
	{name: EnvBufferBytes, field: "BufferBytes", reads: tcpOnly, check: rule(func(c Config) bool { return c.BufferBytes >= 0 && c.BufferBytes <= math.MaxInt32 }, fmt.Sprintf("must be 0 (the system's default) or a number of bytes up to %d", math.MaxInt32)), codec: whole(0, math.MaxInt32, fmt.Sprintf("must be a whole number of bytes in 0..%d (0: the system's default, with autotuning)", math.MaxInt32), func(c *Config) *int { return &c.BufferBytes }),
		meaning: "starcomm's addition: the size, in bytes, starcomm asks for as each TCP socket's send and receive buffer, 0..2147483647; 0 leaves the system's default, with its autotuning. On Linux a side whose cap (`net.core.wmem_max`, `net.core.rmem_max`; often 208 KiB) is below the size is left to autotuning too, which that cap does not bound and which is faster than a buffer held at the cap (see \"Performance\")"},
	{name: EnvLivenessSecs, field: "Liveness", reads: tcpOnly, check: livenessOK, codec: secondsOrOff(minLiveness, func(c *Config) *time.Duration { return &c.Liveness }),
		meaning: "starcomm's addition: the liveness timeout, in seconds (decimals allowed, 0.01..31536000: 10 ms to a year; 0 turns the control session off). Each worker keeps a control session (over smux) beside its data link, with heartbeats every tenth of this; a rank silent this long (a frozen process, a dead host, a cut link) is declared dead and every rank's current or next collective fails naming it, however long `COBRE_TCP_TIMEOUT_SECS` is. See \"Liveness and debugging\""},
	{name: EnvTLSCert, field: "TLSCert", reads: tcpOnly, codec: text(func(c *Config) *string { return &c.TLSCert }),
		meaning: "starcomm's addition: PEM file of this rank's certificate (chain). With `COBRE_TCP_TLS_KEY` and `COBRE_TCP_TLS_CA` (all three or none) every connection is TLS 1.3 with mutual authentication; rank 0's certificate must be valid for the name in `COBRE_TCP_COORDINATOR`. See \"TLS\""},
	{name: EnvTLSKey, field: "TLSKey", reads: tcpOnly, codec: text(func(c *Config) *string { return &c.TLSKey }),
		meaning: "starcomm's addition: PEM file of this rank's private key (unencrypted; keep it readable by the rank only)"},
	{name: EnvTLSCA, field: "TLSCA", reads: tcpOnly, codec: text(func(c *Config) *string { return &c.TLSCA }),
		meaning: "starcomm's addition: PEM file of the CA certificate(s) that sign every rank's certificate: rank 0 accepts only workers with a certificate the CA signed, and workers only such a rank 0"},
	{name: EnvLog, field: "Log", check: oneOf(func(c Config) string { return c.Log }, LogOff, "error", "warn", "info", "debug"), codec: choice([]string{LogOff, "error", "warn", "info", "debug"}, func(c *Config) *string { return &c.Log }),
		meaning: "starcomm's addition: the level of the library's log on standard error: `off`, `error`, `warn` (stall reports: what a waiting collective waits for), `info` or `debug` (control sessions). Only the `tcp` backend logs: the `shm` backend reports through its errors (and `COBRE_ERROR_FILE`)"},
	{name: EnvDebug, field: "Debug", reads: tcpOnly, check: oneOf(func(c Config) string { return c.Debug }, DebugOff, DebugDetail), codec: choice([]string{DebugOff, DebugDetail}, func(c *Config) *string { return &c.Debug }),
		meaning: "starcomm's addition: `detail` compares every rank's arguments to every collective (operation, element type, counts or length, root, reduce op) before its data, and fails every rank, naming the one that differs, on a mismatch the wire cannot show; it costs a message per rank per collective, and needs the control session (not with `COBRE_TCP_LIVENESS_SECS=0`). Only the `tcp` backend reads it (the `shm` backend compares every collective's arguments always)"},
	{name: EnvToken, field: "Token", reads: tcpOnly, codec: tokenText, setBlank: blankToken,
		meaning: "starcomm's addition: the job's shared secret, the same on every rank (surrounding white space ignored; set but blank is an error, not a way to turn authentication off; use a long random one, such as `openssl rand -hex 32`). Rank 0 then registers a worker, and accepts its control session, only once it has answered a challenge (a fresh random nonce) with an HMAC-SHA256 keyed with the token; the token never crosses the wire and never appears in a message or log. Every rank must then be starcomm and have the token. It authenticates ranks; it does not encrypt. See \"Authentication\""},
	{name: EnvTokenFile, field: "TokenFile", reads: tcpOnly, codec: tokenFile, setBlank: blankTokenFile,
		meaning: "starcomm's addition: a file whose content (surrounding white space and a leading UTF-8 byte-order mark ignored) is the token, so that the secret need not sit in the environment (a mounted secret: a link to a regular file is followed); a file that cannot be read, is not a regular file (a named pipe, a device, a directory), is empty or is over 64 KiB is an error, as is the variable set but blank. Not together with `COBRE_TCP_TOKEN`. Only the `tcp` backend reads either"},
	{name: EnvErrorFile, field: "ErrorFile", codec: text(func(c *Config) *string { return &c.ErrorFile }),
		meaning: "file where this rank records its first failure (one JSON record) for its launcher, which then names the root cause; unset: no file. The launchers set one per rank"},
}

// variable is one row of the table.
type variable struct {
	name  string // the environment variable
	field string // the Config field it sets
	// reads lists the backends that read the variable (the one selected,
	// auto resolved); nil means every backend. A variable a backend does
	// not read is neither checked nor required.
	reads []string
	// need, if set, says when the variable is required.
	need *requirement
	// check is Validate's test of the field on its own, for backend b:
	// what is allowed, or "" when the field is fine.
	check func(b string, c Config) string
	codec
	meaning string // the README's meaning column
	// setBlank, if not "", makes the variable set to blanks an error
	// saying this, where other variables count as unset: a token that a
	// script lost (COBRE_TCP_TOKEN=$UNSET) must not turn authentication
	// off unnoticed.
	setBlank string
}

// codec parses a variable's value into its Config field and writes the
// field back as the variable would be written.
type codec struct {
	// parse sets the field from a non-blank, trimmed value, or returns a
	// notAllowed saying what is allowed (or another error, returned as is).
	parse func(c *Config, v string) error
	// show writes the field as the variable's value; "" means unset. It
	// gives the README's default and tells Validate whether a required
	// field is set.
	show func(c Config) string
}

// notAllowed is a parse error: what the variable allows.
type notAllowed string

func (e notAllowed) Error() string { return string(e) }

// Which backends read a variable.
var (
	tcpOnly   = []string{BackendTCP}
	shmOnly   = []string{BackendShm}
	tcpAndShm = []string{BackendTCP, BackendShm}
	// ranked: local reads the rank and size too, to refuse more than one.
	ranked = []string{BackendTCP, BackendShm, BackendLocal}
)

func (v *variable) readBy(backend string) bool {
	return v.reads == nil || slices.Contains(v.reads, backend)
}

// rankState is what is known of the rank when requirements are decided.
type rankState int

const (
	rankGood  rankState = iota // set and valid
	rankUnset                  // not set (environment only)
	rankBad                    // set but not valid
)

// requirement says when a variable is required.
type requirement struct {
	doc  string // the README's default column
	why  string // Validate's Allowed, for a Go-built Config
	when func(b string, c Config, rank rankState) bool
}

var (
	requiredByRanked = &requirement{doc: "required (`tcp`, `shm`)", why: "required by the tcp and shm backends",
		when: func(b string, _ Config, _ rankState) bool { return b == BackendTCP || b == BackendShm }}
	requiredByShm = &requirement{doc: "required (`shm`)", why: "required by the shm backend: the segment's name",
		when: func(b string, _ Config, _ rankState) bool { return b == BackendShm }}
	// requiredOnWorkers: with the rank unset, say the coordinator is
	// needed unless this is known to be rank 0.
	requiredOnWorkers = &requirement{doc: "required on ranks > 0 (`tcp`)", why: "workers (rank > 0) need the coordinator's host",
		when: func(b string, c Config, rank rankState) bool {
			return b == BackendTCP && (rank == rankUnset || (rank == rankGood && c.Rank > 0))
		}}
)

// Codecs.

var backendName = codec{
	parse: func(c *Config, v string) error {
		c.Backend = strings.ToLower(v)
		if !slices.Contains(Backends, c.Backend) {
			return invalidBackend(c.Backend, EnvBackend)
		}
		return nil
	},
	show: func(c Config) string { return c.Backend },
}

// shmName is a segment name (shm.CheckName).
var shmName = codec{
	parse: func(c *Config, v string) error {
		c.ShmName = v
		if why := shm.CheckName(v); why != "" {
			return notAllowed(why)
		}
		return nil
	},
	show: func(c Config) string { return c.ShmName },
}

// shmNameOK is Validate's check of ShmName (set: a valid name).
func shmNameOK(_ string, c Config) string {
	if c.ShmName == "" {
		return ""
	}
	return shm.CheckName(c.ShmName)
}

// tokenText is a token given in the environment.
var tokenText = codec{
	parse: func(c *Config, v string) error { c.Token = star.Token(v); return nil },
	show:  func(c Config) string { return c.Token.String() },
}

// tokenFile is the path of a file holding the token: it must be readable
// and hold one.
var tokenFile = codec{
	parse: func(c *Config, v string) error {
		c.TokenFile = v
		if _, why := readTokenFile(v); why != "" {
			return notAllowed(why)
		}
		return nil
	},
	show: func(c Config) string { return c.TokenFile },
}

// NotShown stands for the value of COBRE_TCP_TOKEN_FILE in an
// InvalidConfigurationError when that value may be the token itself.
const NotShown = "(not shown: it may be the token)"

// shownValue is the value of variable name that an error may show: the
// value itself, except for a token file that does not exist and whose
// path does not start with '/', '.' or '~', which may be a token put in
// COBRE_TCP_TOKEN_FILE by mistake (NotShown).
func shownValue(name, v string) string {
	if name != EnvTokenFile || v == "" || strings.ContainsAny(v[:1], "/.~") {
		return v
	}
	if _, err := os.Lstat(v); err == nil || errors.Is(err, fs.ErrPermission) {
		return v // a path, whatever is wrong with the file
	}
	return NotShown
}

// maxTokenFile bounds what is read of a token file (a token is far
// shorter; a device such as /dev/zero would never end).
const maxTokenFile = 64 << 10

// readTokenFile returns the token in the file at path, surrounding white
// space and a leading UTF-8 byte-order mark removed, or why it has none.
// The token is never part of the reason.
func readTokenFile(path string) (star.Token, string) {
	f, err := openTokenFile(path)
	if err != nil {
		if shownValue(EnvTokenFile, path) == NotShown {
			// The error would show the path, which may be the token.
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			wd, _ := os.Getwd()
			return nil, fmt.Sprintf("cannot read the token file: %v (working directory %s); COBRE_TCP_TOKEN_FILE takes the path of a file that holds the token, COBRE_TCP_TOKEN the token", err, wd)
		}
		if errors.Is(err, fs.ErrPermission) {
			return nil, "cannot read the token file (this process's user may not read it): " + err.Error()
		}
		return nil, "cannot read the token file: " + err.Error()
	}
	defer f.Close()
	// Only a regular file (or a link to one, as a mounted secret is): a
	// pipe or a device could block, never end, or give another token to
	// each of the two reads (the configuration's check, then New).
	fi, err := f.Stat()
	if err != nil {
		return nil, "cannot read the token file: " + err.Error()
	}
	if what := filekind.NotRegular(fi.Mode()); what != "" {
		return nil, "the token file is " + what + ", not a regular file: give a file that holds the token"
	}
	b, err := io.ReadAll(io.LimitReader(f, maxTokenFile+1))
	switch {
	case err != nil:
		return nil, "cannot read the token file: " + err.Error()
	case len(b) > maxTokenFile:
		return nil, fmt.Sprintf("the token file is larger than %d KiB: not a token file", maxTokenFile>>10)
	}
	// A byte-order mark is what some Windows editors put first in a text
	// file: not part of the token, which the other ranks may take from
	// COBRE_TCP_TOKEN or from a file written without one.
	tok := bytes.TrimSpace(bytes.TrimPrefix(bytes.TrimSpace(b), []byte("\uFEFF")))
	if len(tok) == 0 {
		return nil, "the token file is empty: it must hold the job's token"
	}
	return star.Token(tok), ""
}

// token returns the token c gives: Token, or the content of TokenFile.
func (c Config) token() (star.Token, error) {
	if c.TokenFile == "" {
		return c.Token, nil
	}
	tok, why := readTokenFile(c.TokenFile)
	if why != "" {
		return nil, &InvalidConfigurationError{Var: lookupVariable(EnvTokenFile).field, Value: shownValue(EnvTokenFile, c.TokenFile), Allowed: why}
	}
	return tok, nil
}

// The errors of the token variables set to blanks.
const (
	blankToken     = "is set but blank: set it to the job's token, or unset it to run without authentication"
	blankTokenFile = "is set but blank: set it to the path of the file that holds the job's token, or unset it to run without authentication"
)

// hostText is a host name or IP address without a port (checkHost); the
// brackets of an IPv6 address are removed.
func hostText(f func(*Config) *string) codec {
	return codec{
		parse: func(c *Config, v string) error {
			host, why := checkHost(v)
			*f(c) = host
			if why != "" {
				return notAllowed(why)
			}
			return nil
		},
		show: func(c Config) string { return *f(&c) },
	}
}

// hostOK is Validate's check of a host field (set: checkHost).
func hostOK(get func(Config) string) func(string, Config) string {
	return func(_ string, c Config) string {
		if s := get(c); s != "" {
			_, why := checkHost(s)
			return why
		}
		return ""
	}
}

// checkHost returns s as a host to dial or bind, an IPv6 address's
// brackets removed, or what is wrong with it: a port (it is
// COBRE_TCP_PORT), a URL, a ':' that does not make an IPv6 address, or
// anything else that is not an IP address or a well-formed host name
// (tcp.CheckHost: what a worker's dial refuses, so that rank 0 refuses it
// too), or an IPv6 address whose zone names no network interface of this
// host. Names are not looked up here (a worker retries one that does not
// resolve yet).
func checkHost(s string) (string, string) {
	if inner, ok := strings.CutPrefix(s, "["); ok {
		inner, ok = strings.CutSuffix(inner, "]")
		if a, err := netip.ParseAddr(inner); ok && err == nil && a.Is6() {
			if err := tcp.CheckHost(inner); err != nil { // its zone
				return inner, "must be a host name or IP address: " + err.Error()
			}
			return inner, ""
		}
	}
	const port = "the port goes in " + EnvPort + " (Config.Port)"
	switch _, _, err := net.SplitHostPort(s); {
	case strings.Contains(s, "://"):
		return s, "must be a host name or IP address, not a URL; " + port
	case err == nil:
		return s, "must be a host name or IP address without a port; " + port
	case strings.HasPrefix(s, "["):
		return s, "brackets must enclose an IPv6 address, such as [::1]"
	case strings.Contains(s, ":"):
		if _, err := netip.ParseAddr(s); err != nil {
			return s, "is neither a host name (no ':') nor an IPv6 address (" + err.Error() + ")"
		}
		if err := tcp.CheckHost(s); err != nil { // its zone
			return s, "must be a host name or IP address: " + err.Error()
		}
	case strings.ContainsAny(s, " \t/\\"):
		return s, "is not a host name or IP address: it holds white space or a slash"
	default:
		if err := tcp.CheckHost(s); err != nil {
			return s, "must be a host name or IP address: " + err.Error()
		}
	}
	return s, ""
}

// bareHost is s without an IPv6 address's brackets (a Config built in Go
// may keep them; checkHost accepted it).
func bareHost(s string) string {
	h, _ := checkHost(s)
	return h
}

// text is any non-blank string.
func text(f func(*Config) *string) codec {
	return codec{
		parse: func(c *Config, v string) error { *f(c) = v; return nil },
		show:  func(c Config) string { return *f(&c) },
	}
}

// whole is an integer in lo..hi.
func whole(lo, hi int64, allowed string, f func(*Config) *int) codec {
	return codec{
		parse: func(c *Config, v string) error {
			n, err := parseWhole(v, lo, hi, allowed)
			if err == nil {
				*f(c) = int(n)
			}
			return err
		},
		show: func(c Config) string { return strconv.Itoa(*f(&c)) },
	}
}

// wholeDuration is an integer number of units in lo..hi.
func wholeDuration(unit time.Duration, lo, hi int64, allowed string, f func(*Config) *time.Duration) codec {
	return codec{
		parse: func(c *Config, v string) error {
			n, err := parseWhole(v, lo, hi, allowed)
			if err == nil {
				*f(c) = time.Duration(n) * unit
			}
			return err
		},
		show: func(c Config) string { return strconv.FormatInt(int64(*f(&c)/unit), 10) },
	}
}

// parseWhole parses an integer in lo..hi; allowed says what is allowed.
// An integer too large for int64 is out of range, not "not an integer".
func parseWhole(v string, lo, hi int64, allowed string) (int64, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	switch {
	case errors.Is(err, strconv.ErrRange):
		return 0, notAllowed(allowed)
	case err != nil:
		return 0, notAllowed("not an integer; " + allowed)
	case n < lo || n > hi:
		return 0, notAllowed(allowed)
	}
	return n, nil
}

// Bounds of the variables in seconds. The parser enforces both ends;
// Validate, for a Config built in Go, the lower ones, which are what the
// backends need.
const (
	// minTimeout is the least collective timeout (COBRE_TCP_TIMEOUT_SECS,
	// COBRE_SHM_TIMEOUT_SECS): the tcp transport's least Timeout, as
	// TCP_USER_TIMEOUT counts whole milliseconds (tcp.Config.Validate).
	// A shorter one would pass here and fail start-up, and one under a
	// nanosecond would become 0, which star and shm read as "the default".
	minTimeout = time.Millisecond
	// minLiveness is the least liveness timeout but 0 (off)
	// (COBRE_TCP_LIVENESS_SECS). Each end of a control session writes a
	// heartbeat every tenth of it, on a ticker that needs a positive
	// period; 10 ms keeps that period at 1 ms or more, and a shorter
	// timeout would declare dead a rank that a scheduling delay or a
	// garbage collection pause held up.
	minLiveness = 10 * time.Millisecond
	// maxDuration is the largest value of a variable in seconds: a year.
	maxDuration = 365 * 24 * time.Hour
)

// secondsRange writes the range lo..maxDuration in seconds, and in words:
// "0.001..31536000 (1 ms to a year)".
func secondsRange(lo time.Duration) string {
	return fmt.Sprintf("%s..%s (%d ms to a year)", formatSeconds(lo), formatSeconds(maxDuration), lo.Milliseconds())
}

// formatSeconds writes d as a number of seconds, as the variables take it.
func formatSeconds(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64)
}

// parseSeconds parses a number of seconds, decimals allowed, in
// lo..maxDuration, rounded to the nanosecond, or returns a notAllowed that
// says so (allowed, after "not a number; " for what is not one).
func parseSeconds(v string, lo time.Duration, allowed string) (time.Duration, error) {
	secs, err := strconv.ParseFloat(v, 64)
	switch {
	case (err != nil && !errors.Is(err, strconv.ErrRange)) || math.IsNaN(secs) || !plainDecimal(v):
		return 0, notAllowed("not a number; " + allowed)
	// Compared as seconds, before the conversion: a huge value does not
	// fit a Duration.
	case err != nil || secs < lo.Seconds() || secs > maxDuration.Seconds():
		return 0, notAllowed(allowed)
	}
	return time.Duration(math.Round(secs * float64(time.Second))), nil
}

// plainDecimal reports whether v is written as a decimal number
// (strconv.ParseFloat also takes Go's digit separators, 1_000, and
// hexadecimal floats, 0x1p4, which the integer variables refuse).
func plainDecimal(v string) bool { return !strings.ContainsAny(v, "_xXpP") }

// seconds is a number of seconds, decimals allowed, from lo to a year.
func seconds(lo time.Duration, f func(*Config) *time.Duration) codec {
	allowed := "must be a number of seconds in " + secondsRange(lo)
	return codec{
		parse: func(c *Config, v string) error {
			d, err := parseSeconds(v, lo, allowed)
			if err == nil {
				*f(c) = d
			}
			return err
		},
		show: func(c Config) string { return formatSeconds(*f(&c)) },
	}
}

// secondsOrOff is 0, for off, or a number of seconds, decimals allowed,
// from lo to a year.
func secondsOrOff(lo time.Duration, f func(*Config) *time.Duration) codec {
	allowed := "must be 0 (off) or a number of seconds in " + secondsRange(lo)
	return codec{
		parse: func(c *Config, v string) error {
			if secs, err := strconv.ParseFloat(v, 64); err == nil && secs == 0 && plainDecimal(v) {
				*f(c) = 0
				return nil
			}
			d, err := parseSeconds(v, lo, allowed)
			if err == nil {
				*f(c) = d
			}
			return err
		},
		show: func(c Config) string { return formatSeconds(*f(&c)) },
	}
}

// choice is one of values, in any letter case.
func choice(values []string, f func(*Config) *string) codec {
	return codec{
		parse: func(c *Config, v string) error {
			v = strings.ToLower(v)
			if !slices.Contains(values, v) {
				return notAllowed("must be one of " + strings.Join(values, ", "))
			}
			*f(c) = v
			return nil
		},
		show: func(c Config) string { return *f(&c) },
	}
}

// tlsRules: the TLS files are all set or none (a partial set would run
// without TLS by mistake, or fail later for a reason less plain).
func (c Config) tlsRules(name func(string) string) []rankProblem {
	files := []struct{ env, path string }{{EnvTLSCert, c.TLSCert}, {EnvTLSKey, c.TLSKey}, {EnvTLSCA, c.TLSCA}}
	var set, unset []string
	for _, f := range files {
		if strings.TrimSpace(f.path) != "" {
			set = append(set, f.env)
		} else {
			unset = append(unset, f.env)
		}
	}
	if len(set) == 0 || len(unset) == 0 {
		return nil
	}
	shown := make([]string, len(set))
	for i, n := range set {
		shown[i] = name(n)
	}
	verb := "are"
	if len(shown) == 1 {
		verb = "is"
	}
	var ps []rankProblem
	for _, n := range unset {
		ps = append(ps, rankProblem{n, fmt.Sprintf("missing: TLS needs %s, %s and %s (this rank's certificate, its key, and the CA that signs every rank's certificate), or none of them; only %s %s set",
			name(EnvTLSCert), name(EnvTLSKey), name(EnvTLSCA), strings.Join(shown, " and "), verb), set})
	}
	return ps
}

// Validate's checks of single fields.

// oneOf checks that a string field is empty (the default) or one of values.
func oneOf(field func(Config) string, values ...string) func(string, Config) string {
	return func(_ string, c Config) string {
		if v := strings.ToLower(field(c)); v != "" && !slices.Contains(values, v) {
			return "must be one of " + strings.Join(values, ", ")
		}
		return ""
	}
}

func portInRange(_ string, c Config) string {
	if c.Port < 0 || c.Port > 65535 || (c.Port == 0 && c.Rank != 0) {
		return "must be in 1..65535 (0 only on rank 0, to pick a free port)"
	}
	return ""
}

// sizeAtLeast1 lets local keep the zero Size of a Config literal (tcp and
// shm need it: a Size of 0 is named, not the Rank it leaves no room for).
func sizeAtLeast1(b string, c Config) string {
	if c.Size < 0 || (c.Size == 0 && b != BackendLocal) {
		return "must be at least 1"
	}
	return ""
}

// atLeast checks that a duration field is at least lo, the bound its
// variable's parser enforces (a Config built in Go has no upper bound).
func atLeast(field func(Config) time.Duration, lo time.Duration) func(string, Config) string {
	return func(_ string, c Config) string {
		if field(c) < lo {
			return "must be at least " + lo.String()
		}
		return ""
	}
}

// livenessOK: Liveness is 0 (off) or at least minLiveness.
func livenessOK(_ string, c Config) string {
	if c.Liveness != 0 && c.Liveness < minLiveness {
		return "must be 0 (off) or at least " + minLiveness.String()
	}
	return ""
}

// rule is a check that needs neither the backend nor other fields.
func rule(ok func(Config) bool, allowed string) func(string, Config) string {
	return func(_ string, c Config) string {
		if ok(c) {
			return ""
		}
		return allowed
	}
}

// knownNames returns the table's variable names, in its order.
func knownNames() []string {
	names := make([]string, len(variables))
	for i, v := range variables {
		names[i] = v.name
	}
	return names
}

// lookupVariable returns the table's row for name, or nil.
func lookupVariable(name string) *variable {
	for i := range variables {
		if variables[i].name == name {
			return &variables[i]
		}
	}
	return nil
}

// looksOurs reports whether an environment variable that is not in the
// table is meant for starcomm: its name starts with COBRE_, or it is a
// known name in other letter case.
func looksOurs(name string) bool {
	return strings.HasPrefix(name, "COBRE_") || slices.ContainsFunc(variables, func(v variable) bool { return strings.EqualFold(v.name, name) })
}

// suggest returns the known name closest to the unknown name, or "" when
// none is close: within an edit distance (insertions, deletions,
// substitutions and swaps of neighbours, ignoring letter case) of 2, or of
// a quarter of the known name's length; a name that is a known one without
// its middle word (COBRE_RANK for COBRE_TCP_RANK) counts as distance 1.
func suggest(name string) string {
	u := strings.ToUpper(name)
	best, bestDist := "", math.MaxInt
	for _, v := range variables {
		d := editDistance(u, v.name)
		if rest := strings.TrimPrefix(u, "COBRE_"); rest != u && rest != "" && strings.HasSuffix(v.name, "_"+rest) {
			d = min(d, 1)
		}
		if d < bestDist && d <= max(2, len(v.name)/4) {
			best, bestDist = v.name, d
		}
	}
	return best
}

// editDistance is the optimal string alignment distance between a and b:
// the fewest insertions, deletions, substitutions and swaps of adjacent
// bytes that turn a into b.
func editDistance(a, b string) int {
	// d[i][j] is the distance between a[:i] and b[:j]; three rows suffice.
	prev2, prev, cur := make([]int, len(b)+1), make([]int, len(b)+1), make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

// configMarkdown writes the README's configuration table from the table of
// variables: name, default (from DefaultConfig, or when it is required),
// meaning.
func configMarkdown() string {
	var b strings.Builder
	b.WriteString("| variable | default | meaning |\n|---|---|---|\n")
	d := DefaultConfig()
	for _, v := range variables {
		def := "unset"
		if v.need != nil {
			def = v.need.doc
		} else if s := v.show(d); s != "" {
			def = "`" + s + "`"
		}
		b.WriteString("| `" + v.name + "` | " + def + " | " + v.meaning + " |\n")
	}
	return b.String()
}
