package starcomm_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDocsSelfContained: no file of the repository (code, comments,
// documents, scripts, recipes) points to a document outside it.
func TestDocsSelfContained(t *testing.T) {
	// Built from pieces so that this file does not match itself.
	// A spec's numbered section cites the numbered sections of a document users do not
	// have; docs/protocol.md is the repository's own account of the protocol.
	outside := []string{"DESIGN" + ".md", "CONFORMANCE" + ".md", "STYLE" + ".md", "../" + "shared", "/work/" + "shared", "spec" + " section", "(section" + " "}
	checked := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == ".git" {
				return filepath.SkipDir
			}
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		checked++
		for i, line := range strings.Split(string(b), "\n") {
			for _, o := range outside {
				if strings.Contains(line, o) {
					t.Errorf("%s:%d points outside the repository (%s): %s", path, i+1, o, strings.TrimSpace(line))
				}
			}
		}
		return nil
	})
	require.NoError(t, err)
	assert.Greater(t, checked, 100, "files checked")
}
