package hostname

import (
	"errors"
	"strings"
	"testing"
)

// TestCheck: names a resolver and a hosts file take pass; every rule's
// breach is refused with the name in the message, and a name of digits
// and dots with ErrAllDigits.
func TestCheck(t *testing.T) {
	good := []string{"node0", "node-1.cluster.local", "node_1", "a.", "x1", strings.Repeat("a", 63), strings.Repeat("a.", 126) + "a"}
	for _, name := range good {
		if err := Check(name); err != nil {
			t.Errorf("Check(%q) = %v, want nil", name, err)
		}
	}
	bad := []string{"", ".", "node 0", "-node", "node-", "a..b", strings.Repeat("a", 64), strings.Repeat("a.", 127) + "a", "nödé", "999.1.1.1", "10"}
	for _, name := range bad {
		err := Check(name)
		if err == nil {
			t.Errorf("Check(%q) = nil, want an error", name)
			continue
		}
		if !strings.Contains(err.Error(), "is not a host name") {
			t.Errorf("Check(%q) = %v: does not say it is not a host name", name, err)
		}
	}
	for _, name := range []string{"999.1.1.1", "10", "1.2."} {
		if err := Check(name); !errors.Is(err, ErrAllDigits) {
			t.Errorf("Check(%q) = %v, want ErrAllDigits", name, err)
		}
	}
}
