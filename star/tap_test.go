package star_test

import (
	"bytes"
	"context"
	"sync"

	"github.com/starcomm/starcomm/transport"
)

// tap records every byte read from and written to a Conn.
type tap struct {
	transport.Conn
	mu          sync.Mutex
	read, wrote bytes.Buffer
	onRead      func() // called (once per Read) before reading, if set
}

func (t *tap) Read(p []byte) (int, error) {
	t.mu.Lock()
	hook := t.onRead
	t.mu.Unlock()
	if hook != nil {
		hook()
	}
	n, err := t.Conn.Read(p)
	t.mu.Lock()
	t.read.Write(p[:n])
	t.mu.Unlock()
	return n, err
}

func (t *tap) Write(p []byte) (int, error) {
	n, err := t.Conn.Write(p)
	t.mu.Lock()
	t.wrote.Write(p[:n])
	t.mu.Unlock()
	return n, err
}

func (t *tap) counts() (read, wrote int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.read.Len(), t.wrote.Len()
}

func (t *tap) setOnRead(f func()) {
	t.mu.Lock()
	t.onRead = f
	t.mu.Unlock()
}

// taps collects the taps of every connection a test makes.
type taps struct {
	mu  sync.Mutex
	all []*tap
}

func (ts *taps) add(c transport.Conn) transport.Conn {
	t := &tap{Conn: c}
	ts.mu.Lock()
	ts.all = append(ts.all, t)
	ts.mu.Unlock()
	return t
}

func (ts *taps) dialer(d transport.Dialer) transport.Dialer {
	return transport.DialerFunc(func(ctx context.Context, addr string) (transport.Conn, error) {
		c, err := d.Dial(ctx, addr)
		if err != nil {
			return nil, err
		}
		return ts.add(c), nil
	})
}

func (ts *taps) listener(l transport.Listener) transport.Listener {
	return &tapListener{Listener: l, ts: ts}
}

type tapListener struct {
	transport.Listener
	ts *taps
}

func (l *tapListener) Accept() (transport.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return l.ts.add(c), nil
}

// totals returns the bytes read and written over every tapped conn.
func (ts *taps) totals() (read, wrote int) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for _, t := range ts.all {
		r, w := t.counts()
		read += r
		wrote += w
	}
	return read, wrote
}
