// Package ranks holds what the two commands that start local rank processes
// (cmd/starrun and cmd/starbench) share: each rank's environment, the
// process attributes that keep a rank and its children in one process group,
// and a writer that keeps the ranks' output lines whole.
package ranks

import (
	"fmt"
	"io"
	"strings"
	"sync"
)

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

// SyncWriter serializes writes to W: every Write reaches W whole and alone,
// so lines written with one Write never interleave. The zero value with W
// set is ready to use.
type SyncWriter struct {
	mu sync.Mutex
	W  io.Writer
}

// Write writes p to W while holding the lock.
func (s *SyncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.W.Write(p)
}

// Printf writes one formatted line (a newline is appended) with one Write.
func (s *SyncWriter) Printf(format string, args ...any) {
	fmt.Fprintf(s, format+"\n", args...)
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
