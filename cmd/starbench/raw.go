package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"

	"github.com/starcomm/starcomm"
	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/transport"
	"github.com/starcomm/starcomm/transport/tcp"
)

// rawComm is the lower bound a star can reach on these sockets: the same
// bytes through the same TCP connections (the tcp driver, the same socket
// options) with a minimal relay through rank 0 and nothing else. No frame
// headers, no checks, no timeouts, no polling: each worker link is read and
// written by a goroutine of its own, as star's coordinator does for large
// frames. It is a benchmark baseline (--raw), not a communicator to use:
// a mismatch or a failure gives a wrong result or a hang.
type rawComm struct {
	rank, size int
	up         transport.Conn   // worker: the link to rank 0
	links      []transport.Conn // rank 0: links[r] to worker r
	scratch    []byte
	one        [1]byte
}

// newRaw connects the ranks described by cfg (the COBRE_* settings): rank 0
// listens on cfg.Port, each worker dials it and sends its rank as 4 bytes.
func newRaw(ctx context.Context, cfg starcomm.Config) (*rawComm, error) {
	tc := tcp.DefaultConfig()
	tc.BindAddr = cfg.BindAddr
	tc.Timeout = cfg.Timeout
	tc.ConnectTimeout = cfg.ConnectTimeout
	c := &rawComm{rank: cfg.Rank, size: cfg.Size}
	if cfg.Size == 1 {
		return c, nil
	}
	if cfg.Rank > 0 {
		conn, err := tcp.NewDialer(tc).Dial(ctx, net.JoinHostPort(cfg.Coordinator, strconv.Itoa(cfg.Port)))
		if err != nil {
			return nil, err
		}
		var hello [4]byte
		binary.BigEndian.PutUint32(hello[:], uint32(cfg.Rank))
		if _, err := conn.Write(hello[:]); err != nil {
			conn.Close()
			return nil, err
		}
		c.up = conn
		return c, nil
	}
	ln, err := tcp.Listen(tc, cfg.Port)
	if err != nil {
		return nil, err
	}
	defer ln.Close()
	if cfg.Listening != nil {
		cfg.Listening(ln.Port())
	}
	c.links = make([]transport.Conn, cfg.Size)
	for range cfg.Size - 1 {
		conn, err := ln.Accept()
		if err != nil {
			c.Close()
			return nil, err
		}
		var hello [4]byte
		if _, err := io.ReadFull(conn, hello[:]); err != nil {
			conn.Close()
			c.Close()
			return nil, err
		}
		r := int(binary.BigEndian.Uint32(hello[:]))
		if r < 1 || r >= cfg.Size || c.links[r] != nil {
			conn.Close()
			c.Close()
			return nil, fmt.Errorf("raw: bad or duplicate rank %d", r)
		}
		c.links[r] = conn
	}
	return c, nil
}

func (c *rawComm) Rank() int { return c.rank }
func (c *rawComm) Size() int { return c.size }

func (c *rawComm) Close() error {
	if c.up != nil {
		c.up.Close()
	}
	for _, l := range c.links {
		if l != nil {
			l.Close()
		}
	}
	return nil
}

// each runs f on every worker link (all but skip) concurrently and returns
// their errors joined.
func (c *rawComm) each(skip int, f func(r int, l transport.Conn) error) error {
	var wg sync.WaitGroup
	errs := make([]error, c.size)
	for r := 1; r < c.size; r++ {
		if r != skip {
			wg.Go(func() { errs[r] = f(r, c.links[r]) })
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}

// writeAll writes parts in order as one gathered write, as star does: the
// tcp driver's WriteBuffers, which leaves parts (shared by goroutines) as
// they are.
func writeAll(w transport.Conn, parts ...[]byte) error {
	if bw, ok := w.(transport.BuffersWriter); ok {
		_, err := bw.WriteBuffers(parts)
		return err
	}
	bufs := append(net.Buffers(nil), parts...)
	_, err := bufs.WriteTo(w)
	return err
}

func readAll(r io.Reader, parts ...[]byte) error {
	for _, p := range parts {
		if _, err := io.ReadFull(r, p); err != nil {
			return err
		}
	}
	return nil
}

func (c *rawComm) Allgatherv(_ context.Context, send, recv comm.View, counts, displs []int) error {
	es := recv.Type.Size()
	parts := make([][]byte, c.size)
	for r := range parts {
		parts[r] = recv.Bytes[displs[r]*es : (displs[r]+counts[r])*es]
	}
	if c.rank != 0 {
		if err := writeAll(c.up, send.Bytes); err != nil {
			return err
		}
		return readAll(c.up, parts...)
	}
	copy(parts[0], send.Bytes)
	if err := c.each(-1, func(r int, l transport.Conn) error { return readAll(l, parts[r]) }); err != nil {
		return err
	}
	return c.each(-1, func(_ int, l transport.Conn) error { return writeAll(l, parts...) })
}

func (c *rawComm) Allreduce(_ context.Context, send, recv comm.View, op comm.ReduceOp) error {
	n := len(send.Bytes)
	if c.rank != 0 {
		if err := writeAll(c.up, send.Bytes); err != nil {
			return err
		}
		return readAll(c.up, recv.Bytes)
	}
	if len(c.scratch) < c.size*n {
		// 8-byte aligned, as comm.Reduce wants its elements.
		c.scratch = comm.ViewOf(make([]uint64, (c.size*n+7)/8)).Bytes
	}
	in := c.scratch[:c.size*n]
	if err := c.each(-1, func(r int, l transport.Conn) error { return readAll(l, in[r*n:(r+1)*n]) }); err != nil {
		return err
	}
	copy(recv.Bytes, send.Bytes)
	for r := 1; r < c.size; r++ {
		comm.Reduce(send.Type, op, recv.Bytes, in[r*n:(r+1)*n])
	}
	return c.each(-1, func(_ int, l transport.Conn) error { return writeAll(l, recv.Bytes) })
}

func (c *rawComm) Broadcast(_ context.Context, buf comm.View, root int) error {
	switch {
	case c.size == 1:
		return nil
	case c.rank == root && c.rank != 0:
		return writeAll(c.up, buf.Bytes)
	case c.rank != 0:
		return readAll(c.up, buf.Bytes)
	}
	if root != 0 {
		if err := readAll(c.links[root], buf.Bytes); err != nil {
			return err
		}
	}
	return c.each(root, func(_ int, l transport.Conn) error { return writeAll(l, buf.Bytes) })
}

func (c *rawComm) Barrier(context.Context) error {
	if c.size == 1 {
		return nil
	}
	if c.rank != 0 {
		if err := writeAll(c.up, c.one[:]); err != nil {
			return err
		}
		return readAll(c.up, c.one[:])
	}
	if err := c.each(-1, func(_ int, l transport.Conn) error {
		var b [1]byte
		return readAll(l, b[:])
	}); err != nil {
		return err
	}
	return c.each(-1, func(_ int, l transport.Conn) error { return writeAll(l, []byte{1}) })
}

var _ comm.Communicator = (*rawComm)(nil)
