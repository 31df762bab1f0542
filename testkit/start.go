package testkit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/star"
	"github.com/starcomm/starcomm/transport"
	"github.com/starcomm/starcomm/transport/pipe"
)

// Network is what StartStar needs from a driver: a fresh listener for the
// coordinator and a dialer for the workers.
type Network interface {
	Listen() (transport.Listener, error)
	Dialer() transport.Dialer
}

// PipeNetwork is a Network over an in-memory pipe.Network; each Listen gets
// a fresh name.
//
// NewPipeNetwork's pipes are unbuffered, as net.Pipe's: a write waits for
// the peer's read, where a socket would take a few bytes and return. Two
// things then differ from TCP, where a socket buffer holds them:
//   - Close the ranks together (CloseAll), as separate processes would.
//     Closed one after another, rank 0's Close waits up to
//     ShutdownTimeout for a worker that is not closing yet to read its
//     Shutdown, fails naming it, and the workers then find rank 0 gone
//     without it.
//   - A rank whose collective fails on its own (its context, or Close)
//     after rank 0 has read its part writes an Abort that rank 0 does not
//     read: the others are still named that rank, promptly, but often
//     with the cause io.EOF (the rank closed its end) rather than the
//     context's error.
//
// Set Net.Buffer (for example 1 << 20, before the first Listen) for pipes
// that buffer as sockets do.
type PipeNetwork struct {
	Net *pipe.Network
	n   atomic.Int64
}

// NewPipeNetwork returns a PipeNetwork over a new pipe.Network.
func NewPipeNetwork() *PipeNetwork { return &PipeNetwork{Net: pipe.NewNetwork()} }

// Listen registers a listener under a fresh name.
func (p *PipeNetwork) Listen() (transport.Listener, error) {
	return p.Net.Listen(fmt.Sprintf("coordinator-%d", p.n.Add(1)))
}

// Dialer returns the pipe network.
func (p *PipeNetwork) Dialer() transport.Dialer { return p.Net }

// StartStar starts size ranks of a star communicator in this process over
// nw and returns them indexed by rank. tweak, if not nil, adjusts each
// rank's Config (timeouts, a wrapped Dialer) before it starts. On error every
// rank already started is closed.
func StartStar(ctx context.Context, nw Network, size int, tweak func(*star.Config)) ([]comm.Communicator, error) {
	comms, _, err := StartStarTimed(ctx, nw, size, tweak)
	return comms, err
}

// StartStarTimed is StartStar that also returns how long each rank's
// star.New took.
func StartStarTimed(ctx context.Context, nw Network, size int, tweak func(*star.Config)) ([]comm.Communicator, []time.Duration, error) {
	if size < 1 {
		return nil, nil, fmt.Errorf("testkit: StartStar: size is %d; a star has at least 1 rank", size)
	}
	ln, err := nw.Listen()
	if err != nil {
		return nil, nil, err
	}
	comms := make([]comm.Communicator, size)
	took := make([]time.Duration, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := 0; r < size; r++ {
		cfg := star.DefaultConfig()
		cfg.Rank, cfg.Size = r, size
		if r == 0 {
			cfg.Listener = ln
		} else {
			cfg.Dialer, cfg.Addr = nw.Dialer(), ln.Addr()
		}
		if tweak != nil {
			tweak(&cfg)
		}
		wg.Go(func() {
			begin := time.Now()
			c, err := star.New(ctx, cfg)
			took[r] = time.Since(begin)
			if err != nil {
				errs[r] = fmt.Errorf("rank %d: %w", r, err)
				return
			}
			comms[r] = c
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		CloseAll(comms)
		return nil, took, err
	}
	return comms, took, nil
}

// LateDialer is a Dialer whose process starts late: it waits Delay, then
// dials through Dialer.
type LateDialer struct {
	Dialer transport.Dialer
	Delay  time.Duration
}

// Dial waits Delay, then dials.
func (l LateDialer) Dial(ctx context.Context, addr string) (transport.Conn, error) {
	time.Sleep(l.Delay)
	return l.Dialer.Dial(ctx, addr)
}

// CloseAll closes every non-nil communicator concurrently, as separate
// processes would, and returns the errors joined.
func CloseAll(comms []comm.Communicator) error {
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for i, c := range comms {
		if c != nil {
			wg.Go(func() { errs[i] = c.Close() })
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}

// RunRanks runs f on every rank concurrently and returns each rank's error.
func RunRanks(comms []comm.Communicator, f func(c comm.Communicator) error) []error {
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for i, c := range comms {
		wg.Go(func() { errs[i] = f(c) })
	}
	wg.Wait()
	return errs
}
