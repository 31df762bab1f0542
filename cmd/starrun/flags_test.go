package main

import (
	"bytes"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/starcomm/starcomm"

	"github.com/starcomm/starcomm/internal/launch"
)

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want string // a fragment the error message must contain
	}{
		{name: "flag=n/missing", args: []string{"--", "prog"}, want: "-n is required"},
		{name: "flag=n/zero", args: []string{"-n", "0", "--", "prog"}, want: "-n must be at least 1"},
		{name: "flag=n/negative", args: []string{"-n", "-3", "--", "prog"}, want: "-n must be at least 1"},
		{name: "flag=n/beyond-shm", args: []string{"-n", "32769", "--backend", "shm", "--", "prog"}, want: "-n is 32769; the shm backend takes at most 32768 ranks"},
		{name: "flag=n/beyond-tcp", args: []string{"-n", "1048577", "--", "prog"}, want: "-n is 1048577; the tcp backend takes at most 1048576 ranks"},
		{name: "flag=n/not-a-number", args: []string{"-n", "four", "--", "prog"}, want: "-n"},
		{name: "flag=port/too-big", args: []string{"-n", "2", "--port", "65536", "--", "prog"}, want: "--port must be in 0..65535"},
		{name: "flag=port/negative", args: []string{"-n", "2", "--port", "-1", "--", "prog"}, want: "--port must be in 0..65535"},
		{name: "flag=timeout/zero", args: []string{"-n", "2", "--timeout", "0", "--", "prog"}, want: "--timeout must be a number of seconds in 0.001..31536000 (1 ms to a year), got 0\n"},
		{name: "flag=timeout/negative", args: []string{"-n", "2", "--timeout=-5", "--", "prog"}, want: "--timeout must be a number of seconds in 0.001..31536000 (1 ms to a year), got -5\n"},
		{name: "flag=timeout/below-1ms", args: []string{"-n", "2", "--timeout", "0.0009", "--", "prog"}, want: "--timeout must be a number of seconds in 0.001..31536000 (1 ms to a year), got 0.0009\n"},
		{name: "flag=timeout/tiny", args: []string{"-n", "2", "--timeout", "1e-12", "--", "prog"}, want: "got 1e-12\n"},
		{name: "flag=timeout/over-a-year", args: []string{"-n", "2", "--timeout", "31536000.5", "--", "prog"}, want: "--timeout must be a number of seconds in 0.001..31536000 (1 ms to a year), got 31536000.5\n"},
		{name: "flag=timeout/nan", args: []string{"-n", "2", "--timeout", "NaN", "--", "prog"}, want: "got NaN\n"},
		{name: "flag=timeout/inf", args: []string{"-n", "2", "--timeout", "Inf", "--", "prog"}, want: "got Inf\n"},
		{name: "flag=timeout/beyond-float64", args: []string{"-n", "2", "--timeout", "1e400", "--", "prog"}, want: "got 1e400\n"},
		{name: "flag=timeout/not-a-number", args: []string{"-n", "2", "--timeout", "soon", "--", "prog"}, want: `invalid value "soon" for flag -timeout: not a number of seconds (5, 1.5)`},
		{name: "flag=timeout/with-unit", args: []string{"-n", "2", "--timeout", "5s", "--", "prog"}, want: `invalid value "5s" for flag -timeout: takes a number of seconds without a unit (5, 1.5)`},
		{name: "flag=bind/empty", args: []string{"-n", "2", "--bind", "", "--", "prog"}, want: "--bind must not be empty"},
		{name: "flag=bind/with-port", args: []string{"-n", "2", "--bind", "127.0.0.1:80", "--", "prog"}, want: `--bind takes an address without a port (give the port with --port 80), got "127.0.0.1:80"`},
		{name: "flag=bind/ipv6-with-port", args: []string{"-n", "2", "--bind", "[::1]:80", "--", "prog"}, want: "--bind takes an address without a port"},
		{name: "flag=bind/not-a-name", args: []string{"-n", "2", "--bind", "node0!", "--", "prog"}, want: `--bind must be an IP address or host name of this host: "node0!" is not a host name`},
		{name: "flag=bind/bad-ipv4", args: []string{"-n", "2", "--bind", "999.1.1.1", "--", "prog"}, want: `"999.1.1.1" is not a valid IPv4 address`},
		{name: "flag=bind/open-bracket", args: []string{"-n", "2", "--bind", "[::1", "--", "prog"}, want: "brackets must enclose an IPv6 address"},
		{name: "flag=bind/bracketed-name", args: []string{"-n", "2", "--bind", "[node0]", "--", "prog"}, want: "brackets must enclose an IPv6 address"},
		// A valid --bind does not end the checks.
		{name: "flag=bind/valid-then-grace", args: []string{"-n", "2", "--bind", "127.0.0.1", "--grace", "-1s", "--", "prog"}, want: "--grace must not be negative"},
		{name: "flag=bind/valid-then-no-command", args: []string{"-n", "2", "--bind", "127.0.0.1"}, want: "no command given"},
		{name: "flag=grace/negative", args: []string{"-n", "2", "--grace", "-1s", "--", "prog"}, want: "--grace must not be negative"},
		{name: "flag=grace/not-a-duration", args: []string{"-n", "2", "--grace", "soon", "--", "prog"}, want: `invalid value "soon" for flag -grace: not a duration (5s, 500ms, 1m)`},
		{name: "flag=grace/bare-number", args: []string{"-n", "2", "--grace", "5", "--", "prog"}, want: `invalid value "5" for flag -grace: takes a duration with its unit (5s, 500ms), not a bare number`},
		{name: "flag=settle/bare-number", args: []string{"-n", "2", "--settle", "0.5", "--", "prog"}, want: `invalid value "0.5" for flag -settle: takes a duration with its unit (5s, 500ms), not a bare number`},
		{name: "flag=settle/negative", args: []string{"-n", "2", "--settle", "-1s", "--", "prog"}, want: "--settle must not be negative"},
		{name: "flag=backend/unknown", args: []string{"-n", "2", "--backend", "mpi", "--", "prog"}, want: "--backend must be tcp or shm"},
		{name: "flag=backend/shm-with-port", args: []string{"-n", "2", "--backend", "shm", "--port", "4000", "--", "prog"}, want: "--port and --bind are for --backend tcp"},
		{name: "flag=unknown", args: []string{"-n", "2", "--bogus", "--", "prog"}, want: "-bogus"},
		{name: "command=missing", args: []string{"-n", "2"}, want: "no command given"},
		{name: "command=empty-after-dashes", args: []string{"-n", "2", "--"}, want: "no command given"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			l := &Launcher{Stdout: &stdout, Stderr: &stderr}
			if code := l.Run(tt.args); code != exitUsage {
				t.Errorf("exit code = %d, want %d", code, exitUsage)
			}
			if msg := stderr.String(); !strings.HasPrefix(msg, "starrun: ") || !strings.Contains(msg, tt.want) || !strings.Contains(msg, synopsis) {
				t.Errorf("stderr = %q, want a starrun error containing %q and the usage line", msg, tt.want)
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout = %q, want nothing", stdout.String())
			}
		})
	}
}

func TestHelp(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{"-h", "--help"} {
		var stdout, stderr bytes.Buffer
		l := &Launcher{Stdout: &stdout, Stderr: &stderr}
		if code := l.Run([]string{arg}); code != 0 {
			t.Errorf("%s: exit code = %d, want 0", arg, code)
		}
		for _, want := range []string{synopsis, "-n int", "-backend string", "-port int", "-timeout seconds", "-bind string", "-grace duration"} {
			if !strings.Contains(stdout.String(), want) {
				t.Errorf("%s: help lacks %q:\n%s", arg, want, stdout.String())
			}
		}
	}
}

func TestParseArgs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want config
	}{
		{
			name: "form=minimal", args: []string{"-n", "3", "--", "prog", "-x", "--y"},
			want: config{n: 3, grace: defaultGrace, command: []string{"prog", "-x", "--y"}},
		},
		{
			name: "form=all-flags", args: []string{"--n=1", "--port=29500", "--timeout", "60", "--bind", "0.0.0.0", "--grace", "250ms", "--", "prog"},
			want: config{n: 1, port: 29500, timeout: 60, bind: "0.0.0.0", grace: 250 * time.Millisecond, command: []string{"prog"}},
		},
		{
			name: "form=no-dashes", args: []string{"-n", "2", "prog", "-n", "5"},
			want: config{n: 2, grace: defaultGrace, command: []string{"prog", "-n", "5"}},
		},
		{
			name: "form=decimal-timeout", args: []string{"-n", "2", "--timeout", "1.5", "--", "prog"},
			want: config{n: 2, timeout: 1.5, grace: defaultGrace, command: []string{"prog"}},
		},
		{
			name: "form=least-timeout", args: []string{"-n", "2", "--timeout=1e-3", "--", "prog"},
			want: config{n: 2, timeout: 0.001, grace: defaultGrace, command: []string{"prog"}},
		},
		{
			name: "form=longest-timeout", args: []string{"-n", "2", "-timeout", "31536000", "--", "prog"},
			want: config{n: 2, timeout: 31536000, grace: defaultGrace, command: []string{"prog"}},
		},
		{
			name: "form=shm", args: []string{"-n", "4", "--backend", "shm", "--timeout", "5", "--", "prog"},
			want: config{n: 4, backend: "shm", timeout: 5, grace: defaultGrace, command: []string{"prog"}},
		},
		{
			name: "form=bind-ipv6", args: []string{"-n", "2", "--bind", "::1", "--", "prog"},
			want: config{n: 2, bind: "::1", grace: defaultGrace, command: []string{"prog"}},
		},
		{
			name: "form=bind-ipv6-brackets", args: []string{"-n", "2", "--bind", "[::]", "--", "prog"},
			want: config{n: 2, bind: "[::]", grace: defaultGrace, command: []string{"prog"}},
		},
		{
			name: "form=bind-name", args: []string{"-n", "2", "--bind", "localhost", "--", "prog"},
			want: config{n: 2, bind: "localhost", grace: defaultGrace, command: []string{"prog"}},
		},
		{
			name: "form=zero-grace", args: []string{"-n", "2", "--grace", "0", "--", "prog"},
			want: config{n: 2, command: []string{"prog"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseArgs(tt.args)
			if err != nil {
				t.Fatalf("parseArgs: %v", err)
			}
			if tt.want.backend == "" {
				tt.want.backend = "tcp"
			}
			if got.n != tt.want.n || got.backend != tt.want.backend || got.port != tt.want.port || got.timeout != tt.want.timeout ||
				got.bind != tt.want.bind || got.grace != tt.want.grace || !slices.Equal(got.command, tt.want.command) {
				t.Errorf("parseArgs = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestTimeoutBoundsAreTheVariables: --timeout takes exactly what the
// variables it sets, COBRE_TCP_TIMEOUT_SECS and COBRE_SHM_TIMEOUT_SECS,
// take: at both ends of the range, just beyond them, and in between.
func TestTimeoutBoundsAreTheVariables(t *testing.T) {
	t.Parallel()
	values := []float64{launch.MinTimeoutSecs, launch.MaxTimeoutSecs, math.Nextafter(launch.MinTimeoutSecs, 0), math.Nextafter(launch.MaxTimeoutSecs, math.Inf(1)), 1.5, 7, 1e-9}
	for _, v := range values {
		text := strconv.FormatFloat(v, 'g', -1, 64)
		_, flagErr := parseArgs([]string{"-n", "2", "--timeout", text, "--", "prog"})
		for _, env := range []map[string]string{
			{"COBRE_COMM_BACKEND": "tcp", "COBRE_TCP_RANK": "0", "COBRE_TCP_SIZE": "2", "COBRE_TCP_TIMEOUT_SECS": text},
			{"COBRE_COMM_BACKEND": "shm", "COBRE_SHM_NAME": "job", "COBRE_TCP_RANK": "0", "COBRE_TCP_SIZE": "2", "COBRE_SHM_TIMEOUT_SECS": text},
		} {
			_, varErr := starcomm.ConfigFromLookup(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
			if (flagErr == nil) != (varErr == nil) {
				t.Errorf("--timeout %s: %v; but %s=%s: %v", text, flagErr, env["COBRE_COMM_BACKEND"], text, varErr)
			}
		}
	}
}
