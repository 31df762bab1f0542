package launch

import (
	"bytes"
	"errors"
	"io"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"sync"
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
		{name: "input=longer-than-buffer", in: big + "\nend", maxLine: MaxLineBytes, want: []string{"[3] " + big + "\n", "[3] end\n"}},
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
	err := copyLines(&out, io.MultiReader(strings.NewReader("a\nhalf"), iotest.ErrReader(boom)), "[0] ", MaxLineBytes)
	if !errors.Is(err, boom) {
		t.Errorf("copyLines error = %v, want %v", err, boom)
	}
	if want := "[0] a\n[0] half\n"; out.String() != want {
		t.Errorf("output = %q, want %q", out.String(), want)
	}
}

func TestCopyRaw(t *testing.T) {
	t.Parallel()
	in := "no prefix\n" + strings.Repeat("z", readBufferBytes+5) + "\nlast, no newline"
	var w recordingWriter
	if err := copyRaw(&w, iotest.HalfReader(strings.NewReader(in))); err != nil {
		t.Fatalf("copyRaw: %v", err)
	}
	if got := strings.Join(w.writes, ""); got != in {
		t.Errorf("copyRaw changed the bytes: got %d bytes, want %d", len(got), len(in))
	}
	boom := errors.New("boom")
	if err := copyRaw(&w, iotest.ErrReader(boom)); !errors.Is(err, boom) {
		t.Errorf("copyRaw error = %v, want %v", err, boom)
	}
}

func TestSyncWriterKeepsLinesWhole(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	w := &SyncWriter{W: &buf}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for range 200 {
				w.Printf("[%d] %s", g, strings.Repeat("x", 100))
			}
		})
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 8*200 {
		t.Fatalf("%d lines, want %d", len(lines), 8*200)
	}
	re := regexp.MustCompile(`^\[\d\] x{100}$`)
	for _, l := range lines {
		if !re.MatchString(l) {
			t.Fatalf("line %q was cut or interleaved", l)
		}
	}
}

// halvesWriter writes each p into a buffer shared with other
// halvesWriters in two halves, yielding between them, as a pipe takes a
// large write in pieces: two streams sent to one file (2>&1).
type halvesWriter struct {
	mu  *sync.Mutex
	buf *bytes.Buffer
}

func (w halvesWriter) Write(p []byte) (int, error) {
	for _, half := range [][]byte{p[:len(p)/2], p[len(p)/2:]} {
		w.mu.Lock()
		w.buf.Write(half)
		w.mu.Unlock()
		runtime.Gosched()
	}
	return len(p), nil
}

// TestRunStdoutStderrOneFile: ranks writing long lines to standard output
// and standard error, both sent to one file by two writers: no line lands
// inside another.
func TestRunStdoutStderrOneFile(t *testing.T) {
	t.Parallel()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh to run fake ranks with")
	}
	const script = `x=$(printf '%04000d' 0); i=0; while [ $i -lt 100 ]; do echo "o$x"; echo "e$x" >&2; i=$((i+1)); done`
	var mu sync.Mutex
	var buf bytes.Buffer
	res := Run(Config{Name: "test", Command: []string{sh, "-c", script}, Ranks: 2,
		Stdout: halvesWriter{&mu, &buf}, Stderr: halvesWriter{&mu, &buf}})
	if res.Code != 0 {
		t.Fatalf("result %+v:\n%s", res, buf.String())
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 2*2*100 {
		t.Fatalf("%d lines, want %d", len(lines), 400)
	}
	re := regexp.MustCompile(`^\[[01]\] [oe]0+$`)
	for _, l := range lines {
		if !re.MatchString(l) || len(l) != len("[0] o")+4000 {
			t.Fatalf("line of %d bytes %.60q... was cut or mixed with another", len(l), l)
		}
	}
}
