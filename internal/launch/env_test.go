package launch

import (
	"fmt"
	"runtime"
	"slices"
	"testing"
)

func TestEnvReplacesInherited(t *testing.T) {
	t.Parallel()
	base := []string{"PATH=/bin", "COBRE_TCP_RANK=9", "HOME=/root", "COBRE_TCP_PORT=1"}
	got := Env(base, "COBRE_TCP_RANK=2", "COBRE_TCP_PORT=29500", "COBRE_TCP_SIZE=4")
	if want := []string{"PATH=/bin", "HOME=/root", "COBRE_TCP_RANK=2", "COBRE_TCP_PORT=29500", "COBRE_TCP_SIZE=4"}; !slices.Equal(got, want) {
		t.Errorf("Env = %q, want %q", got, want)
	}
	if got := Env(nil, "A=1"); !slices.Equal(got, []string{"A=1"}) {
		t.Errorf("Env(nil, A=1) = %q", got)
	}
}

func TestGoMaxProcs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		base    []string
		n, cpus int
		want    string
		wantSet bool
	}{
		{nil, 4, 2, "GOMAXPROCS=1", true},
		{nil, 2, 8, "GOMAXPROCS=4", true},
		{nil, 3, 8, "GOMAXPROCS=2", true},
		{nil, 1, 8, "GOMAXPROCS=8", true},
		{nil, 16, 8, "GOMAXPROCS=1", true},
		{[]string{"HOME=/root", "GOMAXPROCS=3"}, 4, 2, "", false},
		{[]string{"GOMAXPROCSX=3"}, 4, 2, "GOMAXPROCS=1", true},
	} {
		got, set := GoMaxProcs(tc.base, tc.n, tc.cpus)
		if got != tc.want || set != tc.wantSet {
			t.Errorf("GoMaxProcs(%q, n=%d, cpus=%d) = %q, %v; want %q, %v", tc.base, tc.n, tc.cpus, got, set, tc.want, tc.wantSet)
		}
	}
}

func TestRankEnv(t *testing.T) {
	t.Parallel()
	base := []string{"PATH=/bin", "COBRE_TCP_RANK=7", "COBRE_TCP_TIMEOUT_SECS=9", "COBRE_TCP_BIND_ADDR=1.2.3.4", "COBRE_ERROR_FILE=/elsewhere"}
	procs := fmt.Sprintf("GOMAXPROCS=%d", max(1, runtime.NumCPU()/3))
	tests := []struct {
		name string
		cfg  Config
		want []string
	}{
		{
			// The inherited bind address: workers dial it.
			name: "options=none", cfg: Config{Ranks: 3},
			want: []string{
				"PATH=/bin", "COBRE_TCP_TIMEOUT_SECS=9",
				"COBRE_COMM_BACKEND=tcp", "COBRE_TCP_BIND_ADDR=1.2.3.4", "COBRE_TCP_COORDINATOR=1.2.3.4", "COBRE_TCP_PORT=4242", "COBRE_TCP_RANK=1", "COBRE_TCP_SIZE=3",
				"COBRE_ERROR_FILE=/job/rank-1.json", procs,
			},
		},
		{
			name: "options=timeout,bind", cfg: Config{Ranks: 3, Timeout: 2.5, Bind: "0.0.0.0"},
			want: []string{
				"PATH=/bin",
				"COBRE_COMM_BACKEND=tcp", "COBRE_TCP_BIND_ADDR=0.0.0.0", "COBRE_TCP_COORDINATOR=127.0.0.1", "COBRE_TCP_PORT=4242", "COBRE_TCP_RANK=1", "COBRE_TCP_SIZE=3",
				"COBRE_TCP_TIMEOUT_SECS=2.5", "COBRE_ERROR_FILE=/job/rank-1.json", procs,
			},
		},
		{
			name: "options=whole-timeout,bind=[::1]", cfg: Config{Ranks: 3, Timeout: 7, Bind: "[::1]"},
			want: []string{
				"PATH=/bin",
				"COBRE_COMM_BACKEND=tcp", "COBRE_TCP_BIND_ADDR=[::1]", "COBRE_TCP_COORDINATOR=::1", "COBRE_TCP_PORT=4242", "COBRE_TCP_RANK=1", "COBRE_TCP_SIZE=3",
				"COBRE_TCP_TIMEOUT_SECS=7", "COBRE_ERROR_FILE=/job/rank-1.json", procs,
			},
		},
		{
			name: "options=longest-timeout,bind=::", cfg: Config{Ranks: 3, Timeout: 31536000, Bind: "::"},
			want: []string{
				"PATH=/bin",
				"COBRE_COMM_BACKEND=tcp", "COBRE_TCP_BIND_ADDR=::", "COBRE_TCP_COORDINATOR=::1", "COBRE_TCP_PORT=4242", "COBRE_TCP_RANK=1", "COBRE_TCP_SIZE=3",
				"COBRE_TCP_TIMEOUT_SECS=31536000", "COBRE_ERROR_FILE=/job/rank-1.json", procs,
			},
		},
		{
			name: "options=least-timeout,bind=10.0.0.5", cfg: Config{Ranks: 3, Timeout: 0.001, Bind: "10.0.0.5"},
			want: []string{
				"PATH=/bin",
				"COBRE_COMM_BACKEND=tcp", "COBRE_TCP_BIND_ADDR=10.0.0.5", "COBRE_TCP_COORDINATOR=10.0.0.5", "COBRE_TCP_PORT=4242", "COBRE_TCP_RANK=1", "COBRE_TCP_SIZE=3",
				"COBRE_TCP_TIMEOUT_SECS=0.001", "COBRE_ERROR_FILE=/job/rank-1.json", procs,
			},
		},
		{
			name: "backend=shm/options=timeout,bind", cfg: Config{Ranks: 3, Backend: BackendShm, ShmName: "job-1", Timeout: 2.5, Bind: "0.0.0.0"},
			want: []string{
				"PATH=/bin", "COBRE_TCP_TIMEOUT_SECS=9", "COBRE_TCP_BIND_ADDR=1.2.3.4",
				"COBRE_COMM_BACKEND=shm", "COBRE_SHM_NAME=job-1", "COBRE_TCP_RANK=1", "COBRE_TCP_SIZE=3",
				"COBRE_SHM_TIMEOUT_SECS=2.5", "COBRE_ERROR_FILE=/job/rank-1.json", procs,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := rankEnv(base, &tt.cfg, 4242, 1, "/job"); !slices.Equal(got, tt.want) {
				t.Errorf("rankEnv =\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
	// Without --bind or an inherited address: loopback only.
	got := rankEnv([]string{"PATH=/bin"}, &Config{Ranks: 3}, 4242, 1, "/job")
	if !slices.Contains(got, "COBRE_TCP_BIND_ADDR=127.0.0.1") || !slices.Contains(got, "COBRE_TCP_COORDINATOR=127.0.0.1") {
		t.Errorf("rankEnv without a bind address = %q, want rank 0 on 127.0.0.1", got)
	}
	// A GOMAXPROCS of the user's own passes through unchanged.
	got = rankEnv([]string{"GOMAXPROCS=7"}, &Config{Ranks: 3}, 4242, 1, "/job")
	if !slices.Contains(got, "GOMAXPROCS=7") || slices.Contains(got, procs) {
		t.Errorf("rankEnv with GOMAXPROCS=7 inherited = %q, want it kept and no other GOMAXPROCS", got)
	}
}
