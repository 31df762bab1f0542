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
