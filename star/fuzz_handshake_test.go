package star_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/star"
	"github.com/starcomm/starcomm/testkit"
	"github.com/starcomm/starcomm/transport/pipe"
)

// FuzzHandshake sends arbitrary bytes, as the first bytes of a connection,
// to a real coordinator of a 3-rank communicator (over pipes, inside a
// synctest bubble so that HandshakeTimeout costs no real time), then lets
// the real workers join and run a barrier. Run it with
//
//	go test -run='^$' -fuzz='^FuzzHandshake$' -fuzztime=10s ./star/
//
// Properties: the coordinator never panics or hangs; the rogue gets an Ack
// exactly when its first 13 bytes are a valid Handshake for rank 1 or 2
// (then it plays that rank; anything after those 13 bytes is not sent),
// and otherwise one well-formed Abort frame with a non-empty reason and
// the connection's end, within HandshakeTimeout; the legitimate workers
// then join and a barrier completes on every rank.
func FuzzHandshake(f *testing.F) {
	for _, seed := range [][]byte{
		star.EncodeHandshake(1, 3),
		star.EncodeHandshake(2, 3),
		append(star.EncodeHandshake(2, 3), 0, 0, 0, 1, star.TagBarrierReady), // extra bytes are not sent
		star.EncodeHandshake(0, 3),
		star.EncodeHandshake(3, 3),
		star.EncodeHandshake(1, 4),
		star.EncodeHandshake(int(maxU32), 3),
		{},                              // silent
		{0, 0, 0},                       // truncated header
		{0, 0, 0, 9, star.TagHandshake}, // header, no payload
		star.EncodeHandshake(1, 3)[:9],  // truncated payload
		{0, 0, 0, 0, star.TagHandshake}, // LEN = 0
		{0xFF, 0xFF, 0xFF, 0xFF, star.TagHandshake, 0, 0, 0, 1},      // LEN = 4 GiB - 1
		{0, 0, 0, 5, star.TagHandshake, 0, 0, 0, 1},                  // LEN too small
		{0, 0, 0, 9, star.TagAllgathervSend, 0, 0, 0, 1, 0, 0, 0, 3}, // wrong tag
		{0, 0, 0, 1, star.TagShutdown},
		star.EncodeAbort("rank 1 failed during start-up"),
		{0, 1, 0, 1, star.TagAbort}, // Abort claiming a 64 KiB reason, absent
		{0xFF, 0xFF, 0xFF, 0xFF, star.TagAbort},
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		testkit.SyncTest(t, func(t *testing.T) { handshakeRound(t, data) })
	})
}

const (
	fuzzSize             = 3
	fuzzHandshakeTimeout = 50 * time.Millisecond
)

// validHandshake returns the rank that the first 13 bytes of data register
// as on a fresh coordinator of fuzzSize ranks, or 0 when they do not.
func validHandshake(data []byte) int {
	if len(data) < star.HeaderSize+8 || !bytes.Equal(data[:star.HeaderSize], []byte{0, 0, 0, 9, star.TagHandshake}) {
		return 0
	}
	rank, size, err := star.ParseHandshake(data[star.HeaderSize : star.HeaderSize+8])
	if err != nil || size != fuzzSize || rank < 1 || rank >= fuzzSize {
		return 0
	}
	return int(rank)
}

func handshakeRound(t *testing.T, data []byte) {
	nw := pipe.NewNetwork()
	ln, err := nw.Listen("coord")
	if err != nil {
		t.Fatal(err)
	}
	cfgFor := func(rank int) star.Config {
		cfg := star.DefaultConfig()
		cfg.Rank, cfg.Size = rank, fuzzSize
		cfg.Timeout = time.Second
		cfg.HandshakeTimeout = fuzzHandshakeTimeout
		cfg.ShutdownTimeout = 50 * time.Millisecond
		if rank == 0 {
			cfg.Listener = ln
		} else {
			cfg.Dialer, cfg.Addr = nw, "coord"
		}
		return cfg
	}
	comms := make([]comm.Communicator, fuzzSize)
	errs := make([]error, fuzzSize)
	var ranks sync.WaitGroup
	defer func() { _ = testkit.CloseAll(comms) }()
	ranks.Go(func() { comms[0], errs[0] = newRank(cfgFor(0)) })

	var writer sync.WaitGroup
	defer writer.Wait() // after conn.Close, which ends a blocked write
	conn, err := nw.Dial(context.Background(), "coord")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rank := validHandshake(data)
	send := data
	if rank > 0 {
		send = data[:star.HeaderSize+8]
	}
	begin := time.Now()
	if len(send) > 0 {
		writer.Go(func() { _, _ = conn.Write(send) })
	}
	startWorkers := func() {
		// The legitimate workers join (the rogue is rank `rank`, if any).
		for r := 1; r < fuzzSize; r++ {
			if r != rank {
				ranks.Go(func() { comms[r], errs[r] = newRank(cfgFor(r)) })
			}
		}
	}
	if rank > 0 {
		// A valid handshake registers: its Ack comes once every rank has
		// joined.
		startWorkers()
	}
	tag, payload, err := readRawFrame(conn, star.MaxAbortReason)
	if err != nil {
		t.Fatalf("sent %x: reply: %v", send, err)
	}
	if took := time.Since(begin); took > fuzzHandshakeTimeout && rank == 0 {
		t.Fatalf("sent %x: reply after %v, HandshakeTimeout is %v", send, took, fuzzHandshakeTimeout)
	}
	switch {
	case rank > 0:
		if tag != star.TagAck || binary.BigEndian.Uint32(payload) != fuzzSize || len(payload) != 4 {
			t.Fatalf("valid handshake %x for rank %d: reply %s %x", send, rank, star.TagName(tag), payload)
		}
	default:
		if tag != star.TagAbort || len(payload) == 0 {
			t.Fatalf("sent %x: reply %s %q, want an Abort with a reason", send, star.TagName(tag), payload)
		}
		if rest, err := io.ReadAll(conn); len(rest) > 0 || err != nil {
			t.Fatalf("sent %x: after the Abort: %x, %v", send, rest, err)
		}
		startWorkers()
	}

	ranks.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("after rogue %x: start-up: %v", send, err)
	}
	var rogue error
	var played sync.WaitGroup
	if rank > 0 {
		// The acknowledged rogue plays its rank: one barrier, then the
		// coordinator's Shutdown.
		played.Go(func() { rogue = playBarrierThenShutdown(conn) })
	}
	barrier := testkit.RunRanks(comms, func(c comm.Communicator) error {
		if c == nil {
			return nil
		}
		return c.Barrier(context.Background())
	})
	if err := errors.Join(barrier...); err != nil {
		t.Fatalf("after rogue %x: barrier: %v", send, err)
	}
	_ = testkit.CloseAll(comms)
	played.Wait()
	if rogue != nil {
		t.Fatalf("acknowledged rogue rank %d: %v", rank, rogue)
	}
}

// newRank starts a rank; on failure the Communicator is nil (not a nil
// *star.Comm in an interface).
func newRank(cfg star.Config) (comm.Communicator, error) {
	c, err := star.New(context.Background(), cfg)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// playBarrierThenShutdown plays a worker over a raw connection: BarrierReady,
// BarrierGo, then the Shutdown of the coordinator's Close and the end of
// the connection.
func playBarrierThenShutdown(conn io.ReadWriter) error {
	if _, err := conn.Write([]byte{0, 0, 0, 1, star.TagBarrierReady}); err != nil {
		return err
	}
	for _, want := range []byte{star.TagBarrierGo, star.TagShutdown} {
		tag, payload, err := readRawFrame(conn, 0)
		if err != nil {
			return err
		}
		if tag != want || len(payload) != 0 {
			return fmt.Errorf("got %s %x, want %s", star.TagName(tag), payload, star.TagName(want))
		}
	}
	if rest, err := io.ReadAll(conn); len(rest) > 0 || err != nil {
		return fmt.Errorf("after Shutdown: %x, %v", rest, err)
	}
	return nil
}
