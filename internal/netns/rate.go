package netns

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// rateUnits are tc's rate units (tc(8), "RATES"), in bits per second.
// Units are case-insensitive, as in tc; a bare number is bits per second.
var rateUnits = map[string]float64{
	"":      1,
	"bit":   1,
	"kbit":  1e3,
	"mbit":  1e6,
	"gbit":  1e9,
	"tbit":  1e12,
	"kibit": 1 << 10,
	"mibit": 1 << 20,
	"gibit": 1 << 30,
	"tibit": 1 << 40,
	"bps":   8,
	"kbps":  8e3,
	"mbps":  8e6,
	"gbps":  8e9,
	"tbps":  8e12,
	"kibps": 8 << 10,
	"mibps": 8 << 20,
	"gibps": 8 << 30,
	"tibps": 8 << 40,
}

// ParseRate parses a rate in tc's syntax ("1gbit", "100mbit", "12.5mbps",
// "500kibit", "1000000") and returns it in bits per second. As in tc, "bit"
// units are bits and "bps" units are bytes per second.
func ParseRate(s string) (uint64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i < 0 {
		i = len(t)
	}
	num, unit := t[:i], t[i:]
	mult, ok := rateUnits[unit]
	if !ok {
		return 0, fmt.Errorf("netns: rate %q: unknown unit %q (use bit, kbit, mbit, gbit, bps, mbps, ...)", s, unit)
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || num == "" {
		return 0, fmt.Errorf("netns: rate %q: not a number followed by a unit", s)
	}
	bits := v * mult
	if bits < 8 || bits > math.MaxUint64/2 || math.IsNaN(bits) {
		return 0, fmt.Errorf("netns: rate %q: out of range", s)
	}
	return uint64(bits), nil
}
