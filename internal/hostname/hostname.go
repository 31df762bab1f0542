// Package hostname checks that a string is a well-formed host name: one
// that a resolver may answer for (transport/tcp waits for such a name to
// resolve) and a hosts file may hold (internal/netns writes them).
package hostname

import (
	"errors"
	"fmt"
	"strings"
)

// ErrAllDigits is the cause of Check's error for a name of digits and dots
// only, which reads as an IPv4 address, not as a name.
var ErrAllDigits = errors.New("it is all digits and dots")

// Check returns nil when name is a host name: at most 253 characters (a
// final dot aside) in dot-separated labels of 1 to 63 letters, digits, '-'
// and '_', none starting or ending with '-', and not all digits. Otherwise
// its error says what is wrong ("%q is not a host name: ...").
func Check(name string) error {
	s := strings.TrimSuffix(name, ".")
	if s == "" || len(s) > 253 {
		return fmt.Errorf("%q is not a host name: it must have 1 to 253 characters", name)
	}
	digits := true
	for label := range strings.SplitSeq(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return fmt.Errorf("%q is not a host name: each dot-separated label has 1 to 63 characters and neither starts nor ends with '-'", name)
		}
		for _, r := range label {
			switch {
			case r >= '0' && r <= '9':
			case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r == '-', r == '_':
				digits = false
			default:
				return fmt.Errorf("%q is not a host name: %q is not a letter, digit, '-' or '_'", name, r)
			}
		}
	}
	if digits {
		return fmt.Errorf("%q is not a host name: %w", name, ErrAllDigits)
	}
	return nil
}
