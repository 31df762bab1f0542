package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"
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
		{name: "flag=n/not-a-number", args: []string{"-n", "four", "--", "prog"}, want: "-n"},
		{name: "flag=port/too-big", args: []string{"-n", "2", "--port", "65536", "--", "prog"}, want: "--port must be in 0..65535"},
		{name: "flag=port/negative", args: []string{"-n", "2", "--port", "-1", "--", "prog"}, want: "--port must be in 0..65535"},
		{name: "flag=timeout/zero", args: []string{"-n", "2", "--timeout", "0", "--", "prog"}, want: "--timeout must be a positive"},
		{name: "flag=timeout/negative", args: []string{"-n", "2", "--timeout=-5", "--", "prog"}, want: "--timeout must be a positive"},
		{name: "flag=bind/empty", args: []string{"-n", "2", "--bind", "", "--", "prog"}, want: "--bind must not be empty"},
		{name: "flag=grace/negative", args: []string{"-n", "2", "--grace", "-1s", "--", "prog"}, want: "--grace must not be negative"},
		{name: "flag=grace/not-a-duration", args: []string{"-n", "2", "--grace", "soon", "--", "prog"}, want: "-grace"},
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
		for _, want := range []string{synopsis, "-n int", "-backend string", "-port int", "-timeout int", "-bind string", "-grace duration"} {
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
			name: "form=shm", args: []string{"-n", "4", "--backend", "shm", "--timeout", "5", "--", "prog"},
			want: config{n: 4, backend: "shm", timeout: 5, grace: defaultGrace, command: []string{"prog"}},
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
