package star

import (
	"bytes"
	"fmt"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// leadCase is a frame as writeAll hands it to stageLead: a header and the
// payload's parts.
type leadCase struct {
	name  string
	hdr   []byte
	parts [][]byte
}

// leadCases builds frames whose lead ends at every interesting place: a
// single large part starting at each of the 4096 offsets from a page
// boundary (so the lead's end falls on every source offset, the ones the
// lead must step over included), a part boundary before, at and just past
// the lead's nominal end, empty parts, a one-byte extra after the header,
// and many short parts at bad addresses.
func leadCases() []leadCase {
	big := make([]byte, 2<<20+2*pageSize)
	for i := range big {
		big[i] = byte(i*31 + i>>9)
	}
	base := int(-uintptr(unsafe.Pointer(&big[0])) & (pageSize - 1))
	hdr := []byte{TagAllgathervRecv, 1, 2, 3, 4}
	var cs []leadCase
	for off := range pageSize {
		p := big[base+off : base+off+(40<<10)+off%7]
		cs = append(cs, leadCase{fmt.Sprintf("one part at page offset %d", off), hdr, [][]byte{p}})
	}
	want := leadFrag - 31
	for _, cut := range []int{want - 5 - 1, want - 5, want - 5 + 1, want - 5 + 14, leadFrag - 5, leadFrag} {
		p := big[base+3 : base+3+(2<<20)]
		cs = append(cs, leadCase{fmt.Sprintf("two parts cut at %d", cut), hdr, [][]byte{p[:cut], nil, p[cut:]}})
	}
	cs = append(cs, leadCase{"extra byte", []byte{TagAllreduceSend, 0, 0, 0, 0, 3}, [][]byte{nil, big[base+4091 : base+4091+(1<<20)+1]}})
	// Short parts, each ending 1-15 bytes before a page boundary of the
	// source, past the lead's nominal end: stepping over one lands in the
	// next.
	var short [][]byte
	short = append(short, big[base:base+want-5])
	for j := range 40 {
		s := base + (j+9)*pageSize - 3 - j%5
		short = append(short, big[s:s+2])
	}
	short = append(short, big[base+9*pageSize:base+9*pageSize+(1<<20)])
	cs = append(cs, leadCase{"short parts at bad addresses", hdr, short})
	return cs
}

// TestStageLead: the lead is hdr and the payload's first bytes in order,
// leadFrag-31 to leadFrag-1 bytes long, and what is left starts where
// stageLead says: for a frame of one part, at a multiple of leadAlign in
// memory whenever a lead of that length would end there; in every case,
// not 1 to 15 bytes before a page boundary, unless the window is
// exhausted (frames of short parts that all end at bad addresses).
func TestStageLead(t *testing.T) {
	for _, c := range leadCases() {
		var l link
		m, i, k := l.stageLead(c.hdr, c.parts)
		var frame, rest []byte
		frame = append(frame, c.hdr...)
		for _, p := range c.parts {
			frame = append(frame, p...)
		}
		require.GreaterOrEqual(t, m, leadFrag-31, c.name)
		require.LessOrEqual(t, m, leadFrag-1, c.name)
		require.Less(t, i, len(c.parts), c.name)
		require.Less(t, k, len(c.parts[i]), c.name)
		rest = append(rest, c.parts[i][k:]...)
		for _, p := range c.parts[i+1:] {
			rest = append(rest, p...)
		}
		require.True(t, bytes.Equal(l.astage[:m], frame[:m]), "%s: the lead is not the frame's first %d bytes", c.name, m)
		require.True(t, bytes.Equal(rest, frame[m:]), "%s: the rest is not the frame after the lead", c.name)
		a := int(uintptr(unsafe.Pointer(&c.parts[i][k])) & (pageSize - 1))
		if len(c.parts) == 1 {
			p0 := uintptr(unsafe.Pointer(&c.parts[0][0]))
			for m2 := leadFrag - 31; m2 <= leadFrag-1; m2++ {
				if (p0+uintptr(m2-len(c.hdr)))%leadAlign == 0 {
					require.Zero(t, a%leadAlign, "%s: the rest starts at %d mod %d, a lead of %d would have made it 0", c.name, a%leadAlign, leadAlign, m2)
				}
			}
		}
		if m < leadFrag-1 {
			require.False(t, a > pageSize-16, "%s: the rest starts %d bytes before a page boundary", c.name, pageSize-a)
		}
	}
}
