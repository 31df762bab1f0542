package ranks

import (
	"bytes"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestEnvReplacesInherited(t *testing.T) {
	base := []string{"PATH=/bin", "COBRE_TCP_RANK=9", "HOME=/root", "COBRE_TCP_PORT=1"}
	got := Env(base, "COBRE_TCP_RANK=2", "COBRE_TCP_PORT=29500", "COBRE_TCP_SIZE=4")
	require.Equal(t, []string{"PATH=/bin", "HOME=/root", "COBRE_TCP_RANK=2", "COBRE_TCP_PORT=29500", "COBRE_TCP_SIZE=4"}, got)
	require.Equal(t, []string{"A=1"}, Env(nil, "A=1"))
}

func TestSyncWriterKeepsLinesWhole(t *testing.T) {
	var buf bytes.Buffer
	w := &SyncWriter{W: &buf}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for range 200 {
				w.Printf("[%d] %s", g, strings.Repeat("x", 100))
			}
		})
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	require.Len(t, lines, 8*200)
	for _, l := range lines {
		require.Regexp(t, `^\[\d\] x{100}$`, l)
	}
}

func TestGoMaxProcs(t *testing.T) {
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
