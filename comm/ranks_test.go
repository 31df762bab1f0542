package comm

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestFormat: single ranks as fmt writes them, runs of three or more as
// ranges, and a count of the ranks past MaxRanksItems items.
func TestFormatRanks(t *testing.T) {
	seq := func(lo, hi, step int) []int {
		var r []int
		for i := lo; i <= hi; i += step {
			r = append(r, i)
		}
		return r
	}
	for _, tc := range []struct {
		r    []int
		want string
	}{
		{nil, "[]"},
		{[]int{}, "[]"},
		{[]int{1}, "[1]"},
		{[]int{1, 3}, "[1 3]"},
		{[]int{1, 2, 3}, "[1 2 3]"},
		{seq(1, 16, 1), fmt.Sprint(seq(1, 16, 1))},
		// More than MaxRanksItems: runs as ranges.
		{seq(1, 17, 1), "[1-17]"},
		{seq(1, 32767, 1), "[1-32767]"},
		{append(append([]int{0, 1, 2, 5, 7, 8}, seq(10, 20, 1)...), 30), "[0-2 5 7 8 10-20 30]"},
		{seq(0, 16*2, 2), "[0 2 4 6 8 10 12 14 16 18 20 22 24 26 28 30 and 1 more]"},
		{seq(1, 32767, 2), "[1 3 5 7 9 11 13 15 17 19 21 23 25 27 29 31 and 16368 more]"},
		{append(seq(0, 14*2, 2), seq(40, 100, 1)...), "[0 2 4 6 8 10 12 14 16 18 20 22 24 26 28 40-100]"},
		// A pair across the bound: its first rank is the last item.
		{append(seq(0, 14*2, 2), 40, 41, 50, 51, 52), "[0 2 4 6 8 10 12 14 16 18 20 22 24 26 28 40 and 4 more]"},
		{append(seq(0, 13*2, 2), 40, 41, 50, 51, 52), "[0 2 4 6 8 10 12 14 16 18 20 22 24 26 40 41 and 3 more]"},
	} {
		t.Run(fmt.Sprint(len(tc.r)), func(t *testing.T) {
			assert.Equal(t, tc.want, FormatRanks(tc.r))
		})
	}
}
