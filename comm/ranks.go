package comm

import (
	"fmt"
	"strconv"
	"strings"
)

// MaxRanksItems is how many items (single ranks or ranges) FormatRanks
// writes before it counts the rest.
const MaxRanksItems = 16

// FormatRanks writes the ranks r, in increasing order, for a message: up
// to MaxRanksItems ranks as fmt writes them ("[1 2 3 7]"); more with each
// run of three or more consecutive ranks as a range, and past MaxRanksItems
// items the rest counted ("[1-4095 4097 and 28000 more]"), so that an
// error naming the ranks that never joined a job of 32768 stays one line.
func FormatRanks(r []int) string {
	if len(r) <= MaxRanksItems {
		return fmt.Sprint(r)
	}
	var b strings.Builder
	b.WriteByte('[')
	items := 0
	for i := 0; i < len(r); {
		j := i
		for j+1 < len(r) && r[j+1] == r[j]+1 {
			j++
		}
		if items == MaxRanksItems {
			b.WriteString(" and " + strconv.Itoa(len(r)-i) + " more")
			break
		}
		if items > 0 {
			b.WriteByte(' ')
		}
		items++
		switch {
		case j-i >= 2:
			b.WriteString(strconv.Itoa(r[i]) + "-" + strconv.Itoa(r[j]))
		case j-i == 1:
			// Two in a row: two items, as "1 2" reads better than "1-2".
			b.WriteString(strconv.Itoa(r[i]))
			if items == MaxRanksItems {
				i++
				continue
			}
			b.WriteString(" " + strconv.Itoa(r[j]))
			items++
		default:
			b.WriteString(strconv.Itoa(r[i]))
		}
		i = j + 1
	}
	b.WriteByte(']')
	return b.String()
}
