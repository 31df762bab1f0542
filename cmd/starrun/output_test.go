package main

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// recordingWriter records every Write call separately.
type recordingWriter struct{ writes []string }

// Write records p as one write.
func (w *recordingWriter) Write(p []byte) (int, error) {
	w.writes = append(w.writes, string(p))
	return len(p), nil
}

func TestCopyLines(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("y", readBufferBytes*3+17) // spans several buffer fills
	tests := []struct {
		name    string
		in      string
		maxLine int
		want    []string // one entry per Write
	}{
		{name: "input=empty", in: "", maxLine: 8},
		{name: "input=lines", in: "a\nbb\n", maxLine: 8, want: []string{"[3] a\n", "[3] bb\n"}},
		{name: "input=partial-last", in: "a\nbb", maxLine: 8, want: []string{"[3] a\n", "[3] bb\n"}},
		{name: "input=empty-lines", in: "\n\nx", maxLine: 8, want: []string{"[3] \n", "[3] \n", "[3] x\n"}},
		{name: "input=crlf", in: "a\r\n", maxLine: 8, want: []string{"[3] a\r\n"}},
		{name: "input=exactly-max", in: "12345678\n", maxLine: 8, want: []string{"[3] 12345678\n"}},
		{name: "input=over-max", in: "123456789\nz\n", maxLine: 4, want: []string{"[3] 1234\n", "[3] 5678\n", "[3] 9\n", "[3] z\n"}},
		{name: "input=over-max-partial", in: "123456789", maxLine: 4, want: []string{"[3] 1234\n", "[3] 5678\n", "[3] 9\n"}},
		{name: "input=longer-than-buffer", in: big + "\nend", maxLine: maxLineBytes, want: []string{"[3] " + big + "\n", "[3] end\n"}},
	}
	readers := map[string]func(string) io.Reader{
		"reader=whole":    func(s string) io.Reader { return strings.NewReader(s) },
		"reader=one-byte": func(s string) io.Reader { return iotest.OneByteReader(strings.NewReader(s)) },
	}
	for _, tt := range tests {
		for rname, mk := range readers {
			t.Run(tt.name+"/"+rname, func(t *testing.T) {
				t.Parallel()
				var w recordingWriter
				if err := copyLines(&w, mk(tt.in), "[3] ", tt.maxLine); err != nil {
					t.Fatalf("copyLines: %v", err)
				}
				if len(w.writes) != len(tt.want) {
					t.Fatalf("got %d writes, want %d: %.300q", len(w.writes), len(tt.want), w.writes)
				}
				for i := range w.writes {
					if w.writes[i] != tt.want[i] {
						t.Errorf("write %d = %.100q, want %.100q", i, w.writes[i], tt.want[i])
					}
				}
			})
		}
	}
}

func TestCopyLinesReadError(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	var out bytes.Buffer
	err := copyLines(&out, io.MultiReader(strings.NewReader("a\nhalf"), iotest.ErrReader(boom)), "[0] ", maxLineBytes)
	if !errors.Is(err, boom) {
		t.Errorf("copyLines error = %v, want %v", err, boom)
	}
	if want := "[0] a\n[0] half\n"; out.String() != want {
		t.Errorf("output = %q, want %q", out.String(), want)
	}
}
