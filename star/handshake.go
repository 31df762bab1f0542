package star

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/starcomm/starcomm/transport"
)

// Handshake payload sizes (spec section 2.2).
const (
	handshakeLen = 8 // rank u32 BE, size u32 BE
	ackLen       = 4 // size u32 BE
)

// EncodeHandshake returns the full Handshake frame a worker sends.
func EncodeHandshake(rank, size int) []byte {
	b := make([]byte, HeaderSize+handshakeLen)
	PutHeader(b, TagHandshake, handshakeLen)
	binary.BigEndian.PutUint32(b[5:9], uint32(rank))
	binary.BigEndian.PutUint32(b[9:13], uint32(size))
	return b
}

// EncodeAck returns the full Ack frame the coordinator sends.
func EncodeAck(size int) []byte {
	b := make([]byte, HeaderSize+ackLen)
	PutHeader(b, TagAck, ackLen)
	binary.BigEndian.PutUint32(b[5:9], uint32(size))
	return b
}

// EncodeAbort returns the full Abort frame carrying reason, cut to
// MaxAbortReason bytes on a UTF-8 boundary.
func EncodeAbort(reason string) []byte {
	reason = string(capReason([]byte(reason)))
	b := make([]byte, HeaderSize+len(reason))
	PutHeader(b, TagAbort, len(reason))
	copy(b[HeaderSize:], reason)
	return b
}

// ParseHandshake decodes a Handshake payload.
func ParseHandshake(p []byte) (rank, size uint32, err error) {
	if len(p) != handshakeLen {
		return 0, 0, fmt.Errorf("handshake payload is %d bytes, expected %d", len(p), handshakeLen)
	}
	return binary.BigEndian.Uint32(p[0:4]), binary.BigEndian.Uint32(p[4:8]), nil
}

// RefusedError is the cause when the coordinator refuses a worker's
// handshake; Reason is the coordinator's explanation.
type RefusedError struct {
	Reason string
}

func (e *RefusedError) Error() string { return "handshake refused by coordinator: " + e.Reason }

// checkHandshake validates a worker's handshake against the coordinator's
// size and registered ranks; it returns the refusal reason, or "".
func checkHandshake(rank, size uint32, mySize int, taken func(int) bool) string {
	switch {
	case size != uint32(mySize):
		return fmt.Sprintf("size mismatch: worker rank %d says size %d, coordinator has size %d", rank, size, mySize)
	case rank == 0:
		return "rank 0 is the coordinator; workers have ranks 1.." + fmt.Sprint(mySize-1)
	case rank >= uint32(mySize):
		return fmt.Sprintf("rank %d out of range 1..%d", rank, mySize-1)
	case taken(int(rank)):
		return fmt.Sprintf("rank %d already registered", rank)
	}
	return ""
}

// accept runs the coordinator's start-up: accept connections, handshake each
// one concurrently (so a silent connection never blocks the others), and
// return the links of workers 1..size-1 once all have registered. Refused
// connections get an Abort frame with the reason and are closed; the
// coordinator keeps waiting for the real ranks.
func accept(ctx context.Context, cfg Config) ([]*link, error) {
	ln := cfg.Listener
	ctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	defer cancel()

	var (
		mu       sync.Mutex
		links    = make([]*link, cfg.Size)
		reserved = make([]bool, cfg.Size)
		pending  = map[transport.Conn]bool{} // connections mid-handshake
		joined   = 0
		all      = make(chan struct{})
		refusals []string
		wg       sync.WaitGroup
	)
	handshake := func(conn transport.Conn) {
		defer wg.Done()
		l := newLink(-1, conn, cfg.HandshakeTimeout)
		// The whole Handshake frame, and the Ack, within HandshakeTimeout.
		l.deadline = time.Now().Add(cfg.HandshakeTimeout)
		refuse := func(reason string) {
			mu.Lock()
			refusals = append(refusals, reason)
			mu.Unlock()
			// Drain while answering: the peer may still be blocked writing
			// the rest of a frame we refused to read.
			l.wdirty = false
			l.linger(TagAbort, []byte(reason), cfg.ShutdownTimeout)
			mu.Lock()
			delete(pending, conn)
			mu.Unlock()
		}
		var payload [handshakeLen]byte
		if err := l.readFrame(TagHandshake, payload[:]); err != nil {
			refuse(fmt.Sprintf("bad handshake: %v", err))
			return
		}
		rank, size, _ := ParseHandshake(payload[:])
		mu.Lock()
		reason := checkHandshake(rank, size, cfg.Size, func(r int) bool { return reserved[r] })
		if reason == "" {
			reserved[rank] = true
		}
		mu.Unlock()
		if reason != "" {
			refuse(reason)
			return
		}
		_ = conn.SetWriteDeadline(l.deadline)
		if _, err := conn.Write(EncodeAck(cfg.Size)); err != nil {
			mu.Lock()
			reserved[rank] = false
			delete(pending, conn)
			mu.Unlock()
			_ = conn.Close()
			return
		}
		mu.Lock()
		delete(pending, conn)
		links[rank] = newLink(int(rank), conn, cfg.Timeout)
		joined++
		if joined == cfg.Size-1 {
			close(all)
		}
		mu.Unlock()
	}

	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			if joined == cfg.Size-1 {
				mu.Unlock()
				_ = conn.Close()
				continue
			}
			pending[conn] = true
			wg.Add(1)
			mu.Unlock()
			go handshake(conn)
		}
	}()

	var err error
	select {
	case <-all:
	case <-ctx.Done():
		err = ctx.Err()
	}
	// Stop accepting, drop connections still mid-handshake, and wait for
	// every start-up goroutine before handing the links to the caller.
	_ = ln.Close()
	mu.Lock()
	for c := range pending {
		_ = c.Close()
	}
	mu.Unlock()
	wg.Wait()
	if err == nil || joined == cfg.Size-1 {
		// Every worker registered (the last one perhaps just as the wait
		// ended): start-up succeeded.
		return links, nil
	}
	var missing []int
	for r := 1; r < cfg.Size; r++ {
		if links[r] == nil {
			missing = append(missing, r)
		}
	}
	msg := fmt.Sprintf("%d of %d workers registered within %v; missing ranks %v", cfg.Size-1-len(missing), cfg.Size-1, cfg.ConnectTimeout, missing)
	if len(refusals) > 0 {
		msg += fmt.Sprintf("; refused %d connection(s), last: %s", len(refusals), refusals[len(refusals)-1])
	}
	// Tell the workers that did register which rank never came, so their
	// first collective fails naming it rather than the coordinator.
	reason := []byte(abortReason(missing[0], 0, "start-up", err, errors.New(msg)))
	var lg sync.WaitGroup
	for _, l := range links {
		if l != nil {
			lg.Go(func() { l.linger(TagAbort, reason, cfg.ShutdownTimeout) })
		}
	}
	lg.Wait()
	return nil, fmt.Errorf("%s: %w", msg, err)
}

// dial runs a worker's start-up: connect, send Handshake, read Ack.
func dial(ctx context.Context, cfg Config) (*link, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	defer cancel()
	conn, err := cfg.Dialer.Dial(ctx, cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("connect to coordinator at %s: %w", cfg.Addr, err)
	}
	deadline, _ := ctx.Deadline()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	fail := func(err error) (*link, error) {
		_ = conn.Close()
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", err, ctx.Err())
		}
		return nil, err
	}
	_ = conn.SetDeadline(deadline)
	if _, err := conn.Write(EncodeHandshake(cfg.Rank, cfg.Size)); err != nil {
		return fail(fmt.Errorf("send handshake to %s: %w", cfg.Addr, err))
	}
	l := newLink(0, conn, time.Until(deadline))
	l.deadline = deadline
	var payload [ackLen]byte
	if err := l.readFrame(TagAck, payload[:]); err != nil {
		var ab *AbortError
		if errors.As(err, &ab) {
			return fail(&RefusedError{Reason: ab.Reason})
		}
		return fail(fmt.Errorf("read handshake ack from %s: %w", cfg.Addr, err))
	}
	if got := binary.BigEndian.Uint32(payload[:]); got != uint32(cfg.Size) {
		return fail(fmt.Errorf("coordinator acknowledged size %d, this rank has size %d", got, cfg.Size))
	}
	stop()
	_ = conn.SetDeadline(time.Time{})
	l.deadline = time.Time{}
	l.timeout = cfg.Timeout + replyMargin(cfg.Timeout)
	l.rtimeout = l.timeout
	return l, nil
}
