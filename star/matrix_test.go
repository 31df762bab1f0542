package star_test

import (
	"testing"

	"github.com/starcomm/starcomm/testkit"
)

// TestMatrix runs the failure matrix of DESIGN.md section 5 over the faulty
// transport; `go test -run Matrix -v` shows each cell by name.
func TestMatrix(t *testing.T) {
	testkit.RunMatrix(t)
}
