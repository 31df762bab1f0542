package star

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Fuzz targets for the framing layer. Run one with, e.g.,
//
//	go test -run='^$' -fuzz='^FuzzReadFrame$' -fuzztime=10s ./star/
//
// Their seeds (f.Add below and testdata/fuzz/<Name>/) run with every plain
// go test.

// fuzzParts turns a fuzz layout into destination parts: one part per byte
// of layout (at most 8), each of that many bytes, filled with a pattern
// that lets the oracle see whether readFrame wrote it.
func fuzzParts(layout []byte) (parts [][]byte, total int) {
	layout = layout[:min(len(layout), 8)]
	parts = make([][]byte, len(layout))
	for i, n := range layout {
		parts[i] = bytes.Repeat([]byte{0xA5 ^ byte(i)}, int(n))
		total += int(n)
	}
	return parts, total
}

// allocBound is how many bytes readFrame may allocate for one frame whose
// header claims tag and payload length n: a small constant, plus, for an
// Abort frame short enough to be read, the reason (today the buffer and
// three string copies of it: 4 x 64 KiB at most). It never depends on a
// LEN beyond MaxAbortReason.
func allocBound(tag byte, want byte, n int) uint64 {
	const slack = 128 << 10
	if tag == TagAbort && want != TagAbort && n >= 0 && n <= MaxAbortReason {
		return slack + 4*uint64(n)
	}
	return slack
}

// FuzzReadFrame feeds arbitrary bytes, as a peer's stream, to readFrame
// with the expected tag want and destination parts sized by layout. It
// checks readFrame against a plain oracle of the framing rules: it never
// panics, never reads past the frame it refuses (a refused frame costs its
// 5-byte header, an Abort its header and reason), never writes into parts
// of a refused frame, never allocates more than a small bound whatever LEN
// claims, and on success fills parts with exactly the payload bytes. Up to
// three frames are read back to back while they succeed.
func FuzzReadFrame(f *testing.F) {
	hs := EncodeHandshake(1, 3)
	f.Add(TagHandshake, []byte{8}, hs)
	f.Add(TagHandshake, []byte{4, 4}, hs)
	f.Add(TagHandshake, []byte{8}, hs[:7])                                 // truncated payload
	f.Add(TagHandshake, []byte{8}, hs[:3])                                 // truncated header
	f.Add(TagHandshake, []byte{8}, []byte{})                               // nothing
	f.Add(TagAllgathervSend, []byte{8}, []byte{0, 0, 0, 0, 1})             // LEN = 0
	f.Add(TagAllgathervSend, []byte{8}, []byte{0xFF, 0xFF, 0xFF, 0xFF, 1}) // LEN = 4 GiB - 1
	f.Add(TagAllgathervSend, []byte{8}, []byte{0x80, 0, 0, 1, 1, 2, 3})    // LEN = 2 GiB + 1
	f.Add(TagAllgathervSend, []byte{8}, []byte{0, 0, 0, 2, 1, 0xEE})       // LEN too small
	f.Add(TagAllgathervSend, []byte{8}, []byte{0, 0, 0, 9, 2, 1, 2, 3, 4, 5, 6, 7, 8})
	f.Add(TagAllreduceSend, []byte{1, 8}, []byte{0, 0, 0, 10, 3, 0, 1, 2, 3, 4, 5, 6, 7, 8})
	f.Add(TagBarrierGo, []byte{}, []byte{0, 0, 0, 1, 7, 0, 0, 0, 1, 7, 0, 0, 0, 1, 7})
	f.Add(TagBarrierGo, []byte{}, []byte{0, 0, 0, 1, 0x0A})    // Shutdown
	f.Add(TagHandshake, []byte{8}, []byte{0, 0, 0, 1, 0x0A})   // Shutdown is no handshake
	f.Add(TagBarrierGo, []byte{}, []byte{0, 0, 0, 2, 0x0A, 0}) // Shutdown with a payload
	f.Add(TagBarrierGo, []byte{}, EncodeAbort("rank 2 failed during barrier: boom"))
	f.Add(TagBarrierGo, []byte{}, EncodeAbort("rank 2")[:9]) // truncated reason
	f.Add(TagBarrierGo, []byte{}, []byte{0, 1, 0, 1, 0x0B})  // Abort, reason of MaxAbortReason bytes, absent
	f.Add(TagBarrierGo, []byte{}, []byte{0, 1, 0, 2, 0x0B})  // Abort, one byte too long
	f.Add(TagBarrierGo, []byte{}, []byte{0xFF, 0xFF, 0xFF, 0xFF, 0x0B})
	f.Add(TagAbort, []byte{3}, EncodeAbort("abc")) // an expected Abort is an ordinary frame
	f.Fuzz(func(t *testing.T, want byte, layout []byte, stream []byte) {
		parts, total := fuzzParts(layout)
		var c bufConn
		c.Write(stream)
		l := newLink(7, &c, time.Second)
		rest := stream
		for frame := 0; frame < 3; frame++ {
			before := make([][]byte, len(parts))
			for i, p := range parts {
				before[i] = bytes.Clone(p)
			}
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			err := l.readFrame(want, parts...)
			runtime.ReadMemStats(&m1)
			consumed := len(rest) - c.Len()
			checkReadFrame(t, want, parts, before, total, rest, consumed, m1.TotalAlloc-m0.TotalAlloc, err)
			if err != nil {
				return
			}
			rest = rest[consumed:]
		}
	})
}

// checkReadFrame is FuzzReadFrame's oracle for one readFrame call on
// stream, which consumed bytes, allocated alloc bytes and returned err.
func checkReadFrame(t *testing.T, want byte, parts, before [][]byte, total int, stream []byte, consumed int, alloc uint64, err error) {
	t.Helper()
	untouched := func() {
		t.Helper()
		for i := range parts {
			if !bytes.Equal(parts[i], before[i]) {
				t.Fatalf("part %d written although the frame was refused (err %v)", i, err)
			}
		}
	}
	if len(stream) < HeaderSize {
		wantErr := io.ErrUnexpectedEOF
		if len(stream) == 0 {
			wantErr = io.EOF
		}
		if !errors.Is(err, wantErr) || consumed != len(stream) {
			t.Fatalf("short header %x: err %v, consumed %d", stream, err, consumed)
		}
		untouched()
		return
	}
	lenField := binary.BigEndian.Uint32(stream[:4])
	tag := stream[4]
	n := int(lenField) - 1
	avail := len(stream) - HeaderSize
	if bound := allocBound(tag, want, n); alloc > bound {
		t.Fatalf("LEN %d tag %s: readFrame allocated %d bytes, bound %d", lenField, TagName(tag), alloc, bound)
	}
	refusedAt := func(wantConsumed int) {
		t.Helper()
		if consumed != wantConsumed {
			t.Fatalf("LEN %d tag %s want %s: refused (%v) after consuming %d bytes, expected %d", lenField, TagName(tag), TagName(want), err, consumed, wantConsumed)
		}
		untouched()
	}
	var le *lengthError
	var te *tagError
	var ab *AbortError
	switch {
	case lenField == 0:
		// No room for a tag: a length mismatch (payload length -1).
		if !errors.As(err, &le) || le.got != -1 || le.expected != total {
			t.Fatalf("LEN 0: err %v", err)
		}
		refusedAt(HeaderSize)
	case tag != want && tag == TagAbort && n <= MaxAbortReason:
		if avail < n {
			if !errors.Is(err, io.ErrUnexpectedEOF) || consumed != len(stream) {
				t.Fatalf("truncated Abort (%d of %d bytes): err %v, consumed %d", avail, n, err, consumed)
			}
			untouched()
			return
		}
		payload := stream[HeaderSize : HeaderSize+n]
		w := parseAbort(7, payload)
		if !errors.As(err, &ab) || ab.Reason != w.Reason || ab.From != 7 || ab.Rank != w.Rank || ab.Op != w.Op || ab.Cause != w.Cause {
			t.Fatalf("Abort %q: err %#v", payload, err)
		}
		refusedAt(HeaderSize + n)
	case tag != want && tag == TagShutdown && n == 0 && want != TagHandshake:
		if !errors.Is(err, ErrShutdown) {
			t.Fatalf("Shutdown: err %v", err)
		}
		refusedAt(HeaderSize)
	case tag != want:
		if !errors.Is(err, ErrUnexpectedTag) || !errors.As(err, &te) || te.got != tag || te.want != want {
			t.Fatalf("tag %s, want %s: err %v", TagName(tag), TagName(want), err)
		}
		refusedAt(HeaderSize)
	case n != total:
		if !errors.As(err, &le) || le.got != n || le.expected != total || errors.Is(err, ErrUnexpectedTag) {
			t.Fatalf("LEN %d, expected payload %d: err %v", lenField, total, err)
		}
		refusedAt(HeaderSize)
	case avail < n:
		if !errors.Is(err, io.ErrUnexpectedEOF) || consumed != len(stream) {
			t.Fatalf("truncated payload (%d of %d bytes): err %v, consumed %d", avail, n, err, consumed)
		}
	default:
		if err != nil {
			t.Fatalf("valid %s frame of %d bytes: err %v", TagName(tag), n, err)
		}
		if consumed != HeaderSize+n {
			t.Fatalf("valid frame of %d bytes consumed %d", HeaderSize+n, consumed)
		}
		if got := bytes.Join(parts, nil); !bytes.Equal(got, stream[HeaderSize:HeaderSize+n]) {
			t.Fatalf("parts %x, payload %x", got, stream[HeaderSize:HeaderSize+n])
		}
	}
}

// split cuts b at the lengths of layout (each byte one part, the remainder
// last).
func split(b []byte, layout []byte) [][]byte {
	var parts [][]byte
	for _, n := range layout {
		k := min(int(n), len(b))
		parts = append(parts, b[:k])
		b = b[k:]
	}
	return append(parts, b)
}

// FuzzFrameRoundTrip writes a frame with writeFrame (tag, an optional extra
// byte, the payload cut into parts by wlayout) and reads it back with
// readFrame into parts cut by rlayout: the bytes on the wire are the header
// and payload, and readFrame returns them exactly, consuming the frame.
func FuzzFrameRoundTrip(f *testing.F) {
	f.Add(TagAllgathervSend, []byte{}, []byte{}, []byte{}, []byte{})
	f.Add(TagAllreduceSend, []byte{2}, []byte{3}, []byte{1, 1}, []byte("abcdefgh"))
	f.Add(TagAllgathervRecv, []byte{}, []byte{0, 2, 0}, []byte{5}, []byte("0123456789"))
	f.Add(TagAbort, []byte{}, []byte{}, []byte{}, []byte("rank 1 failed"))
	f.Fuzz(func(t *testing.T, tag byte, extra, wlayout, rlayout, payload []byte) {
		extra = extra[:min(len(extra), 1)]
		var c bufConn
		w := newLink(1, &c, time.Second)
		if err := w.writeFrame(tag, extra, split(payload, wlayout)...); err != nil {
			t.Fatal(err)
		}
		body := append(bytes.Clone(extra), payload...)
		var hdr [HeaderSize]byte
		PutHeader(hdr[:], tag, len(body))
		if wire := c.Bytes(); !bytes.Equal(wire, append(hdr[:], body...)) {
			t.Fatalf("wire %x, want header %x and body %x", wire, hdr, body)
		}
		dst := split(make([]byte, len(body)), rlayout)
		r := newLink(0, &c, time.Second)
		if err := r.readFrame(tag, dst...); err != nil {
			t.Fatal(err)
		}
		if got := bytes.Join(dst, nil); !bytes.Equal(got, body) {
			t.Fatalf("read %x, wrote %x", got, body)
		}
		if c.Len() != 0 {
			t.Fatalf("%d bytes left after the frame", c.Len())
		}
	})
}

// FuzzParseHeader checks ParseHeader, ParseHandshake and the coordinator's
// handshake check on arbitrary bytes: ParseHeader inverts PutHeader and
// refuses LEN 0; ParseHandshake accepts exactly 8 bytes and inverts
// EncodeHandshake; checkHandshake accepts exactly 1 <= rank < size = the
// coordinator's size for a rank not yet taken, gives a reason otherwise,
// and never asks about a rank outside 1..size-1 (the coordinator indexes a
// slice with it).
func FuzzParseHeader(f *testing.F) {
	// The coordinator's size is size16 + 1.
	f.Add(EncodeHandshake(1, 3), uint16(2), uint64(0))
	f.Add(EncodeHandshake(2, 3), uint16(2), uint64(1<<2)) // rank 2 taken
	f.Add(EncodeHandshake(0, 3), uint16(2), uint64(0))
	f.Add(EncodeHandshake(3, 3), uint16(2), uint64(0))
	f.Add(EncodeHandshake(1, 4), uint16(2), uint64(0))
	u32max := uint32(math.MaxUint32) // a variable: the test also builds where int has 32 bits
	f.Add(EncodeHandshake(int(u32max), int(u32max)), uint16(0xFFFF), uint64(0))
	f.Add(EncodeHandshake(1, 3)[5:], uint16(2), uint64(0)) // the payload alone
	f.Add([]byte{0, 0, 0, 0, 8}, uint16(0), uint64(0))
	f.Add([]byte{0xFF, 0xFF, 0xFF, 0xFF, 0x0B}, uint16(0), uint64(0))
	f.Add([]byte{0, 0, 0}, uint16(1), uint64(0))
	f.Fuzz(func(t *testing.T, data []byte, size16 uint16, takenMask uint64) {
		if len(data) >= HeaderSize {
			n, tag, err := ParseHeader(data)
			lenField := binary.BigEndian.Uint32(data)
			switch {
			case tag != data[4]:
				t.Fatalf("tag %#x, header %x", tag, data[:5])
			case lenField == 0:
				if !errors.Is(err, ErrZeroLength) || n != -1 {
					t.Fatalf("LEN 0: payload %d, err %v", n, err)
				}
			case err != nil || n != int(lenField)-1 || n < 0 || uint64(n) > MaxFrameLen-1:
				t.Fatalf("LEN %d: payload %d, err %v", lenField, n, err)
			default:
				var h [HeaderSize]byte
				PutHeader(h[:], tag, n)
				if !bytes.Equal(h[:], data[:HeaderSize]) {
					t.Fatalf("PutHeader(%d) = %x, parsed from %x", n, h, data[:5])
				}
			}
		}

		rank, size, err := ParseHandshake(data)
		payload := data
		if len(data) != handshakeLen {
			if err == nil || rank != 0 || size != 0 {
				t.Fatalf("%d-byte handshake payload accepted: %d %d %v", len(data), rank, size, err)
			}
			if len(data) < HeaderSize+handshakeLen {
				return
			}
			// Go on with the handshake the frame would carry.
			payload = data[HeaderSize : HeaderSize+handshakeLen]
			if rank, size, err = ParseHandshake(payload); err != nil {
				t.Fatal(err)
			}
		}
		if enc := EncodeHandshake(int(rank), int(size)); !bytes.Equal(enc[HeaderSize:], payload) {
			t.Fatalf("EncodeHandshake(%d, %d) = %x, parsed from %x", rank, size, enc, payload)
		}

		mySize := int(size16)%(1<<20) + 1
		taken := func(r int) bool {
			if r < 1 || r >= mySize {
				t.Fatalf("checkHandshake asked whether rank %d (outside 1..%d) is taken", r, mySize-1)
			}
			return takenMask&(1<<(r%64)) != 0
		}
		reason := checkHandshake(rank, size, mySize, taken)
		ok := size == uint32(mySize) && rank >= 1 && rank < uint32(mySize) && takenMask&(1<<(rank%64)) == 0
		if ok != (reason == "") {
			t.Fatalf("rank %d size %d against size %d (taken %#x): reason %q", rank, size, mySize, takenMask, reason)
		}
	})
}

// FuzzAbortReason checks the Abort payload both ways. Any payload, as a
// peer may send it, is read without panicking: its structured line, when
// there is one, gives the rank (>= -1), op and cause, and the reason is
// what comes before it; a plain reason gives the rank of a leading "rank
// N" (or -1) and no cause. And every payload this package writes for a
// rank, op, cause and reason reads back as exactly those (the reason cut
// to fit), whatever the reason holds, line breaks and lookalike lines
// included.
func FuzzAbortReason(f *testing.F) {
	f.Add("rank 3 failed during allgatherv: connection reset", 0, 3)
	f.Add("rank 0", 0, -1)
	f.Add("rank ", 1, -1)
	f.Add("rank x", 2, 5)
	f.Add("rank -1 failed", 1, -7)
	big := int64(1) << 62 // a variable: the test also builds where int has 32 bits
	f.Add("rank 99999999999999999999999 failed", 0, int(big))
	f.Add("rank 0012 failed", 4, 12)
	f.Add("rank ١٢ failed", 1, 2) // Arabic-Indic digits are not ranks
	f.Add("Rank 3 failed", 1, 2)
	f.Add("", 0, 0)
	f.Add("rank 1 failed during barrier\nstarcomm-abort/1 rank=1 op=barrier cause=timeout", 0, 1)
	f.Add("x\nstarcomm-abort/1 rank=-5 op= cause=nope rank=zz", 0, 1)
	f.Add("starcomm-abort/1 rank=2", 3, 2)
	f.Add(strings.Repeat("\u00e9", MaxAbortReason), 1, 1)
	f.Fuzz(func(t *testing.T, text string, which, blamed int) {
		// Whatever arrives.
		var c bufConn
		c.Write(EncodeAbort(text))
		l := newLink(2, &c, time.Second)
		err := l.readFrame(TagBarrierGo)
		var ab *AbortError
		if !errors.As(err, &ab) || ab.From != 2 || ab.Rank < -1 || c.Len() != 0 {
			t.Fatalf("Abort %q read as %v (%d bytes left)", text, err, c.Len())
		}
		sent := string(capBytes([]byte(text), MaxAbortReason))
		i := strings.LastIndexByte(sent, '\n')
		structured := i >= 0 && strings.HasPrefix(sent[i+1:], abortStructMark)
		switch {
		case structured && ab.Reason != sent[:i]:
			t.Fatalf("structured Abort %q: reason %q", sent, ab.Reason)
		case !structured && (ab.Reason != sent || ab.Rank != leadingRankOracle(sent) || ab.Cause != nil || ab.Op != ""):
			t.Fatalf("plain Abort %q read as %+v", sent, ab)
		}

		// What this package writes.
		names := []string{"timeout", "eof", "unexpected-eof", "reset", "pipe", "tag", "op", "shutdown", "canceled", "deadline", "closed", "refused", ""}
		name := names[uint(which)%uint(len(names))]
		cause := causes[name]
		rank := max(blamed, -1) & (1<<20 - 1)
		if blamed < 0 {
			rank = -1
		}
		op := "allreduce"
		got := parseAbort(1, abortPayload(rank, op, cause, text))
		wantReason := string(capBytes([]byte(text), MaxAbortReason-len(abortStructMark)-64))
		if got.Rank != rank || got.Op != op || got.Cause != cause || !strings.HasPrefix(text, got.Reason) || len(got.Reason) < len(wantReason) {
			t.Fatalf("abortPayload(%d, %q, %q, %q) read back as %+v", rank, op, name, text, got)
		}
		if cause != nil && causeName(cause) != name {
			t.Fatalf("cause %q classifies as %q", name, causeName(cause))
		}
	})
}

// leadingRankOracle is the plain reason's rank, computed independently of
// leadingRank: the decimal digits after a leading "rank ", or -1.
func leadingRankOracle(reason string) int {
	rest, ok := strings.CutPrefix(reason, "rank ")
	if !ok {
		return -1
	}
	end := 0
	for end < len(rest) && rest[end] >= '0' && rest[end] <= '9' {
		end++
	}
	n, err := strconv.Atoi(rest[:end])
	if end == 0 || err != nil {
		return -1
	}
	return n
}
