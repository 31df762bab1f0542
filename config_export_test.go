package starcomm

import "github.com/starcomm/starcomm/star"

// Exports of config_vars.go for the tests in package starcomm_test.

// Resolve returns the backend c selects (auto resolved).
func Resolve(c Config) string { return c.resolve() }

// ConfigMarkdown writes the README's configuration table.
var ConfigMarkdown = configMarkdown

// SuggestVariable returns the known variable closest to name, or "".
var SuggestVariable = suggest

// VariableFields returns the table's variable names and the Config field
// each sets, in the table's order.
func VariableFields() (names, fields []string) {
	for _, v := range variables {
		names, fields = append(names, v.name), append(fields, v.field)
	}
	return names, fields
}

// TokenOf returns the token c gives: Token, or what TokenFile holds.
func TokenOf(c Config) (star.Token, error) { return c.token() }

// StarSpins returns the star.Config Spin and SpinMax that c gives, on a
// system whose sockets can (canPoll) or cannot be polled.
var StarSpins = starSpins
