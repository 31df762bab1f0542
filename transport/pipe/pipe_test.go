package pipe_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/starcomm/starcomm/transport"
	"github.com/starcomm/starcomm/transport/pipe"
	"github.com/starcomm/starcomm/transport/transporttest"
)

// watchdog bounds every blocking step in the pipe-specific tests.
const watchdog = 10 * time.Second

func TestConformance(t *testing.T) {
	for _, mode := range []struct {
		name string
		mk   func() *pipe.Network
	}{
		{"unbuffered", pipe.NewNetwork},
		{"buffer=1", func() *pipe.Network { n := pipe.NewNetwork(); n.Buffer = 1; return n }},
		{"buffer=64KiB", func() *pipe.Network { n := pipe.NewNetwork(); n.Buffer = 64 << 10; return n }},
		{"nopoll", func() *pipe.Network { n := pipe.NewNetwork(); n.NoPoll = true; return n }},
		{"nopoll+noclosewrite", func() *pipe.Network {
			n := pipe.NewNetwork()
			n.NoPoll, n.NoCloseWrite = true, true
			return n
		}},
	} {
		t.Run("mode="+mode.name, func(t *testing.T) {
			transporttest.Run(t, func(t *testing.T) transporttest.Harness {
				n := mode.mk()
				var seq atomic.Int64
				return transporttest.Harness{
					Listen: func() (transport.Listener, error) {
						l, err := n.Listen(fmt.Sprintf("listener-%d", seq.Add(1)))
						if err != nil {
							return nil, err
						}
						return l, nil
					},
					Dialer:   n,
					DeadAddr: func(*testing.T) string { return "nobody-listens-here" },
				}
			})
		})
	}
}

// dialAsync runs Dial in a goroutine and delivers its error, closing any
// connection it returns.
func dialAsync(ctx context.Context, n *pipe.Network, name string) <-chan error {
	ch := make(chan error, 1)
	go func() {
		c, err := n.Dial(ctx, name)
		if c != nil {
			c.Close()
		}
		ch <- err
	}()
	return ch
}

func awaitErr(t *testing.T, ch <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(watchdog):
		t.Fatalf("hang: %s did not return within %v", what, watchdog)
		return nil
	}
}

func TestListenDuplicateName(t *testing.T) {
	n := pipe.NewNetwork()
	l, err := n.Listen("coordinator")
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	defer l.Close()
	_, err = n.Listen("coordinator")
	if !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("second Listen(%q): got %v, want an error wrapping syscall.EADDRINUSE", "coordinator", err)
	}
	// Once the first listener closes, the name is free again.
	l.Close()
	l2, err := n.Listen("coordinator")
	if err != nil {
		t.Fatalf("Listen after Close: %v", err)
	}
	l2.Close()
}

func TestDialWaitsForAcceptUntilContextDone(t *testing.T) {
	n := pipe.NewNetwork()
	l, err := n.Listen("busy")
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	defer l.Close()
	ctx, cancel := context.WithCancel(t.Context())
	dial := dialAsync(ctx, n, "busy") // nobody accepts
	cancel()
	if err := awaitErr(t, dial, "Dial to a listener that never accepts"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Dial after cancel: got %v, want an error wrapping context.Canceled", err)
	}
}

func TestDialFailsWhenListenerCloses(t *testing.T) {
	n := pipe.NewNetwork()
	l, err := n.Listen("closing")
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	dial := dialAsync(t.Context(), n, "closing") // pending, nobody accepts
	l.Close()
	if err := awaitErr(t, dial, "Dial pending during Listener.Close"); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("Dial pending during Listener.Close: got %v, want an error wrapping syscall.ECONNREFUSED", err)
	}
	// A Dial after Close is refused at once.
	if err := awaitErr(t, dialAsync(t.Context(), n, "closing"), "Dial after Listener.Close"); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("Dial after Listener.Close: got %v, want an error wrapping syscall.ECONNREFUSED", err)
	}
	var opErr *net.OpError
	if err := awaitErr(t, dialAsync(t.Context(), n, "closing"), "Dial after Listener.Close"); !errors.As(err, &opErr) || opErr.Op != "dial" {
		t.Fatalf("Dial after Listener.Close: got %v, want a *net.OpError with Op dial", err)
	}
}
