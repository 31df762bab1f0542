package pipe

import (
	"context"
	"fmt"
	"net"
	"sync"
	"syscall"

	"github.com/starcomm/starcomm/transport"
)

// Network is a namespace of pipe listeners. The zero value is not usable;
// call NewNetwork. Set the option fields before the first Dial and do not
// change them while Dials may run: each Dial reads them once, and a
// connection keeps the options it was made with.
type Network struct {
	// Buffer is the capacity, in bytes, of each direction of the
	// connections Dial makes. 0 (the default) is unbuffered, as net.Pipe:
	// a Write returns only once the peer has read all of it, so protocol
	// code that relies on kernel socket buffers deadlocks, which is the
	// point. N > 0 acts like a socket buffer of N bytes: a Write returns
	// once its bytes fit in the buffer. Negative values count as 0.
	Buffer int
	// NoPoll makes Dial and Accept return connections without the
	// transport.Poller ability (no ReadNow, WriteNow, Yield), so that a
	// caller can test its path for a transport that cannot poll. The
	// connections keep the other abilities (the net.Conn methods, and
	// transport.CloseWriter unless NoCloseWrite); their type is then not
	// *Conn.
	NoPoll bool
	// NoCloseWrite makes Dial and Accept return connections without the
	// transport.CloseWriter ability (no CloseWrite), as net.Pipe's, so
	// that a caller can test its path for a transport that cannot
	// half-close. With NoPoll too, the connections have neither ability.
	NoCloseWrite bool

	mu        sync.Mutex
	listeners map[string]*Listener
}

// NewNetwork returns an empty network with unbuffered, pollable
// connections; set Network.Buffer or Network.NoPoll before use to change
// that.
func NewNetwork() *Network {
	return &Network{listeners: make(map[string]*Listener)}
}

// Listener is a named pipe listener.
type Listener struct {
	net     *Network
	name    string
	conns   chan transport.Conn
	done    chan struct{}
	closeMu sync.Once
}

var _ transport.Listener = (*Listener)(nil)
var _ transport.Dialer = (*Network)(nil)

// Listen registers a listener under name. A name already in use fails with an
// error wrapping syscall.EADDRINUSE.
func (n *Network) Listen(name string) (*Listener, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.listeners[name]; ok {
		return nil, &net.OpError{Op: "listen", Net: "pipe", Addr: addr(name), Err: fmt.Errorf("address %q already in use: %w", name, syscall.EADDRINUSE)}
	}
	l := &Listener{net: n, name: name, conns: make(chan transport.Conn), done: make(chan struct{})}
	n.listeners[name] = l
	return l, nil
}

// Dial connects to the listener named name. It fails at once with an
// error wrapping syscall.ECONNREFUSED when nobody listens on name, and
// otherwise waits until the listener accepts the connection, or ctx is
// done (an error wrapping ctx.Err()), or the listener closes (an error
// wrapping syscall.ECONNREFUSED).
func (n *Network) Dial(ctx context.Context, name string) (transport.Conn, error) {
	n.mu.Lock()
	l := n.listeners[name]
	size, noPoll, noCloseWrite := max(n.Buffer, 0), n.NoPoll, n.NoCloseWrite
	n.mu.Unlock()
	if l == nil {
		return nil, &net.OpError{Op: "dial", Net: "pipe", Addr: addr(name), Err: fmt.Errorf("no listener named %q: %w", name, syscall.ECONNREFUSED)}
	}
	client, server := newPair(addr(name), size)
	c, s := show(client, noPoll, noCloseWrite), show(server, noPoll, noCloseWrite)
	select {
	case l.conns <- s:
		return c, nil
	case <-l.done:
		client.Close()
		server.Close()
		return nil, &net.OpError{Op: "dial", Net: "pipe", Addr: addr(name), Err: fmt.Errorf("listener %q closed: %w", name, syscall.ECONNREFUSED)}
	case <-ctx.Done():
		client.Close()
		server.Close()
		return nil, &net.OpError{Op: "dial", Net: "pipe", Addr: addr(name), Err: ctx.Err()}
	}
}

// Accept waits for a Dial. After Close it returns an error wrapping
// net.ErrClosed.
func (l *Listener) Accept() (transport.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, &net.OpError{Op: "accept", Net: "pipe", Addr: addr(l.name), Err: net.ErrClosed}
	}
}

// Close unregisters the listener and unblocks Accept and pending Dials.
func (l *Listener) Close() error {
	l.closeMu.Do(func() {
		close(l.done)
		l.net.mu.Lock()
		if l.net.listeners[l.name] == l {
			delete(l.net.listeners, l.name)
		}
		l.net.mu.Unlock()
	})
	return nil
}

// Addr returns the listener's name.
func (l *Listener) Addr() string { return l.name }

type addr string

func (a addr) Network() string { return "pipe" }
func (a addr) String() string  { return string(a) }

// show returns c with the abilities the options leave it: c itself, or a
// wrapper that has only the methods of the abilities kept.
func show(c *Conn, noPoll, noCloseWrite bool) transport.Conn {
	switch {
	case noPoll && noCloseWrite:
		return netConn{c}
	case noPoll:
		return noPollConn{c}
	case noCloseWrite:
		return noCloseWriteConn{c}
	}
	return c
}

// netConn, noPollConn and noCloseWriteConn show a *Conn with fewer
// abilities: a struct embedding an interface gets only that interface's
// methods.
type (
	netConn          struct{ net.Conn }
	noPollConn       struct{ closeWriterConn }
	noCloseWriteConn struct{ pollerConn }
	closeWriterConn  interface {
		net.Conn
		transport.CloseWriter
	}
	pollerConn interface {
		net.Conn
		transport.Poller
	}
)

var (
	_ transport.Conn        = netConn{}
	_ transport.CloseWriter = noPollConn{}
	_ transport.Poller      = noCloseWriteConn{}
)
