package shm_test

import (
	"go/build"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestImports enforces the layering rule: shm imports comm, the standard
// library and golang.org/x/sys/unix only.
func TestImports(t *testing.T) {
	for _, goos := range []string{"linux", "darwin", "windows"} {
		ctx := build.Default
		ctx.GOOS = goos
		pkg, err := ctx.ImportDir(".", 0)
		require.NoError(t, err)
		for _, imp := range pkg.Imports {
			first, _, _ := strings.Cut(imp, "/")
			if imp == "github.com/starcomm/starcomm/comm" || imp == "golang.org/x/sys/unix" {
				continue
			}
			require.NotContains(t, first, ".", "GOOS=%s: shm must import only comm, the standard library and golang.org/x/sys/unix, not %s", goos, imp)
		}
	}
}
