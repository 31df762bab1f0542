package launch

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"sync"
)

// MaxLineBytes is the longest output line copied whole; longer lines are
// split into pieces of this size, each printed as a line of its own with
// the prefix, so a rank that never writes a newline (a progress bar) cannot
// hold a destination or grow memory without bound.
const MaxLineBytes = 1 << 20

// readBufferBytes is the size of the buffer each output stream is read with.
const readBufferBytes = 64 << 10

// SyncWriter serializes writes to W: every Write reaches W whole and alone,
// so lines written with one Write never interleave. The zero value with W
// set is ready to use.
type SyncWriter struct {
	mu sync.Mutex
	W  io.Writer
	// Lock, if set, is taken instead of the writer's own lock: writers
	// whose destinations may be one file (standard output and standard
	// error both sent to one pipe, 2>&1) share it, so that a line of one
	// never lands inside a line of the other.
	Lock *sync.Mutex
}

// Write writes p to W while holding the lock.
func (s *SyncWriter) Write(p []byte) (int, error) {
	mu := s.Lock
	if mu == nil {
		mu = &s.mu
	}
	mu.Lock()
	defer mu.Unlock()
	return s.W.Write(p)
}

// Printf writes one formatted line (a newline is appended) with one Write.
func (s *SyncWriter) Printf(format string, args ...any) {
	fmt.Fprintf(s, format+"\n", args...)
}

// copyLines copies src to dst line by line, putting prefix before every line
// and writing each line with a single dst.Write. A final line without a
// newline gets one, and a line longer than maxLine bytes (newline excluded)
// is split into lines of maxLine bytes. Errors from dst are ignored so a
// rank never blocks on a full pipe because the launcher's output went away.
// copyLines returns nil at EOF and the read error otherwise.
func copyLines(dst io.Writer, src io.Reader, prefix string, maxLine int) error {
	br := bufio.NewReaderSize(src, readBufferBytes)
	var line []byte // the start of the current line, when it spans reads
	var out []byte  // the bytes handed to dst
	emit := func(parts ...[]byte) {
		out = append(out[:0], prefix...)
		for _, p := range parts {
			out = append(out, p...)
		}
		out = append(out, '\n')
		_, _ = dst.Write(out)
	}
	for {
		chunk, err := br.ReadSlice('\n')
		complete := err == nil // chunk ends with the line's newline
		if complete {
			chunk = chunk[:len(chunk)-1]
		}
		for len(line)+len(chunk) > maxLine {
			k := maxLine - len(line)
			emit(line, chunk[:k])
			line, chunk = line[:0], chunk[k:]
		}
		if complete {
			emit(line, chunk)
			line = line[:0]
			continue
		}
		line = append(line, chunk...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if len(line) > 0 {
			emit(line)
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		return err
	}
}

// copyRaw copies src to dst unchanged, dropping dst's errors (as copyLines
// does), until EOF or a read error, which it returns (nil at EOF).
func copyRaw(dst io.Writer, src io.Reader) error {
	buf := make([]byte, readBufferBytes)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			_, _ = dst.Write(buf[:n])
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
