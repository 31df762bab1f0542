// Package pipe is an in-memory transport driver: a Network of named
// listeners whose connections are net.Pipe pairs. Writes are unbuffered (a
// Write blocks until the peer reads), so protocol code that only works thanks
// to kernel socket buffers deadlocks here, which is the point. Deadlines and
// Close behave as on a socket: a deadline error satisfies
// errors.Is(err, os.ErrDeadlineExceeded), Close unblocks both ends, and the
// peer then reads io.EOF.
//
// Dialing a name nobody listens on fails at once with an error wrapping
// syscall.ECONNREFUSED. A Dial waits until the listener accepts the
// connection (or ctx is done, or the listener closes), like a TCP connect
// to a full backlog would.
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
// call NewNetwork.
type Network struct {
	mu        sync.Mutex
	listeners map[string]*Listener
}

// NewNetwork returns an empty network.
func NewNetwork() *Network {
	return &Network{listeners: make(map[string]*Listener)}
}

// Listener is a named pipe listener.
type Listener struct {
	net     *Network
	name    string
	conns   chan net.Conn
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
	l := &Listener{net: n, name: name, conns: make(chan net.Conn), done: make(chan struct{})}
	n.listeners[name] = l
	return l, nil
}

// Dial connects to the listener named addr.
func (n *Network) Dial(ctx context.Context, name string) (transport.Conn, error) {
	n.mu.Lock()
	l := n.listeners[name]
	n.mu.Unlock()
	if l == nil {
		return nil, &net.OpError{Op: "dial", Net: "pipe", Addr: addr(name), Err: fmt.Errorf("no listener named %q: %w", name, syscall.ECONNREFUSED)}
	}
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
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
