package launch

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/starcomm/starcomm/internal/errfile"
)

// Coordinator is the address rank 0 listens on unless told otherwise
// (Config.Bind), and that workers dial: the ranks of a job all run on this
// host.
const Coordinator = "127.0.0.1"

// DialHost is the address workers dial (COBRE_TCP_COORDINATOR) to reach
// rank 0 listening on bind: bind itself, its IPv6 brackets removed, or
// the loopback address of the family for an unspecified one (0.0.0.0:
// 127.0.0.1; "::": ::1).
func DialHost(bind string) string {
	host := strings.TrimSuffix(strings.TrimPrefix(bind, "["), "]")
	if ip, err := netip.ParseAddr(host); err == nil && ip.IsUnspecified() {
		if ip.Is4() {
			return Coordinator
		}
		return "::1"
	}
	return host
}

// bindAddr is the address rank 0 of the job cfg describes listens on:
// cfg.Bind, else COBRE_TCP_BIND_ADDR in base, else Coordinator.
func bindAddr(base []string, cfg *Config) string {
	if cfg.Bind != "" {
		return cfg.Bind
	}
	if b := lookupEnv(base, "COBRE_TCP_BIND_ADDR"); b != "" {
		return b
	}
	return Coordinator
}

// lookupEnv returns the trimmed value of key in env ("KEY=value"
// entries, the last one winning), or "".
func lookupEnv(env []string, key string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == key {
			v = strings.TrimSpace(val)
		}
	}
	return v
}

// rankEnv returns the environment of rank r of the job cfg describes, with
// rank 0 on port (tcp) or the segment cfg.ShmName (shm) and the rank's
// error file in errDir: base without the variables the launcher sets,
// followed by them. Unless base sets GOMAXPROCS, each rank gets
// GOMAXPROCS = max(1, CPUs / ranks).
func rankEnv(base []string, cfg *Config, port, r int, errDir string) []string {
	var set []string
	timeout := ""
	if cfg.Timeout > 0 {
		timeout = strconv.FormatFloat(cfg.Timeout, 'f', -1, 64)
	}
	if cfg.Backend == BackendShm {
		set = []string{
			"COBRE_COMM_BACKEND=shm",
			"COBRE_SHM_NAME=" + cfg.ShmName,
			"COBRE_TCP_RANK=" + strconv.Itoa(r),
			"COBRE_TCP_SIZE=" + strconv.Itoa(cfg.Ranks),
		}
		if timeout != "" {
			set = append(set, "COBRE_SHM_TIMEOUT_SECS="+timeout)
		}
	} else {
		bind := bindAddr(base, cfg)
		set = []string{
			"COBRE_COMM_BACKEND=tcp",
			"COBRE_TCP_BIND_ADDR=" + bind,
			"COBRE_TCP_COORDINATOR=" + DialHost(bind),
			"COBRE_TCP_PORT=" + strconv.Itoa(port),
			"COBRE_TCP_RANK=" + strconv.Itoa(r),
			"COBRE_TCP_SIZE=" + strconv.Itoa(cfg.Ranks),
		}
		if timeout != "" {
			set = append(set, "COBRE_TCP_TIMEOUT_SECS="+timeout)
		}
	}
	set = append(set, errfile.Env+"="+errorFile(errDir, r))
	if kv, ok := GoMaxProcs(base, cfg.Ranks, runtime.NumCPU()); ok {
		set = append(set, kv)
	}
	return Env(base, set...)
}

// errorFile is the path of rank r's error record in the job's directory dir.
func errorFile(dir string, r int) string {
	return filepath.Join(dir, "rank-"+strconv.Itoa(r)+".json")
}

// Env returns base with every variable that set assigns removed, followed by
// set: a child's environment with the launcher's variables replacing any
// inherited value. Entries are "KEY=value".
func Env(base []string, set ...string) []string {
	replaced := make(map[string]bool, len(set))
	for _, kv := range set {
		key, _, _ := strings.Cut(kv, "=")
		replaced[key] = true
	}
	env := make([]string, 0, len(base)+len(set))
	for _, kv := range base {
		if key, _, _ := strings.Cut(kv, "="); !replaced[key] {
			env = append(env, kv)
		}
	}
	return append(env, set...)
}

// GoMaxProcs returns the GOMAXPROCS setting for each of n ranks started on a
// host with cpus CPUs, "GOMAXPROCS=k" with k = max(1, cpus/n), and true; or
// false when base (the launcher's environment) sets GOMAXPROCS already,
// which is then left to the ranks as it is.
//
// Like torchrun's OMP_NUM_THREADS=1, this keeps ranks from oversubscribing
// the host: each Go process otherwise runs up to one thread per CPU, and
// with more ranks than cores their schedulers fight over the cores while a
// collective waits (measured, 4 ranks on 2 cores over TCP: barrier 60-100
// µs with GOMAXPROCS=2, 17-21 µs with 1).
func GoMaxProcs(base []string, n, cpus int) (string, bool) {
	for _, kv := range base {
		if key, _, _ := strings.Cut(kv, "="); key == "GOMAXPROCS" {
			return "", false
		}
	}
	return fmt.Sprintf("GOMAXPROCS=%d", max(1, cpus/max(n, 1))), true
}
