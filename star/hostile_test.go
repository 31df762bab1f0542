package star_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/star"
	"github.com/starcomm/starcomm/testkit"
	"github.com/starcomm/starcomm/transport"
	"github.com/starcomm/starcomm/transport/pipe"
)

// Hostile peers: a rank that speaks the protocol's framing but lies about
// lengths, and connections that never finish (or never start) their
// handshake. The real ranks must refuse, without allocating what a header
// claims, and keep working.

// header returns a 5-byte frame header with the raw LEN field lenField.
func header(lenField uint32, tag byte) []byte {
	h := make([]byte, star.HeaderSize)
	binary.BigEndian.PutUint32(h, lenField)
	h[4] = tag
	return h
}

// readRawFrame reads one whole frame from conn: its tag and payload. A
// payload longer than limit is an error (a hostile test must not be fooled
// into allocating either).
func readRawFrame(conn io.Reader, limit int) (tag byte, payload []byte, err error) {
	var h [star.HeaderSize]byte
	if _, err := io.ReadFull(conn, h[:]); err != nil {
		return 0, nil, err
	}
	n := int(binary.BigEndian.Uint32(h[:4])) - 1
	if n < 0 || n > limit {
		return h[4], nil, fmt.Errorf("frame %s claims %d payload bytes (limit %d)", star.TagName(h[4]), n, limit)
	}
	payload = make([]byte, n)
	if _, err := io.ReadFull(conn, payload); err != nil {
		return h[4], nil, err
	}
	return h[4], payload, nil
}

// rawFrame is a frame read by readRawFrame.
type rawFrame struct {
	tag    byte
	reason []byte
	err    error
}

// allocated returns the bytes allocated by the whole process while f runs.
func allocated(f func()) uint64 {
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	f()
	runtime.ReadMemStats(&m1)
	return m1.TotalAlloc - m0.TotalAlloc
}

// hostileClaim is a lying frame header: which tag and LEN it carries for a
// frame whose tag should be want and payload expected bytes, and what the
// real rank must answer.
type hostileClaim struct {
	name   string
	header func(want byte, expected int) []byte
	// actual is the payload length the InvalidBufferSizeError reports; -2
	// means the frame is refused for its tag (ErrUnexpectedTag) instead.
	actual func(expected int) int
	// skip is true for claims that make no sense for an expected length.
	skip func(expected int) bool
}

func hostileClaims() []hostileClaim {
	fixed := func(lenField uint32) func(byte, int) []byte {
		return func(want byte, _ int) []byte { return header(lenField, want) }
	}
	never := func(int) bool { return false }
	byTag := func(int) int { return -2 }
	return []hostileClaim{
		{"len=4GiB-1", fixed(0xFFFFFFFF), func(int) int { return int(maxU32 - 1) }, never},
		{"len=2GiB", fixed(0x80000000), func(int) int { return 1<<31 - 1 }, never},
		{"len=4MiB+2", fixed(4<<20 + 2), func(int) int { return 4<<20 + 1 }, never},
		{"len=one-too-many", func(want byte, e int) []byte { return header(uint32(e+2), want) }, func(e int) int { return e + 1 }, never},
		{"len=one-too-few", func(want byte, e int) []byte { return header(uint32(e), want) }, func(e int) int { return e - 1 }, func(e int) bool { return e == 0 }},
		// LEN 0 leaves no room for a tag: a length mismatch, payload -1.
		{"len=0", fixed(0), func(int) int { return -1 }, never},
		{"tag=abort/len=4GiB-1", func(byte, int) []byte { return header(0xFFFFFFFF, star.TagAbort) }, byTag, never},
		{"tag=unknown/len=4GiB-1", func(byte, int) []byte { return header(0xFFFFFFFF, 0x42) }, byTag, never},
	}
}

// checkRefused asserts that err is the refusal claim c calls for, in a
// collective op whose frame should have carried expected payload bytes.
func checkRefused(t *testing.T, c hostileClaim, op string, expected int, err error) {
	t.Helper()
	if c.actual(expected) == -2 {
		var cf *comm.CollectiveFailedError
		require.ErrorAs(t, err, &cf)
		assert.ErrorIs(t, err, star.ErrUnexpectedTag)
		return
	}
	var ibs *comm.InvalidBufferSizeError
	require.ErrorAs(t, err, &ibs)
	assert.Equal(t, "bytes", ibs.Unit)
	assert.Equal(t, op, ibs.Operation)
	assert.Equal(t, expected, ibs.Expected)
	assert.Equal(t, c.actual(expected), ibs.Actual)
	if ibs.Actual == -1 {
		assert.Contains(t, ibs.Detail, "with LEN 0, no room for its tag (a corrupt stream", "LEN 0 is named as such")
		assert.NotContains(t, ibs.Detail, "disagree", "no size any rank could pass gives LEN 0")
	}
}

// maxAlloc is what a refusal may allocate, whatever the header claims.
const maxAlloc = 1 << 20

// hostileOp is one collective as the hostile tests run it with four
// float64 elements per rank.
type hostileOp struct {
	name string
	// run calls the collective on c (size ranks; root is the rogue for a
	// broadcast seen by the coordinator).
	run func(ctx context.Context, c comm.Communicator, size, root int) error
	// sendTag and sendLen are the tag of a worker's frame to the
	// coordinator and the payload length the coordinator expects (for a
	// broadcast, from a worker root).
	sendTag byte
	sendLen int
	// recvTag and recvLen are the tag of the coordinator's frame to a
	// worker and its payload length.
	recvTag byte
	recvLen func(size int) int
}

func hostileOps() []hostileOp {
	return []hostileOp{
		{
			name: comm.OpAllgatherv,
			run: func(ctx context.Context, c comm.Communicator, size, _ int) error {
				counts, displs := make([]int, size), make([]int, size)
				for r := range size {
					counts[r], displs[r] = 4, 4*r
				}
				return comm.Allgatherv(ctx, c, []float64{1, 2, 3, 4}, make([]float64, 4*size), counts, displs)
			},
			sendTag: star.TagAllgathervSend, sendLen: 32,
			recvTag: star.TagAllgathervRecv, recvLen: func(size int) int { return 32 * size },
		},
		{
			name: comm.OpAllreduce,
			run: func(ctx context.Context, c comm.Communicator, _, _ int) error {
				return comm.Allreduce(ctx, c, []float64{1, 2, 3, 4}, make([]float64, 4), comm.Sum)
			},
			sendTag: star.TagAllreduceSend, sendLen: 33, // the op byte, then the data
			recvTag: star.TagAllreduceRecv, recvLen: func(int) int { return 32 },
		},
		{
			name: comm.OpBroadcast,
			run: func(ctx context.Context, c comm.Communicator, _, root int) error {
				return comm.Broadcast(ctx, c, make([]float64, 4), root)
			},
			sendTag: star.TagBroadcast, sendLen: 32, // from a worker root
			recvTag: star.TagBroadcast, recvLen: func(int) int { return 32 },
		},
		{
			name: comm.OpBarrier,
			run: func(ctx context.Context, c comm.Communicator, _, _ int) error {
				return c.Barrier(ctx)
			},
			sendTag: star.TagBarrierReady, sendLen: 0,
			recvTag: star.TagBarrierGo, recvLen: func(int) int { return 0 },
		},
	}
}

// fakeCoordinator starts a real worker (rank 1 of 2) against a pipe
// listener that the test answers itself, and returns the worker and the
// coordinator's end of its connection, after a valid Ack.
func fakeCoordinator(t *testing.T) (comm.Communicator, transport.Conn) {
	t.Helper()
	nw := pipe.NewNetwork()
	ln, err := nw.Listen("fake")
	require.NoError(t, err)
	defer ln.Close()
	got := acceptWorker(ln)
	cfg := star.DefaultConfig()
	cfg.Rank, cfg.Size, cfg.Dialer, cfg.Addr = 1, 2, nw, "fake"
	cfg.Timeout, cfg.ShutdownTimeout = 10*time.Second, 100*time.Millisecond
	return joinFake(t, cfg, got)
}

// joinFake starts the worker of cfg against the coordinator that got
// delivers (see acceptWorker) and returns the worker and the
// coordinator's end of its connection, both closed when the test ends.
func joinFake(t *testing.T, cfg star.Config, got <-chan acceptedConn) (comm.Communicator, transport.Conn) {
	t.Helper()
	w, err := star.New(context.Background(), cfg)
	require.NoError(t, err)
	a := <-got
	require.NoError(t, a.err)
	t.Cleanup(func() {
		_ = w.Close()
		_ = a.conn.Close()
	})
	return w, a.conn
}

// acceptedConn is what acceptWorker delivers.
type acceptedConn struct {
	conn transport.Conn
	err  error
}

// acceptWorker accepts one connection on ln, in the background, and
// answers the Handshake of rank 1 of 2 with a valid Ack, as a coordinator
// would; the test then speaks for the coordinator on the connection.
func acceptWorker(ln transport.Listener) <-chan acceptedConn {
	got := make(chan acceptedConn, 1)
	go func() {
		conn, err := ln.Accept()
		if err == nil {
			_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
			hs := make([]byte, 13)
			if _, err = io.ReadFull(conn, hs); err == nil && !bytes.Equal(hs, star.EncodeHandshake(1, 2)) {
				err = fmt.Errorf("handshake %x", hs)
			}
			if err == nil {
				_, err = conn.Write(star.EncodeAck(2))
			}
		}
		got <- acceptedConn{conn, err}
	}()
	return got
}

// TestHostileLengthToWorker: a coordinator that lies in the LEN (or tag) of
// the frame a worker expects in each collective. The worker refuses from
// the header alone: *comm.InvalidBufferSizeError (Unit "bytes") for a
// length, ErrUnexpectedTag for a tag, allocating far less than the claim,
// and tells the coordinator with an Abort frame.
func TestHostileLengthToWorker(t *testing.T) {
	testkit.CheckGoroutines(t)
	for _, op := range hostileOps() {
		for _, c := range hostileClaims() {
			expected := op.recvLen(2)
			if c.skip(expected) {
				continue
			}
			t.Run(fmt.Sprintf("op=%s/claim=%s", op.name, c.name), func(t *testing.T) {
				w, conn := fakeCoordinator(t)
				require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
				done := make(chan error, 1)
				abort := make(chan rawFrame, 1)
				var err error
				alloc := allocated(func() {
					go func() { done <- op.run(context.Background(), w, 2, 0) }()
					if op.name != comm.OpBroadcast { // the worker sends first
						tag, payload, rerr := readRawFrame(conn, 1<<10)
						require.NoError(t, rerr)
						require.Equal(t, op.sendTag, tag)
						require.Len(t, payload, op.sendLen)
					}
					_, werr := conn.Write(c.header(op.recvTag, expected))
					require.NoError(t, werr)
					// The worker tells the coordinator, then closes: what
					// follows the bad header on the wire is its Abort.
					go func() {
						tag, reason, rerr := readRawFrame(conn, star.MaxAbortReason)
						abort <- rawFrame{tag, reason, rerr}
					}()
					err = <-done
				})
				checkRefused(t, c, op.name, expected, err)
				assert.Less(t, alloc, uint64(maxAlloc), "bytes allocated while refusing")
				f := <-abort
				tag, reason, rerr := f.tag, f.reason, f.err
				require.NoError(t, rerr)
				assert.Equal(t, star.TagAbort, tag)
				assert.NotEmpty(t, reason)
				rest, _ := io.ReadAll(conn)
				assert.Empty(t, rest)
				// Fail-stop.
				assert.Error(t, w.Barrier(context.Background()))
			})
		}
	}
}

// TestHostileAckToWorker: an Ack with a lying LEN or tag fails start-up
// with InitializationFailed, without allocating the claim.
func TestHostileAckToWorker(t *testing.T) {
	testkit.CheckGoroutines(t)
	for _, c := range hostileClaims() {
		t.Run("claim="+c.name, func(t *testing.T) {
			nw := pipe.NewNetwork()
			ln, err := nw.Listen("fake")
			require.NoError(t, err)
			defer ln.Close()
			go func() {
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				defer conn.Close()
				_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
				if _, err := io.ReadFull(conn, make([]byte, 13)); err == nil {
					_, _ = conn.Write(c.header(star.TagAck, 4))
					_, _ = io.Copy(io.Discard, conn)
				}
			}()
			cfg := star.DefaultConfig()
			cfg.Rank, cfg.Size, cfg.Dialer, cfg.Addr = 1, 2, nw, "fake"
			var ife *comm.InitializationFailedError
			alloc := allocated(func() {
				_, err = star.New(context.Background(), cfg)
			})
			require.ErrorAs(t, err, &ife)
			assert.Less(t, alloc, uint64(maxAlloc))
		})
	}
}

// startWithRogue starts a real coordinator and real workers of a size-rank
// communicator whose rank rogue is played by the test through the returned
// connection (handshaken and acknowledged).
func startWithRogue(t *testing.T, size, rogue int) ([]comm.Communicator, transport.Conn) {
	t.Helper()
	nw := pipe.NewNetwork()
	ln, err := nw.Listen("coord")
	require.NoError(t, err)
	comms := make([]comm.Communicator, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		if r == rogue {
			continue
		}
		cfg := star.DefaultConfig()
		cfg.Rank, cfg.Size = r, size
		cfg.Timeout, cfg.ShutdownTimeout = 10*time.Second, 100*time.Millisecond
		if r == 0 {
			cfg.Listener = ln
		} else {
			cfg.Dialer, cfg.Addr = nw, "coord"
		}
		wg.Go(func() { comms[r], errs[r] = newRank(cfg) })
	}
	conn, err := nw.Dial(context.Background(), "coord")
	require.NoError(t, err)
	require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
	_, err = conn.Write(star.EncodeHandshake(rogue, size))
	require.NoError(t, err)
	ack := make([]byte, 9)
	_, err = io.ReadFull(conn, ack)
	require.NoError(t, err)
	require.Equal(t, star.EncodeAck(size), ack)
	wg.Wait()
	t.Cleanup(func() {
		_ = testkit.CloseAll(comms)
		_ = conn.Close()
	})
	require.NoError(t, errors.Join(errs...))
	return comms, conn
}

// TestHostileLengthToCoordinator: a worker that completed a valid
// handshake lies in the LEN (or tag) of its frame in each collective. The
// coordinator refuses from the header alone, with InvalidBufferSizeError
// (Unit "bytes") for a length, allocating far less than the claim; the
// honest worker fails too instead of hanging; the rogue gets an Abort.
func TestHostileLengthToCoordinator(t *testing.T) {
	testkit.CheckGoroutines(t)
	const size, rogue = 3, 2
	for _, op := range hostileOps() {
		for _, c := range hostileClaims() {
			if c.skip(op.sendLen) {
				continue
			}
			t.Run(fmt.Sprintf("op=%s/claim=%s", op.name, c.name), func(t *testing.T) {
				comms, conn := startWithRogue(t, size, rogue)
				var errs []error
				abort := make(chan rawFrame, 1)
				alloc := allocated(func() {
					done := make(chan []error, 1)
					go func() {
						done <- testkit.RunRanks(comms[:rogue], func(c comm.Communicator) error {
							return op.run(context.Background(), c, size, rogue)
						})
					}()
					_, err := conn.Write(c.header(op.sendTag, op.sendLen))
					require.NoError(t, err)
					// The rogue reads on, as a worker would: the
					// coordinator's Abort follows.
					go func() {
						tag, reason, err := readRawFrame(conn, star.MaxAbortReason)
						abort <- rawFrame{tag, reason, err}
					}()
					errs = <-done
				})
				checkRefused(t, c, op.name, op.sendLen, errs[0])
				assert.Error(t, errs[1], "the honest worker")
				assert.Less(t, alloc, uint64(maxAlloc), "bytes allocated while refusing")
				f := <-abort
				tag, reason, err := f.tag, f.reason, f.err
				require.NoError(t, err)
				assert.Equal(t, star.TagAbort, tag)
				assert.True(t, strings.HasPrefix(string(reason), fmt.Sprintf("rank %d ", rogue)), "the Abort blames the rogue: %q", reason)
			})
		}
	}
}

// TestHostileReduceOp: a rogue worker's AllreduceSend carries an op byte
// that is no ReduceOp at all; every real rank fails with
// ErrReduceOpMismatch.
func TestHostileReduceOp(t *testing.T) {
	testkit.CheckGoroutines(t)
	comms, conn := startWithRogue(t, 3, 2)
	done := make(chan []error, 1)
	go func() {
		done <- testkit.RunRanks(comms[:2], func(c comm.Communicator) error {
			return comm.Allreduce(context.Background(), c, []float64{1}, make([]float64, 1), comm.Sum)
		})
	}()
	_, err := conn.Write(append(header(10, star.TagAllreduceSend), 0xFF, 1, 2, 3, 4, 5, 6, 7, 8))
	require.NoError(t, err)
	errs := <-done
	for r, err := range errs {
		assert.ErrorIs(t, err, star.ErrReduceOpMismatch, "rank %d", r)
	}
}

// coordinatorUnderTest runs a real coordinator of size ranks on its own
// pipe network in the current synctest bubble, with the given handshake
// timeout.
type coordinatorUnderTest struct {
	nw   *pipe.Network
	done chan struct{}
	c    comm.Communicator
	err  error
	took time.Duration
	cfg  func(rank int) star.Config
}

func newCoordinator(size int, handshakeTimeout time.Duration) *coordinatorUnderTest {
	nw := pipe.NewNetwork()
	ln, err := nw.Listen("coord")
	if err != nil {
		panic(err)
	}
	cu := &coordinatorUnderTest{nw: nw, done: make(chan struct{})}
	cu.cfg = func(rank int) star.Config {
		cfg := star.DefaultConfig()
		cfg.Rank, cfg.Size = rank, size
		cfg.HandshakeTimeout = handshakeTimeout
		cfg.ShutdownTimeout = 100 * time.Millisecond
		if rank == 0 {
			cfg.Listener = ln
		} else {
			cfg.Dialer, cfg.Addr = nw, "coord"
		}
		return cfg
	}
	begin := time.Now()
	go func() {
		defer close(cu.done)
		cu.c, cu.err = newRank(cu.cfg(0))
		cu.took = time.Since(begin)
	}()
	return cu
}

// workers starts ranks 1..size-1 (except skip) and returns them by rank
// once all have started (index 0 and skip are nil).
func (cu *coordinatorUnderTest) workers(t *testing.T, size int, skip int) []comm.Communicator {
	t.Helper()
	comms := make([]comm.Communicator, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := 1; r < size; r++ {
		if r == skip {
			continue
		}
		wg.Go(func() { comms[r], errs[r] = newRank(cu.cfg(r)) })
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	return comms
}

// reply is what a rogue connection read from the coordinator, and when it
// saw the end.
type reply struct {
	data []byte
	at   time.Duration
}

// listen reads conn to its end in the background.
func listen(conn transport.Conn, begin time.Time) chan reply {
	ch := make(chan reply, 1)
	go func() {
		data, _ := io.ReadAll(conn)
		ch <- reply{data, time.Since(begin)}
	}()
	return ch
}

// assertAbort asserts data is one Abort frame whose reason contains want.
func assertAbort(t *testing.T, data []byte, want string) {
	t.Helper()
	tag, reason, err := readRawFrame(bytes.NewReader(data), star.MaxAbortReason)
	if !assert.NoError(t, err, "reply %q (%d bytes)", data[:min(len(data), 80)], len(data)) {
		return
	}
	assert.Equal(t, star.TagAbort, tag)
	assert.Contains(t, string(reason), want)
	assert.Len(t, data, star.HeaderSize+len(reason), "nothing after the Abort")
}

// TestSilentConnectionDoesNotBlockStartup: a connection that never sends
// its handshake holds no rank slot and does not delay start-up: with the
// silent connection accepted first, the coordinator's New returns as soon
// as the real workers have registered (no time passes, far less than
// HandshakeTimeout), and the silent connection is dropped then.
func TestSilentConnectionDoesNotBlockStartup(t *testing.T) {
	testkit.SyncTest(t, func(t *testing.T) {
		const size, handshakeTimeout = 4, 100 * time.Millisecond
		begin := time.Now()
		cu := newCoordinator(size, handshakeTimeout)
		silent, err := cu.nw.Dial(context.Background(), "coord")
		require.NoError(t, err)
		defer silent.Close()
		got := listen(silent, begin)
		synctest.Wait() // the coordinator is waiting on the silent connection
		comms := cu.workers(t, size, -1)
		<-cu.done
		require.NoError(t, cu.err)
		comms[0] = cu.c
		defer testkit.CloseAll(comms)
		assert.Zero(t, cu.took, "New waited for the silent connection")
		r := <-got
		assert.Zero(t, r.at, "the silent connection is dropped when start-up ends")
		errs := testkit.RunRanks(comms, func(c comm.Communicator) error { return c.Barrier(context.Background()) })
		require.NoError(t, errors.Join(errs...))
	})
}

// TestStalledHandshakesDropped: a silent connection, a slow-loris that
// sends 3 bytes of a header then stops, one that sends a whole header then
// stops, and one that sends half a handshake payload, are each refused
// with an Abort after exactly HandshakeTimeout, while the coordinator
// keeps accepting: the real workers, which come afterwards, join.
func TestStalledHandshakesDropped(t *testing.T) {
	stalls := map[string][]byte{
		"silent":       nil,
		"header=3B":    {0, 0, 0},
		"header=whole": {0, 0, 0, 9, star.TagHandshake},
		"payload=half": star.EncodeHandshake(1, 3)[:9],
	}
	for name, send := range stalls {
		t.Run("stall="+name, func(t *testing.T) {
			testkit.SyncTest(t, func(t *testing.T) {
				const size, handshakeTimeout = 3, 100 * time.Millisecond
				begin := time.Now()
				cu := newCoordinator(size, handshakeTimeout)
				conn, err := cu.nw.Dial(context.Background(), "coord")
				require.NoError(t, err)
				defer conn.Close()
				got := listen(conn, begin)
				if len(send) > 0 {
					_, err = conn.Write(send)
					require.NoError(t, err)
				}
				r := <-got
				assert.Equal(t, handshakeTimeout, r.at, "dropped after HandshakeTimeout")
				assertAbort(t, r.data, "bad handshake")

				comms := cu.workers(t, size, -1)
				<-cu.done
				require.NoError(t, cu.err)
				comms[0] = cu.c
				defer testkit.CloseAll(comms)
				assert.Equal(t, handshakeTimeout, cu.took)
				errs := testkit.RunRanks(comms, func(c comm.Communicator) error { return c.Barrier(context.Background()) })
				require.NoError(t, errors.Join(errs...))
			})
		})
	}
}

// TestSquatterFailsStartup: a connection that sends a valid handshake for
// rank 1 and then never reads holds rank 1 as a real worker would (the Ack
// comes only once every rank has joined, and without authentication the two
// cannot be told apart). The real rank 1 is refused with a reason; once
// every rank has registered, the squatter's Ack cannot be delivered (a
// pipe's write waits for its reader) and start-up fails on the coordinator
// naming rank 1; the workers that joined are told by an Abort naming rank 1
// (in start-up, or at their first collective when their own Ack went out
// first). Nothing hangs: the coordinator gives up within HandshakeTimeout
// (the Ack) plus ShutdownTimeout (the Abort to the squatter) of the last
// join.
func TestSquatterFailsStartup(t *testing.T) {
	testkit.SyncTest(t, func(t *testing.T) {
		const size, handshakeTimeout = 3, 100 * time.Millisecond
		cu := newCoordinator(size, handshakeTimeout)
		conn, err := cu.nw.Dial(context.Background(), "coord")
		require.NoError(t, err)
		defer conn.Close()
		_, err = conn.Write(star.EncodeHandshake(1, size))
		require.NoError(t, err)
		synctest.Wait()
		real1 := make(chan error, 1)
		go func() { _, err := newRank(cu.cfg(1)); real1 <- err }()
		var refused *star.RefusedError
		require.ErrorAs(t, <-real1, &refused)
		assert.Contains(t, refused.Reason, "rank 1 already registered")
		begin := time.Now()
		rank2 := make(chan error, 1)
		go func() {
			c2, err := newRank(cu.cfg(2))
			if err == nil {
				err = c2.Barrier(context.Background())
				c2.Close()
			}
			rank2 <- err
		}()
		<-cu.done
		assert.LessOrEqual(t, time.Since(begin), handshakeTimeout+100*time.Millisecond)
		var ife *comm.InitializationFailedError
		require.ErrorAs(t, cu.err, &ife)
		assert.Contains(t, cu.err.Error(), "the Ack could not be sent to rank 1")
		assert.Contains(t, cu.err.Error(), "missing ranks [1]")
		err2 := <-rank2
		var ab *star.AbortError
		require.ErrorAs(t, err2, &ab)
		assert.Equal(t, 1, ab.Rank, "rank 2 is told which rank failed start-up: %v", err2)
		assert.Equal(t, star.OpStartup, ab.Op)
	})
}

// rogueHandshakes are first bytes no coordinator may accept, whatever the
// order of arrival, and the reason it must give (silent and truncated ones
// are just dropped).
var rogueHandshakes = []struct {
	name string
	send []byte
	want string // "" when the connection may just be dropped
}{
	{"rank=out-of-range", star.EncodeHandshake(7, 4), "rank 7 out of range"},
	{"rank=2^32-1", star.EncodeHandshake(int(maxU32), 4), "out of range"},
	{"rank=0", star.EncodeHandshake(0, 4), "rank 0 is the coordinator"},
	{"size=wrong", star.EncodeHandshake(1, 5), "size mismatch"},
	{"size=0", star.EncodeHandshake(1, 0), "size mismatch"},
	{"tag=AllgathervSend", hexOf("00000009 01 00000001 00000004"), "bad handshake"},
	{"tag=Shutdown", hexOf("00000001 0A"), "bad handshake"},
	{"tag=Abort", star.EncodeAbort("rank 1 failed"), "bad handshake"},
	{"len=0", hexOf("00000000 08"), "bad handshake"},
	{"len=4GiB-1", hexOf("FFFFFFFF 08 00000001 00000004"), "bad handshake"},
	{"len=short", hexOf("00000005 08 00000001"), "bad handshake"},
	{"len=long", hexOf("0000000A 08 00000001 00000004 00"), "bad handshake"},
	{"silent", nil, ""},
	{"truncated=header", hexOf("000000"), ""},
	{"truncated=payload", hexOf("00000009 08 0000"), ""},
}

// TestConcurrentRogues: 20 rogue connections (every kind above, several
// times) race with the real workers for the coordinator. Every real rank
// joins and works; no rogue is ever acknowledged; each rogue reads either
// a well-formed Abort frame with a reason, a prefix of one (cut when
// start-up ends), or nothing; New does not wait for the silent ones.
func TestConcurrentRogues(t *testing.T) {
	testkit.CheckGoroutines(t)
	const size, rogues = 4, 20
	for round := range 5 {
		t.Run(fmt.Sprintf("round=%d", round), func(t *testing.T) {
			nw := pipe.NewNetwork()
			ln, err := nw.Listen("coord")
			require.NoError(t, err)
			cfgFor := func(rank int) star.Config {
				cfg := star.DefaultConfig()
				cfg.Rank, cfg.Size = rank, size
				cfg.HandshakeTimeout = 5 * time.Second // far longer than the test
				cfg.ShutdownTimeout = 100 * time.Millisecond
				if rank == 0 {
					cfg.Listener = ln
				} else {
					cfg.Dialer, cfg.Addr = nw, "coord"
				}
				return cfg
			}
			var (
				wg      sync.WaitGroup // the rogues
				ranks   sync.WaitGroup
				gate    = make(chan struct{})
				comms   = make([]comm.Communicator, size)
				errs    = make([]error, size)
				replies = make([][]byte, rogues)
				dialErr = make([]error, rogues)
			)
			begin := time.Now()
			for r := range size {
				ranks.Go(func() {
					<-gate
					comms[r], errs[r] = newRank(cfgFor(r))
				})
			}
			for i := range rogues {
				kind := rogueHandshakes[(i+round)%len(rogueHandshakes)]
				wg.Go(func() {
					<-gate
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					conn, err := nw.Dial(ctx, "coord")
					if err != nil {
						dialErr[i] = err // start-up ended first: the listener is closed
						return
					}
					defer conn.Close()
					_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
					if len(kind.send) > 0 {
						go func() { _, _ = conn.Write(kind.send) }()
					}
					replies[i], _ = io.ReadAll(conn)
				})
			}
			close(gate)
			ranks.Wait()
			startup := time.Since(begin)
			t.Cleanup(func() { _ = testkit.CloseAll(comms) })
			require.NoError(t, errors.Join(errs...))
			assert.Less(t, startup, 5*time.Second, "start-up waited for a silent rogue")
			res := testkit.RunRanks(comms, func(c comm.Communicator) error {
				return testkit.MixedOps(context.Background(), c, uint64(round), 20)
			})
			require.NoError(t, errors.Join(res...))
			// A rogue that came after start-up waits for its first frame
			// (a control connection's) until HandshakeTimeout or Close.
			_ = testkit.CloseAll(comms)
			wg.Wait()
			for i, data := range replies {
				kind := rogueHandshakes[(i+round)%len(rogueHandshakes)]
				if dialErr[i] != nil || len(data) == 0 {
					continue
				}
				require.GreaterOrEqual(t, len(data), star.HeaderSize, "rogue %d (%s): %x", i, kind.name, data)
				require.Equal(t, star.TagAbort, data[4], "rogue %d (%s) got %x", i, kind.name, data)
				n := int(binary.BigEndian.Uint32(data)) - 1
				require.LessOrEqual(t, len(data), star.HeaderSize+n, "rogue %d (%s): bytes after the Abort", i, kind.name)
				if len(data) == star.HeaderSize+n && kind.want != "" {
					// A rogue that came after start-up is told the job is
					// running, whatever it sent.
					reason := string(data[star.HeaderSize:])
					if !strings.Contains(reason, "start-up is complete") {
						assert.Contains(t, reason, kind.want, "rogue %d (%s)", i, kind.name)
					}
				}
			}
		})
	}
}

// TestRoguesBeforeWorkers: the same 20 rogues all connect first and each
// gets its Abort with the expected reason (the silent and truncated ones
// after HandshakeTimeout); then the real workers join.
func TestRoguesBeforeWorkers(t *testing.T) {
	testkit.SyncTest(t, func(t *testing.T) {
		const size, rogues, handshakeTimeout = 4, 20, 100 * time.Millisecond
		begin := time.Now()
		cu := newCoordinator(size, handshakeTimeout)
		var wg sync.WaitGroup
		replies := make([]reply, rogues)
		for i := range rogues {
			kind := rogueHandshakes[i%len(rogueHandshakes)]
			wg.Go(func() {
				conn, err := cu.nw.Dial(context.Background(), "coord")
				if err != nil {
					replies[i].data = []byte(err.Error())
					return
				}
				defer conn.Close()
				got := listen(conn, begin)
				if len(kind.send) > 0 {
					_, _ = conn.Write(kind.send)
				}
				replies[i] = <-got
			})
		}
		wg.Wait()
		for i, r := range replies {
			kind := rogueHandshakes[i%len(rogueHandshakes)]
			want, at := kind.want, time.Duration(0)
			if want == "" {
				want, at = "bad handshake", handshakeTimeout
			}
			assertAbort(t, r.data, want)
			assert.Equal(t, at, r.at, "rogue %d (%s)", i, kind.name)
		}
		comms := cu.workers(t, size, -1)
		<-cu.done
		require.NoError(t, cu.err)
		comms[0] = cu.c
		defer testkit.CloseAll(comms)
		errs := testkit.RunRanks(comms, func(c comm.Communicator) error { return c.Barrier(context.Background()) })
		require.NoError(t, errors.Join(errs...))
	})
}

// maxU32 is 2^32-1 as a variable, so that the tests also build where int
// has 32 bits (int(maxU32) is then -1, the same bytes on the wire).
var maxU32 uint32 = math.MaxUint32

// TestSquatterTookTheRank: without a token, a stranger that sends a valid
// Handshake for rank 1 first takes it, and start-up completes with it; the
// real rank 1 is then refused, every time it tries until its connect
// timeout, with a reason that says its rank joined already and that a
// token keeps such processes out (not only "a worker of another job").
func TestSquatterTookTheRank(t *testing.T) {
	testkit.CheckGoroutines(t)
	nw := pipe.NewNetwork()
	ln, err := nw.Listen("coord")
	require.NoError(t, err)
	cfg := star.DefaultConfig()
	cfg.Rank, cfg.Size, cfg.Listener = 0, 2, ln
	cfg.Timeout, cfg.ShutdownTimeout = 10*time.Second, 100*time.Millisecond
	started := testkit.Async(func() error {
		c, err := newRank(cfg)
		if err == nil {
			t.Cleanup(func() { _ = c.Close() })
		}
		return err
	})
	conn, err := nw.Dial(context.Background(), "coord")
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
	_, err = conn.Write(star.EncodeHandshake(1, 2))
	require.NoError(t, err)
	ack := make([]byte, 9)
	_, err = io.ReadFull(conn, ack)
	require.NoError(t, err)
	select {
	case err := <-started:
		require.NoError(t, err, "rank 0's start-up with the stranger as rank 1")
	case <-time.After(10 * time.Second):
		t.Fatal("watchdog: rank 0's start-up did not complete with the stranger as rank 1")
	}

	wcfg := star.DefaultConfig()
	wcfg.Rank, wcfg.Size, wcfg.Dialer, wcfg.Addr = 1, 2, nw, "coord"
	wcfg.ConnectTimeout = 300 * time.Millisecond
	_, err = newRank(wcfg)
	var re *star.RefusedError
	require.ErrorAs(t, err, &re)
	assert.Contains(t, err.Error(), "start-up is complete")
	assert.Contains(t, err.Error(), "rank 1 joined it already: if that was not this process, another took its rank (a token, COBRE_TCP_TOKEN, keeps out processes that do not hold it)")

	// A worker of another job (another size) on the same port is told
	// only that this job is running.
	wcfg.Size = 3
	_, err = newRank(wcfg)
	require.ErrorAs(t, err, &re)
	assert.Contains(t, err.Error(), "start-up is complete")
	assert.NotContains(t, err.Error(), "joined it already")
}
