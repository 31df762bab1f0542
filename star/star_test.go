package star_test

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/star"
	"github.com/starcomm/starcomm/testkit"
	"github.com/starcomm/starcomm/transport/pipe"
)

// start starts size ranks over pipes with tweak applied, closing them when
// the test ends.
func start(t testing.TB, size int, tweak func(*star.Config)) []comm.Communicator {
	t.Helper()
	comms, err := testkit.StartStar(context.Background(), testkit.NewPipeNetwork(), size, tweak)
	require.NoError(t, err)
	t.Cleanup(func() { _ = testkit.CloseAll(comms) })
	return comms
}

// tapped starts size ranks whose every connection is tapped.
func tapped(t testing.TB, size int, tweak func(*star.Config)) ([]comm.Communicator, *taps) {
	ts := &taps{}
	comms := start(t, size, func(c *star.Config) {
		if c.Listener != nil {
			c.Listener = ts.listener(c.Listener)
		}
		if c.Dialer != nil {
			c.Dialer = ts.dialer(c.Dialer)
		}
		if tweak != nil {
			tweak(c)
		}
	})
	return comms, ts
}

func hexOf(s string) []byte {
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		panic(err)
	}
	return b
}

func join(frames ...string) []byte {
	var out []byte
	for _, f := range frames {
		out = append(out, hexOf(f)...)
	}
	return out
}

// TestWireTranscript records what a worker sends and receives through a
// sequence of every collective and compares it with the spec's bytes.
func TestWireTranscript(t *testing.T) {
	testkit.CheckGoroutines(t)
	ts := &taps{}
	comms := start(t, 2, func(c *star.Config) {
		c.Liveness = -1 // the data link alone, as the spec has it
		if c.Dialer != nil {
			c.Dialer = ts.dialer(c.Dialer)
		}
	})
	ctx := context.Background()
	errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
		r := c.Rank()
		recv := make([]uint8, 3)
		send := [][]uint8{{0xAA}, {0xBB, 0xCC}}[r]
		if err := comm.Allgatherv(ctx, c, send, recv, []int{1, 2}, []int{0, 1}); err != nil {
			return err
		}
		red := make([]uint8, 2)
		if err := comm.Allreduce(ctx, c, [][]uint8{{1, 5}, {3, 2}}[r], red, comm.Max); err != nil {
			return err
		}
		b1 := []uint8{7, 8}
		if r == 0 {
			b1 = make([]uint8, 2)
		}
		if err := comm.Broadcast(ctx, c, b1, 1); err != nil {
			return err
		}
		b0 := []uint8{9}
		if r == 1 {
			b0 = []uint8{0}
		}
		if err := comm.Broadcast(ctx, c, b0, 0); err != nil {
			return err
		}
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		if fmt.Sprint(recv, red, b1, b0) != "[170 187 204] [3 5] [7 8] [9]" {
			return fmt.Errorf("results %v %v %v %v", recv, red, b1, b0)
		}
		return nil
	})
	require.NoError(t, errors.Join(errs...))
	// Close the coordinator while the worker waits in a barrier: it reads
	// Shutdown; the coordinator's Close reports the worker that was still
	// in a collective it never called.
	done := make(chan error, 1)
	go func() { done <- comms[1].Barrier(ctx) }()
	cerr := comms[0].Close()
	werr := <-done
	require.ErrorIs(t, werr, star.ErrShutdown)
	var cf *comm.CollectiveFailedError
	require.ErrorAs(t, werr, &cf)
	assert.Equal(t, 0, cf.Rank)
	require.ErrorAs(t, cerr, &cf)
	assert.Equal(t, star.OpClose, cf.Operation)
	assert.Equal(t, 1, cf.Rank)
	assert.ErrorContains(t, cerr, "rank 1 was still sending")

	require.Len(t, ts.all, 1)
	w := ts.all[0]
	w.mu.Lock()
	defer w.mu.Unlock()
	assert.Equal(t, join(
		"00000009 08 00000001 00000002", // Handshake rank 1 size 2
		"00000003 01 BBCC",              // AllgathervSend
		"00000004 03 02 0302",           // AllreduceSend, op Max = 2
		"00000003 05 0708",              // Broadcast from root 1
		"00000001 06",                   // BarrierReady
		"00000001 06",                   // BarrierReady (the one Shutdown answers)
	), w.wrote.Bytes())
	assert.Equal(t, join(
		"00000005 09 00000002", // Ack size 2
		"00000004 02 AABBCC",   // AllgathervRecv: both regions in rank order
		"00000003 04 0305",     // AllreduceRecv
		"00000002 05 09",       // Broadcast from root 0
		"00000001 07",          // BarrierGo
		"00000001 0A",          // Shutdown
	), w.read.Bytes())
}

// TestAllreduceSumProperty checks, for random float64 data at R = 2..8,
// that every rank's sum equals bit for bit a plain left-to-right loop in
// rank order.
func TestAllreduceSumProperty(t *testing.T) {
	for size := 2; size <= 8; size++ {
		t.Run(fmt.Sprintf("ranks=%d", size), func(t *testing.T) {
			testkit.CheckGoroutines(t)
			comms := start(t, size, nil)
			for seed := uint64(1); seed <= 20; seed++ {
				n := 1 + int(seed*37%300)
				data := func(r int) []float64 { return testkit.RandomFloats(seed*1000+uint64(r), n) }
				want := testkit.ReduceInRankOrder(size, data)
				got := make([][]float64, size)
				errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
					got[c.Rank()] = make([]float64, n)
					return comm.Allreduce(context.Background(), c, data(c.Rank()), got[c.Rank()], comm.Sum)
				})
				require.NoError(t, errors.Join(errs...))
				for r := range size {
					for i := range want {
						if got[r][i] != want[i] && !(got[r][i] != got[r][i] && want[i] != want[i]) {
							t.Fatalf("seed %d rank %d [%d]: %v != %v", seed, r, i, got[r][i], want[i])
						}
					}
				}
			}
		})
	}
}

// TestPreconditionsSendNothing checks that every precondition violation is
// reported on the calling rank before a byte moves.
func TestPreconditionsSendNothing(t *testing.T) {
	testkit.CheckGoroutines(t)
	// Without the control session, whose heartbeats would move bytes.
	comms, ts := tapped(t, 3, func(c *star.Config) { c.Liveness = -1 })
	ctx := context.Background()
	r0, w0 := ts.totals()
	for _, c := range comms {
		calls := map[string]error{
			"counts":    comm.Allgatherv(ctx, c, []float64{1}, make([]float64, 3), []int{1, 1}, []int{0, 1}),
			"send":      comm.Allgatherv(ctx, c, []float64{1, 2}, make([]float64, 3), []int{1, 1, 1}, []int{0, 1, 2}),
			"recv":      comm.Allgatherv(ctx, c, []float64{1}, make([]float64, 2), []int{1, 1, 1}, []int{0, 1, 2}),
			"overlap":   comm.Allgatherv(ctx, c, []float64{1}, make([]float64, 3), []int{1, 1, 1}, []int{0, 1, 1}),
			"reduceLen": comm.Allreduce(ctx, c, []float64{1, 2}, make([]float64, 1), comm.Sum),
			"empty":     comm.Allreduce(ctx, c, []float64{}, []float64{}, comm.Sum),
			"orFloat":   comm.Allreduce(ctx, c, []float64{1}, make([]float64, 1), comm.BitwiseOr),
			"root":      comm.Broadcast(ctx, c, []float64{1}, 3),
			"rootNeg":   comm.Broadcast(ctx, c, []float64{1}, -1),
			"view":      c.Broadcast(ctx, comm.View{Type: comm.Float64, Bytes: make([]byte, 7)}, 0),
			"dtype":     c.Broadcast(ctx, comm.View{Bytes: make([]byte, 8)}, 0),
		}
		for name, err := range calls {
			assert.Error(t, err, "rank %d %s", c.Rank(), name)
		}
	}
	r1, w1 := ts.totals()
	assert.Equal(t, r0, r1, "bytes read")
	assert.Equal(t, w0, w1, "bytes written")
	// And the communicator is still in step.
	errs := testkit.RunRanks(comms, func(c comm.Communicator) error { return c.Barrier(ctx) })
	require.NoError(t, errors.Join(errs...))
}

// rogue dials the coordinator and sends raw bytes, returning what the
// coordinator answers before closing.
func rogue(t *testing.T, nw *pipe.Network, addr string, send []byte) string {
	t.Helper()
	conn, err := nw.Dial(context.Background(), addr)
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
	if len(send) > 0 {
		_, err = conn.Write(send)
		require.NoError(t, err)
	}
	reply, _ := io.ReadAll(conn)
	return string(reply)
}

// TestHandshakeRefusals sends the coordinator an out-of-range rank, a
// duplicate rank, a wrong size, rank 0, a garbage first frame and a silent
// connection: each is refused with a reason (or dropped), and the real
// ranks still join and work.
func TestHandshakeRefusals(t *testing.T) {
	testkit.CheckGoroutines(t)
	nw := pipe.NewNetwork()
	ln, err := nw.Listen("coord")
	require.NoError(t, err)
	cfgFor := func(rank int) star.Config {
		cfg := star.DefaultConfig()
		cfg.Rank, cfg.Size = rank, 4
		cfg.HandshakeTimeout = 200 * time.Millisecond
		if rank == 0 {
			cfg.Listener = ln
		} else {
			cfg.Dialer, cfg.Addr = nw, "coord"
		}
		return cfg
	}
	var (
		wg    sync.WaitGroup
		comms = make([]comm.Communicator, 4)
		errs  = make([]error, 4)
	)
	startRank := func(r int) chan struct{} {
		done := make(chan struct{})
		wg.Go(func() {
			defer close(done)
			c, err := star.New(context.Background(), cfgFor(r))
			errs[r] = err
			if err == nil {
				comms[r] = c
			}
		})
		return done
	}
	// The duplicate is sent only once rank 2 has registered (its New
	// returns only once every rank has joined).
	registered := make(chan struct{})
	restore := star.SetTestHook(func(rank int, point string) {
		if point == star.HookRegistered && rank == 2 {
			close(registered)
		}
	})
	t.Cleanup(restore)
	startRank(0)
	startRank(2)
	<-registered
	t.Cleanup(func() { _ = testkit.CloseAll(comms) })

	hs := func(rank, size uint32) []byte { return star.EncodeHandshake(int(rank), int(size)) }
	refusals := map[string]struct {
		send []byte
		want string
	}{
		"out of range": {hs(7, 4), "rank 7 out of range 1..3"},
		"duplicate":    {hs(2, 4), "rank 2 already registered"},
		"wrong size":   {hs(1, 5), "size mismatch"},
		"rank zero":    {hs(0, 4), "rank 0 is the coordinator"},
		"garbage":      {hexOf("00000003 01 ABCD"), "bad handshake"},
		"silent":       {nil, "bad handshake"},
	}
	for name, tc := range refusals {
		t.Run(name, func(t *testing.T) {
			reply := rogue(t, nw, "coord", tc.send)
			require.GreaterOrEqual(t, len(reply), 5, "an Abort frame")
			assert.Equal(t, star.TagAbort, reply[4])
			assert.Contains(t, reply[5:], tc.want)
		})
	}
	// A worker refused through star.New gets InitializationFailed with the
	// reason.
	bad := cfgFor(3)
	bad.Size = 5
	_, err = star.New(context.Background(), bad)
	var ife *comm.InitializationFailedError
	require.ErrorAs(t, err, &ife)
	var ref *star.RefusedError
	require.ErrorAs(t, err, &ref)
	assert.Contains(t, ref.Reason, "size mismatch")

	startRank(1)
	startRank(3)
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	results := testkit.RunRanks(comms, func(c comm.Communicator) error { return testkit.MixedOps(context.Background(), c, 3, 50) })
	require.NoError(t, errors.Join(results...))
}
