package star_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/star"
	"github.com/starcomm/starcomm/testkit"
	"github.com/starcomm/starcomm/transport"
	"github.com/starcomm/starcomm/transport/faulty"
	"github.com/starcomm/starcomm/transport/pipe"
)

// logBuffer collects slog records as text, safe for concurrent use.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) lines(substr string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range strings.Split(l.b.String(), "\n") {
		if strings.Contains(line, substr) {
			out = append(out, line)
		}
	}
	return out
}

// withControl starts size ranks in the current bubble with the control
// session on, the collective timeout long, and a logger.
func withControl(t *testing.T, size int, timeout, liveness time.Duration, logs *logBuffer, tweak func(*star.Config)) []comm.Communicator {
	t.Helper()
	return inBubble(t, size, func(c *star.Config) {
		c.Timeout, c.Liveness = timeout, liveness
		c.StallReport = 30 * time.Second
		if logs != nil {
			c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		}
		if tweak != nil {
			tweak(c)
		}
	})
}

// TestSlowRankIsNotDead: with a collective timeout of an hour and the
// default liveness (10 s), a rank that computes for 10 minutes between
// collectives is not failed: its process keeps sending heartbeats. The
// coordinator reports the stall every 30 s, naming the rank and that it is
// alive. On the fake clock.
func TestSlowRankIsNotDead(t *testing.T) {
	testkit.SyncTest(t, func(t *testing.T) {
		var logs logBuffer
		comms := withControl(t, 4, time.Hour, 10*time.Second, &logs, nil)
		defer testkit.CloseAll(comms)
		ctx := context.Background()
		for r, err := range testkit.RunRanks(comms, func(c comm.Communicator) error { return c.Barrier(ctx) }) {
			require.NoError(t, err, "warm-up, rank %d", r)
		}
		begin := time.Now()
		errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
			if c.Rank() == 2 {
				time.Sleep(10 * time.Minute) // computing
			}
			out := make([]float64, 2)
			return comm.Allreduce(ctx, c, []float64{1, 2}, out, comm.Sum)
		})
		for r, err := range errs {
			require.NoError(t, err, "rank %d", r)
		}
		took := time.Since(begin)
		assert.GreaterOrEqual(t, took, 10*time.Minute)
		assert.Less(t, took, 10*time.Minute+time.Second)
		reports := logs.lines("collective stalled")
		assert.GreaterOrEqual(t, len(reports), 19, "a report every 30 s for 10 minutes")
		// The monitor looks every StallReport/4 (7.5 s) from when rank 0
		// started: the first report comes at the first look 30 s or more
		// into the collective, which began a moment after the warm-up.
		assert.Regexp(t, `allreduce #2 waiting (30|37\.5)s for ranks \[2\] \(0,1,3 arrived\); rank 2 alive, last finished #1 (30|37\.5)s ago`, reports[0])
		assert.Empty(t, logs.lines("unresponsive"))
	})
}

// TestTimeoutSaysWhatItWaitedFor: when the collective timeout fires, the
// coordinator's error says what the stall report says: which ranks
// arrived, which did not, and how the missing one is.
func TestTimeoutSaysWhatItWaitedFor(t *testing.T) {
	testkit.SyncTest(t, func(t *testing.T) {
		comms := withControl(t, 4, time.Minute, 10*time.Second, nil, nil)
		defer testkit.CloseAll(comms)
		ctx := context.Background()
		errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
			if c.Rank() == 3 {
				time.Sleep(2 * time.Minute) // computing longer than the timeout
			}
			return c.Barrier(ctx)
		})
		cf := collectiveFailed(t, errs[0], 3)
		assert.Regexp(t, `barrier #1 waited 1m0\.\d+s for ranks \[3\] \(0,1,2 arrived\); rank 3 alive, has finished no collective`, cf.Error())
		assert.ErrorIs(t, errs[0], os.ErrDeadlineExceeded)
		for _, r := range []int{1, 2} {
			collectiveFailed(t, errs[r], 3)
		}
	})
}

// TestTimeoutHintsAtDifferentCollectives: rank 0 calls barrier while the
// workers call a broadcast from rank 0, which the wire cannot show: each
// side waits for the other. Rank 0's timeout says that every rank it
// waited for is alive and finished the collective before, so that they
// may wait in another collective, and how to find out.
func TestTimeoutHintsAtDifferentCollectives(t *testing.T) {
	testkit.SyncTest(t, func(t *testing.T) {
		comms := withControl(t, 3, time.Minute, 10*time.Second, nil, nil)
		defer testkit.CloseAll(comms)
		ctx := context.Background()
		errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
			if err := c.Barrier(ctx); err != nil {
				return err
			}
			if c.Rank() == 0 {
				return c.Barrier(ctx)
			}
			return comm.Broadcast(ctx, c, make([]float64, 4), 0)
		})
		var cf *comm.CollectiveFailedError
		require.ErrorAs(t, errs[0], &cf)
		assert.Regexp(t, `barrier #2 waited 1m0\.\d+s for ranks \[1 2\] \(0 arrived\); rank 1 alive, last finished #1 1m0\.\d+s ago; rank 2 alive, last finished #1 1m0\.\d+s ago; every rank waited for is alive and finished the collective before: unless it computes this long, it waits in another collective \(the ranks called different collectives; COBRE_DEBUG=detail, or Config.CheckCollectives, names the rank that differs\)`, cf.Error())
	})
}

// TestCoordinatorPastTheTimeoutFailsAsItCalls: rank 0 computes longer
// than the workers' timeout before a barrier. The workers fail naming it
// and say so on their control sessions too, so rank 0's barrier fails as
// it calls it, naming rank 0, instead of reading the workers' parts (sent
// before their Aborts), completing a barrier that every worker has failed,
// and finding out only at its next collective. On the fake clock.
func TestCoordinatorPastTheTimeoutFailsAsItCalls(t *testing.T) {
	testkit.SyncTest(t, func(t *testing.T) {
		const timeout = 3 * time.Second
		comms := withControl(t, 3, timeout, 10*time.Second, nil, nil)
		defer testkit.CloseAll(comms)
		ctx := context.Background()
		var took time.Duration
		errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
			if c.Rank() != 0 {
				return c.Barrier(ctx)
			}
			time.Sleep(2 * timeout) // computing past the timeout
			begin := time.Now()
			err := c.Barrier(ctx)
			took = time.Since(begin)
			return err
		})
		for r, err := range errs {
			collectiveFailed(t, err, 0)
			assert.ErrorIs(t, err, os.ErrDeadlineExceeded, "rank %d", r)
		}
		assert.Contains(t, errs[0].Error(), "no progress within the 3s timeout")
		assert.Less(t, took, time.Second, "rank 0's barrier fails as it is called")
	})
}

// TestTimeoutManyMissingRanks: with more ranks missing than
// comm.MaxRanksItems, the timeout's message writes them as a range and
// tells how the first MaxRanksItems are, then counts the rest.
func TestTimeoutManyMissingRanks(t *testing.T) {
	testkit.SyncTest(t, func(t *testing.T) {
		comms := withControl(t, 24, time.Minute, 10*time.Second, nil, nil)
		defer testkit.CloseAll(comms)
		ctx := context.Background()
		errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
			if r := c.Rank(); r >= 1 && r <= 20 {
				time.Sleep(2 * time.Minute)
			}
			return c.Barrier(ctx)
		})
		var cf *comm.CollectiveFailedError
		require.ErrorAs(t, errs[0], &cf)
		assert.True(t, cf.Rank >= 1 && cf.Rank <= 20, "names a missing rank: %v", cf)
		assert.Regexp(t, `barrier #1 waited 1m0\.\d+s for ranks \[1-20\] \(0,21,22,23 arrived\); rank 1 alive, has finished no collective; `, cf.Error())
		assert.Contains(t, cf.Error(), "; rank 16 alive, has finished no collective; and 4 more ranks")
		assert.NotContains(t, cf.Error(), "rank 17 alive")
	})
}

// desyncCase is one way for ranks to disagree that the wire cannot show.
type desyncCase struct {
	name string
	run  func(ctx context.Context, c comm.Communicator) error
	want string // the error's text, on every rank
}

var desyncCases = []desyncCase{
	{"counts-permuted", func(ctx context.Context, c comm.Communicator) error {
		counts, displs := []int{1, 2, 1, 1}, []int{0, 1, 3, 4}
		if c.Rank() == 2 {
			counts, displs = []int{2, 1, 1, 1}, []int{0, 2, 3, 4}
		}
		send := make([]float64, counts[c.Rank()])
		return comm.Allgatherv(ctx, c, send, make([]float64, 5), counts, displs)
	}, "collective #1: rank 2 called allgatherv(float64, counts=[2,1,1,1]); ranks 0,1,3 called allgatherv(float64, counts=[1,2,1,1])"},
	{"type", func(ctx context.Context, c comm.Communicator) error {
		if c.Rank() == 2 {
			return comm.Allreduce(ctx, c, make([]int64, 4), make([]int64, 4), comm.Sum)
		}
		return comm.Allreduce(ctx, c, make([]float64, 4), make([]float64, 4), comm.Sum)
	}, "collective #1: rank 2 called allreduce(int64, n=4, sum); ranks 0,1,3 called allreduce(float64, n=4, sum)"},
	{"root", func(ctx context.Context, c comm.Communicator) error {
		root := 1
		if c.Rank() == 3 {
			root = 3
		}
		return comm.Broadcast(ctx, c, make([]float64, 3), root)
	}, "collective #1: rank 3 called broadcast(float64, n=3, root=3); ranks 0,1,2 called broadcast(float64, n=3, root=1)"},
	{"op", func(ctx context.Context, c comm.Communicator) error {
		op := comm.Sum
		if c.Rank() == 1 {
			op = comm.Max
		}
		return comm.Allreduce(ctx, c, make([]float64, 2), make([]float64, 2), op)
	}, "collective #1: rank 1 called allreduce(float64, n=2, max); ranks 0,2,3 called allreduce(float64, n=2, sum)"},
	{"coordinator-differs", func(ctx context.Context, c comm.Communicator) error {
		if c.Rank() == 0 {
			return comm.Allreduce(ctx, c, make([]uint64, 2), make([]uint64, 2), comm.BitwiseOr)
		}
		return comm.Allreduce(ctx, c, make([]int64, 2), make([]int64, 2), comm.BitwiseOr)
	}, "collective #1: rank 0 called allreduce(uint64, n=2, bitwise-or); ranks 1,2,3 called allreduce(int64, n=2, bitwise-or)"},
}

// TestDesyncCheck: with CheckCollectives, every mismatch the wire cannot
// see (counts permuted with the same total, element types of one size, a
// broadcast root, a reduce op, the coordinator itself differing) fails
// every rank with a CollectiveFailedError naming the rank that differs and
// saying how (a rank that waits for nothing in that collective learns at
// its next one); the cause is star.ErrDesync.
func TestDesyncCheck(t *testing.T) {
	for _, tc := range desyncCases {
		t.Run("case="+tc.name, func(t *testing.T) {
			testkit.SyncTest(t, func(t *testing.T) {
				comms := withControl(t, 4, time.Minute, 10*time.Second, nil, func(c *star.Config) { c.CheckCollectives = true })
				defer testkit.CloseAll(comms)
				awaitControl(t, comms)
				ctx := context.Background()
				errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
					if err := tc.run(ctx, c); err != nil {
						return err
					}
					// A rank that waits for nothing in this collective (a
					// worker that believes itself the broadcast root)
					// completes it, and learns at its next one.
					return c.Barrier(ctx)
				})
				blamed := int(regexp.MustCompile(`rank (\d+) called`).FindStringSubmatch(tc.want)[1][0] - '0')
				for r, err := range errs {
					cf := collectiveFailed(t, err, blamed)
					assert.Contains(t, cf.Error(), tc.want, "rank %d", r)
					assert.ErrorIs(t, err, star.ErrDesync, "rank %d", r)
				}
			})
		})
	}
}

// TestDesyncOffPassesSilently: without the check, counts permuted with the
// same total pass with wrong results, as the package doc says; with it,
// the same run fails (TestDesyncCheck). And matching calls pass with it.
func TestDesyncOffPassesSilently(t *testing.T) {
	testkit.SyncTest(t, func(t *testing.T) {
		comms := withControl(t, 4, time.Minute, 10*time.Second, nil, nil)
		defer testkit.CloseAll(comms)
		errs := testkit.RunRanks(comms, func(c comm.Communicator) error { return desyncCases[0].run(context.Background(), c) })
		for r, err := range errs {
			assert.NoError(t, err, "rank %d", r)
		}
	})
	testkit.SyncTest(t, func(t *testing.T) {
		comms := withControl(t, 4, time.Minute, 10*time.Second, nil, func(c *star.Config) { c.CheckCollectives = true })
		defer testkit.CloseAll(comms)
		awaitControl(t, comms)
		errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
			return testkit.MixedOps(context.Background(), c, 7, 40)
		})
		for r, err := range errs {
			assert.NoError(t, err, "rank %d", r)
		}
	})
}

// awaitControl waits until every worker's control session is up (see
// sessionsUp).
func awaitControl(t *testing.T, _ []comm.Communicator) {
	t.Helper()
	sessionsUp(t)
}

// sessionsUp waits, in a bubble, until every worker's control session is
// up, without a collective: a worker of three ranks or more opens it in
// the background star.ControlWait() after start-up unless a frame from
// rank 0 comes first (at once on the fake clock, so it is up once every
// goroutine of the bubble is blocked).
func sessionsUp(t *testing.T) {
	t.Helper()
	time.Sleep(star.ControlWait())
	synctest.Wait()
}

// TestSpecOnlyWorker: a worker made of raw spec frames (no control
// session) beside starcomm workers that have one, through every
// collective, with the desync check on: the coordinator serves it exactly
// as the spec says, and checks the others.
func TestSpecOnlyWorker(t *testing.T) {
	testkit.CheckGoroutines(t)
	const size, raw = 4, 2
	nw := pipe.NewNetwork()
	ln, err := nw.Listen("coord")
	require.NoError(t, err)
	comms := make([]comm.Communicator, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		if r == raw {
			continue
		}
		cfg := star.DefaultConfig()
		cfg.Rank, cfg.Size, cfg.Timeout, cfg.Liveness, cfg.CheckCollectives = r, size, 10*time.Second, time.Second, true
		if r == 0 {
			cfg.Listener = ln
		} else {
			cfg.Dialer, cfg.Addr = nw, "coord"
		}
		wg.Go(func() { comms[r], errs[r] = newRank(cfg) })
	}
	conn, err := nw.Dial(context.Background(), "coord")
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
	_, err = conn.Write(star.EncodeHandshake(raw, size))
	require.NoError(t, err)
	frame := func(tag byte, payload []byte) []byte {
		b := make([]byte, star.HeaderSize+len(payload))
		star.PutHeader(b, tag, len(payload))
		copy(b[star.HeaderSize:], payload)
		return b
	}
	expect := func(tag byte, n int) []byte {
		t.Helper()
		got, payload, err := readRawFrame(conn, n)
		require.NoError(t, err)
		require.Equal(t, star.TagName(tag), star.TagName(got))
		require.Len(t, payload, n)
		return payload
	}
	expect(star.TagAck, 4)
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	defer testkit.CloseAll(comms)
	f64 := func(vs ...float64) []byte { return comm.ViewOf(vs).Bytes }

	ctx := context.Background()
	var results sync.Map
	others := func(f func(c comm.Communicator) error) chan error {
		done := make(chan error, 1)
		go func() {
			var live []comm.Communicator
			for r, c := range comms {
				if r != raw {
					live = append(live, c)
				}
			}
			done <- errors.Join(testkit.RunRanks(live, f)...)
		}()
		return done
	}
	// allgatherv: one value per rank.
	done := others(func(c comm.Communicator) error {
		recv := make([]float64, size)
		err := comm.Allgatherv(ctx, c, []float64{float64(c.Rank())}, recv, []int{1, 1, 1, 1}, []int{0, 1, 2, 3})
		results.Store(c.Rank(), recv)
		return err
	})
	_, err = conn.Write(frame(star.TagAllgathervSend, f64(2)))
	require.NoError(t, err)
	assert.Equal(t, f64(0, 1, 2, 3), expect(star.TagAllgathervRecv, 32))
	require.NoError(t, <-done)
	// allreduce sum.
	done = others(func(c comm.Communicator) error {
		out := make([]float64, 1)
		err := comm.Allreduce(ctx, c, []float64{1}, out, comm.Sum)
		if err == nil && out[0] != 4 {
			err = errors.New("wrong sum")
		}
		return err
	})
	_, err = conn.Write(frame(star.TagAllreduceSend, append([]byte{byte(comm.Sum)}, f64(1)...)))
	require.NoError(t, err)
	assert.Equal(t, f64(4), expect(star.TagAllreduceRecv, 8))
	require.NoError(t, <-done)
	// broadcast from rank 0, then from the raw worker.
	done = others(func(c comm.Communicator) error {
		buf := []float64{7}
		if c.Rank() != 0 {
			buf[0] = 0
		}
		return comm.Broadcast(ctx, c, buf, 0)
	})
	assert.Equal(t, f64(7), expect(star.TagBroadcast, 8))
	require.NoError(t, <-done)
	done = others(func(c comm.Communicator) error {
		buf := []float64{0}
		err := comm.Broadcast(ctx, c, buf, raw)
		if err == nil && buf[0] != 9 {
			err = errors.New("wrong broadcast")
		}
		return err
	})
	_, err = conn.Write(frame(star.TagBroadcast, f64(9)))
	require.NoError(t, err)
	require.NoError(t, <-done)
	// barrier.
	done = others(func(c comm.Communicator) error { return c.Barrier(ctx) })
	_, err = conn.Write(frame(star.TagBarrierReady, nil))
	require.NoError(t, err)
	expect(star.TagBarrierGo, 0)
	require.NoError(t, <-done)
	// The coordinator's Close ends it as the spec says.
	done = others(func(c comm.Communicator) error { return c.Close() })
	expect(star.TagShutdown, 0)
	_ = conn.Close()
	require.NoError(t, <-done)
	rest, _ := io.ReadAll(conn)
	assert.Empty(t, rest)
	_ = binary.BigEndian
}

// TestControlSessionOpening: with the control session on, each worker
// dials the coordinator a second time after its Ack (here
// star.ControlWait() after it, with no collective) and opens with a
// Control frame (tag 0x0C, its rank and the size), which the coordinator
// answers with the same frame; smux follows (version 1, a SYN for the
// first stream). The data link carries exactly the spec's frames. Once
// every worker has its session the coordinator's port refuses
// connections. On the fake clock.
func TestControlSessionOpening(t *testing.T) {
	testkit.SyncTest(t, func(t *testing.T) {
		ts := &taps{}
		var addr string
		var dialer func(context.Context, string) error
		comms := inBubble(t, 3, func(c *star.Config) {
			c.Liveness = 10 * time.Second
			if c.Dialer != nil {
				d := c.Dialer
				addr = c.Addr
				dialer = func(ctx context.Context, a string) error {
					conn, err := d.Dial(ctx, a)
					if err == nil {
						conn.Close()
					}
					return err
				}
				c.Dialer = ts.dialer(d)
			}
		})
		defer testkit.CloseAll(comms)
		sessionsUp(t)
		ts.mu.Lock()
		all := append([]*tap(nil), ts.all...)
		ts.mu.Unlock()
		require.Len(t, all, 4, "two connections per worker")
		controls := 0
		for _, tp := range all {
			tp.mu.Lock()
			wrote, read := tp.wrote.Bytes(), tp.read.Bytes()
			switch {
			case len(wrote) >= 13 && wrote[4] == star.TagHandshake:
				assert.Len(t, wrote, 13, "the data link carries the Handshake alone so far")
			case len(wrote) >= 13 && wrote[4] == star.TagControl:
				controls++
				rank := int(binary.BigEndian.Uint32(wrote[5:9]))
				assert.Equal(t, star.EncodeControl(rank, 3), wrote[:13])
				require.GreaterOrEqual(t, len(read), 13)
				assert.Equal(t, star.EncodeControl(rank, 3), read[:13], "the coordinator answers with the same frame")
				require.Greater(t, len(wrote), 14)
				assert.Equal(t, []byte{1, 0}, wrote[13:15], "smux version 1, SYN")
			default:
				t.Errorf("unexpected connection: wrote % x", wrote)
			}
			tp.mu.Unlock()
		}
		assert.Equal(t, 2, controls)
		err := dialer(context.Background(), addr)
		assert.ErrorIs(t, err, syscall.ECONNREFUSED, "the port closes once every worker has its session")
	})
}

// TestListenerWaitsForSpecOnlyWorker: a spec-only worker never opens a
// control session; the coordinator keeps its port open for one
// ConnectTimeout after start-up, then closes it. On the fake clock.
func TestListenerWaitsForSpecOnlyWorker(t *testing.T) {
	testkit.SyncTest(t, func(t *testing.T) {
		const size, raw = 3, 2
		nw := pipe.NewNetwork()
		ln, err := nw.Listen("coord")
		require.NoError(t, err)
		comms := make([]comm.Communicator, size)
		errs := make([]error, size)
		var wg sync.WaitGroup
		for r := range size {
			if r == raw {
				continue
			}
			cfg := star.DefaultConfig()
			cfg.Rank, cfg.Size, cfg.Liveness, cfg.ConnectTimeout = r, size, time.Second, 5*time.Second
			if r == 0 {
				cfg.Listener = ln
			} else {
				cfg.Dialer, cfg.Addr = nw, "coord"
			}
			wg.Go(func() { comms[r], errs[r] = newRank(cfg) })
		}
		conn, err := nw.Dial(context.Background(), "coord")
		require.NoError(t, err)
		defer conn.Close()
		_, err = conn.Write(star.EncodeHandshake(raw, size))
		require.NoError(t, err)
		tag, _, err := readRawFrame(conn, 4)
		require.NoError(t, err)
		require.Equal(t, star.TagName(star.TagAck), star.TagName(tag))
		wg.Wait()
		require.NoError(t, errors.Join(errs...))
		start := time.Now()
		synctest.Wait()
		probe, err := nw.Dial(context.Background(), "coord")
		require.NoError(t, err, "open while a worker may still open its session")
		probe.Close()
		time.Sleep(5*time.Second - time.Since(start) - time.Millisecond)
		synctest.Wait()
		probe, err = nw.Dial(context.Background(), "coord")
		require.NoError(t, err, "still open just before ConnectTimeout")
		probe.Close()
		time.Sleep(2 * time.Millisecond)
		synctest.Wait()
		_, err = nw.Dial(context.Background(), "coord")
		assert.ErrorIs(t, err, syscall.ECONNREFUSED, "closed once ConnectTimeout has passed")
		// The raw worker answers the coordinator's Close as the spec says.
		done := make(chan error, 1)
		go func() {
			done <- errors.Join(testkit.RunRanks(comms[:2], func(c comm.Communicator) error { return c.Close() })...)
		}()
		tag, _, err = readRawFrame(conn, 0)
		require.NoError(t, err)
		require.Equal(t, star.TagName(star.TagShutdown), star.TagName(tag))
		conn.Close()
		require.NoError(t, <-done)
	})
}

// TestOutOfBandAbort: rank 1 is in the middle of writing a 4 MiB frame
// that rank 0 has stopped reading (its end hangs), when rank 2 crashes in
// the same allgatherv. With the control session, rank 0's Abort reaches
// rank 1 over it at once, and rank 1 fails naming rank 2, though its data
// link is stuck mid-frame. Without it, rank 1 learns only when rank 0
// gives up on the link, ShutdownTimeout later, and then only that rank 0
// closed the link. On the fake clock, with a collective timeout of an
// hour.
func TestOutOfBandAbort(t *testing.T) {
	for _, live := range []time.Duration{10 * time.Second, -1} {
		t.Run(fmt.Sprintf("liveness=%v", live), func(t *testing.T) {
			testkit.SyncTest(t, func(t *testing.T) {
				s := faulty.NewScript(
					faulty.Fault{Kind: faulty.Hang, Rank: 0, Link: 1, Dir: faulty.Read, Frame: 1, Offset: 64 << 10},
					faulty.Fault{Kind: faulty.Crash, Rank: 2, Link: 0, Dir: faulty.Write, Frame: 1, Offset: 100, WholeRank: true},
				)
				errs, took := relayedAllgatherv(t, s, live, nil)
				var cf *comm.CollectiveFailedError
				require.ErrorAs(t, errs[1], &cf)
				if live > 0 {
					assert.Equal(t, 2, cf.Rank, "rank 1 names the crashed rank: %v", errs[1])
					assert.Zero(t, took[1], "rank 1 learns at once")
					// Rank 0 sees the crash as its read of rank 2's region
					// ending early or, when its relay writer to rank 2 gets
					// there first, as a broken pipe: either way the cause
					// travels with the Abort.
					assert.True(t, errors.Is(errs[1], io.ErrUnexpectedEOF) || errors.Is(errs[1], syscall.EPIPE),
						"the crash's cause travels with the Abort: %v", errs[1])
				} else {
					assert.GreaterOrEqual(t, took[1], 5*time.Second, "without the control session: %v", errs[1])
				}
				collectiveFailed(t, errs[0], 2)
			})
		})
	}
}

// retryDialer dials nw, trying again every 10 ms while nobody listens, as
// the TCP dialer does.
func retryDialer(nw *pipe.Network) transport.Dialer {
	return transport.DialerFunc(func(ctx context.Context, addr string) (transport.Conn, error) {
		for {
			conn, err := nw.Dial(ctx, addr)
			if !errors.Is(err, syscall.ECONNREFUSED) {
				return conn, err
			}
			select {
			case <-ctx.Done():
				return nil, err
			case <-time.After(10 * time.Millisecond):
			}
		}
	})
}

// TestNextJobOnSamePort: a job's coordinator keeps its port open after
// start-up while it waits for control sessions (here a worker that opens
// none). A worker of the next job on the same port that reaches it is
// refused with cause "running" and tries again: once the first job ends
// and the next one's coordinator listens, it joins. With no next
// coordinator, it fails once ConnectTimeout is over, saying why. On the
// fake clock.
func TestNextJobOnSamePort(t *testing.T) {
	for _, next := range []bool{true, false} {
		t.Run(fmt.Sprintf("next=%v", next), func(t *testing.T) {
			testkit.SyncTest(t, func(t *testing.T) {
				nw := pipe.NewNetwork()
				var logs logBuffer
				startJob := func(size int, liveness []time.Duration) []comm.Communicator {
					ln, err := nw.Listen("coord")
					require.NoError(t, err)
					comms := make([]comm.Communicator, size)
					errs := make([]error, size)
					var wg sync.WaitGroup
					for r := range size {
						cfg := star.DefaultConfig()
						cfg.Rank, cfg.Size, cfg.Liveness = r, size, liveness[r]
						if r == 0 {
							cfg.Listener = ln
							cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
						} else {
							cfg.Dialer, cfg.Addr = retryDialer(nw), "coord"
						}
						wg.Go(func() { comms[r], errs[r] = newRank(cfg) })
					}
					wg.Wait()
					require.NoError(t, errors.Join(errs...))
					return comms
				}
				first := startJob(2, []time.Duration{10 * time.Second, -1})
				// A worker of the next job, rank 1 of 2.
				cfg := star.DefaultConfig()
				cfg.Rank, cfg.Size, cfg.Dialer, cfg.Addr, cfg.ConnectTimeout = 1, 2, retryDialer(nw), "coord", 5*time.Second
				type result struct {
					c   comm.Communicator
					err error
				}
				joined := make(chan result, 1)
				go func() {
					c, err := newRank(cfg)
					joined <- result{c, err}
				}()
				time.Sleep(time.Second)
				synctest.Wait()
				require.Empty(t, joined, "the worker must not join a running job")
				assert.NotEmpty(t, logs.lines("is running"), "the running coordinator refused it")
				require.NoError(t, errors.Join(testkit.RunRanks(first, func(c comm.Communicator) error { return c.Close() })...))
				if !next {
					res := <-joined
					require.Error(t, res.err)
					assert.ErrorContains(t, res.err, "already running")
					return
				}
				ln, err := nw.Listen("coord")
				require.NoError(t, err)
				c0 := star.DefaultConfig()
				c0.Rank, c0.Size, c0.Listener = 0, 2, ln
				coord, err := newRank(c0)
				require.NoError(t, err)
				res := <-joined
				require.NoError(t, res.err)
				second := []comm.Communicator{coord, res.c}
				require.NoError(t, errors.Join(testkit.RunRanks(second, func(c comm.Communicator) error { return c.Barrier(context.Background()) })...))
				require.NoError(t, testkit.CloseAll(second))
			})
		})
	}
}

// TestNextJobCaughtByClose: a worker of the next job whose connection is
// still in its handshake when the running coordinator closes is refused
// with cause "running" (it tries again, and joins the next coordinator),
// not left with an end of file, which it took for a failed start-up. On
// the fake clock.
func TestNextJobCaughtByClose(t *testing.T) {
	testkit.SyncTest(t, func(t *testing.T) {
		nw := pipe.NewNetwork()
		ln, err := nw.Listen("coord")
		require.NoError(t, err)
		comms := make([]comm.Communicator, 2)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for r := range 2 {
			cfg := star.DefaultConfig()
			cfg.Rank, cfg.Size = r, 2
			// The worker opens no control session: the coordinator keeps
			// listening for it (ConnectTimeout).
			cfg.Liveness = -1
			if r == 0 {
				cfg.Liveness = 10 * time.Second
				cfg.Listener = ln
			} else {
				cfg.Dialer, cfg.Addr = retryDialer(nw), "coord"
			}
			wg.Go(func() { comms[r], errs[r] = newRank(cfg) })
		}
		wg.Wait()
		require.NoError(t, errors.Join(errs...))
		// The next job's worker has connected; its Handshake has not come
		// yet when the job closes.
		conn, err := nw.Dial(context.Background(), "coord")
		require.NoError(t, err)
		defer conn.Close()
		synctest.Wait()
		type frame struct {
			tag     byte
			payload []byte
			err     error
		}
		got := make(chan frame, 1)
		go func() {
			tag, payload, err := readRawFrame(conn, star.MaxAbortReason)
			got <- frame{tag, payload, err}
		}()
		require.NoError(t, errors.Join(testkit.RunRanks(comms, func(c comm.Communicator) error { return c.Close() })...))
		f := <-got
		tag, payload, err := f.tag, f.payload, f.err
		require.NoError(t, err, "an answer, not an end of file")
		require.Equal(t, star.TagName(star.TagAbort), star.TagName(tag))
		assert.Contains(t, string(payload), "cause=running")
	})
}

// TestOutOfBandAbortBeforeReturn: a relayed allgatherv fails on rank 0
// (rank 2 crashes in the middle of its region), which cuts rank 1's
// AllgathervRecv short, so only the control session can tell rank 1 why.
// Rank 0's collective returns only once that Abort went out, however late
// its sending goroutine runs (here 50 ms late), so that a process that
// exits the instant it sees the error (rank 0 crashing as its call
// returns) has still told rank 1: rank 1 names rank 2, not rank 0.
func TestOutOfBandAbortBeforeReturn(t *testing.T) {
	testkit.SyncTest(t, func(t *testing.T) {
		const late = 50 * time.Millisecond
		defer star.SetTestHook(func(rank int, point string) {
			if rank == 0 && point == "oob" {
				time.Sleep(late)
			}
		})()
		s := faulty.NewScript(
			faulty.Fault{Kind: faulty.Crash, Rank: 2, Link: 0, Dir: faulty.Write, Frame: 1, Offset: 100, WholeRank: true},
			faulty.Fault{Kind: faulty.Crash, Rank: 0, Manual: true, WholeRank: true},
		)
		errs, took := relayedAllgatherv(t, s, 10*time.Second, func(rank int) {
			if rank == 0 {
				s.Fire(0) // rank 0's process exits at once
			}
		})
		collectiveFailed(t, errs[0], 2)
		assert.GreaterOrEqual(t, took[0], late, "rank 0 waited for its out-of-band Abort")
		collectiveFailed(t, errs[1], 2)
		assert.Contains(t, errs[1].Error(), "aborted by rank 0", "rank 1 learnt it from rank 0's Abort")
	})
}

// relayedAllgatherv runs, in a bubble, one allgatherv of 4 MiB per rank
// (relayed) on 3 ranks whose conns carry s's faults, with a collective
// timeout of an hour, the given liveness timeout and a 5 s shutdown
// timeout, once the control sessions are up. Each rank calls after (nil:
// nothing) as its call returns. It returns each rank's error and how long
// its call took.
func relayedAllgatherv(t *testing.T, s *faulty.Script, live time.Duration, after func(rank int)) ([]error, []time.Duration) {
	t.Helper()
	const size, n = 3, 512 << 10 // float64s: 4 MiB
	comms := inBubble(t, size, func(c *star.Config) {
		c.Timeout, c.Liveness, c.ShutdownTimeout = time.Hour, live, 5*time.Second
		if c.Listener != nil {
			c.Listener = s.WrapListener(c.Listener)
		}
		if c.Dialer != nil {
			c.Dialer = s.WrapDialer(c.Dialer, c.Rank)
		}
	})
	t.Cleanup(func() { testkit.CloseAll(comms) })
	sessionsUp(t) // the control sessions are up
	counts, displs := []int{n, n, n}, []int{0, n, 2 * n}
	took := make([]time.Duration, size)
	begin := time.Now()
	errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
		err := comm.Allgatherv(context.Background(), c, make([]float64, n), make([]float64, size*n), counts, displs)
		took[c.Rank()] = time.Since(begin)
		if after != nil {
			after(c.Rank())
		}
		return err
	})
	return errs, took
}

// TestAllSilentRechecked: rank 0 names itself unresponsive only when it
// still hears none of its workers a heartbeat interval after one of them
// reached the liveness timeout. Rank 2 freezes (its heartbeats stop and it
// enters no collective) while ranks 0, 1 and 3 wait in a barrier. On the
// fake clock, liveness 10 s.
//
// starved: rank 0's readers of ranks 1 and 3 are held back (as on a
// loaded host, where its timers come due before it has read the
// heartbeats waiting in its sockets) until it finds everyone silent; the
// heartbeats they then read clear ranks 1 and 3, and every rank names
// rank 2. The old check named rank 0 at once.
//
// cut-off: ranks 1 and 3 stop their heartbeats too (rank 0 hears nobody):
// rank 0 names itself, a heartbeat interval (1 s) after it found everyone
// silent, and ranks 1 and 3 learn it from its Abort.
func TestAllSilentRechecked(t *testing.T) {
	const live = 10 * time.Second
	for _, tc := range []struct {
		name   string
		silent []int // ranks whose heartbeats stop
		blame  int
	}{
		{"starved", []int{2}, 2},
		{"cut-off", []int{1, 2, 3}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testkit.SyncTest(t, func(t *testing.T) {
				var frozen atomic.Bool
				release := make(chan struct{})
				var silentAt time.Time
				var once sync.Once
				defer star.SetTestHook(func(rank int, point string) {
					if !frozen.Load() {
						return
					}
					switch {
					case point == star.HookBeat && slices.Contains(tc.silent, rank):
						time.Sleep(time.Hour) // frozen (on the fake clock)
					case point == star.HookHeartbeat && (rank == 1 || rank == 3):
						// Rank 0 about to read rank 1's or 3's
						// heartbeats: starved until it finds everyone
						// silent.
						select {
						case <-release:
						case <-time.After(3 * live):
						}
					case point == star.HookAllSilent:
						once.Do(func() { silentAt = time.Now(); close(release) })
					}
				})()
				comms := startWarm(t, live)
				defer testkit.CloseAll(comms)
				frozen.Store(true)
				ctx := context.Background()
				begin := time.Now()
				var others sync.WaitGroup
				others.Add(3)
				var failedAt time.Time
				errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
					if c.Rank() == 2 {
						others.Wait() // frozen: in no collective, not closed
						return nil
					}
					defer others.Done()
					err := c.Barrier(ctx)
					if c.Rank() == 0 {
						failedAt = time.Now()
					}
					return err
				})
				for _, r := range []int{0, 1, 3} {
					cf := collectiveFailed(t, errs[r], tc.blame)
					assert.Contains(t, cf.Error(), "unresponsive", "rank %d", r)
				}
				took := failedAt.Sub(begin)
				assert.GreaterOrEqual(t, took, live-live/10, "detected before the liveness timeout")
				assert.LessOrEqual(t, took, live+2*live/10, "detected late")
				require.False(t, silentAt.IsZero(), "rank 0 found every worker silent")
				if tc.blame == 0 {
					assert.Contains(t, errs[0].Error(), "heard no heartbeat from any of its 3 workers")
					assert.GreaterOrEqual(t, failedAt.Sub(silentAt), live/10, "rank 0 waited a heartbeat interval before it named itself")
				}
			})
		})
	}
}

// TestCloseDuringAllSilentCheck: Close from another goroutine while rank 0
// waits its heartbeat interval before naming itself (every worker silent,
// liveness 10 s) returns at once, and the barrier it interrupts fails with
// ErrInvalidCommunicator, not with a verdict of unresponsiveness. On the
// fake clock.
func TestCloseDuringAllSilentCheck(t *testing.T) {
	testkit.SyncTest(t, func(t *testing.T) {
		const live = 10 * time.Second
		var frozen atomic.Bool
		var once sync.Once
		closed := make(chan time.Duration, 1)
		var comms []comm.Communicator
		defer star.SetTestHook(func(rank int, point string) {
			if !frozen.Load() {
				return
			}
			switch {
			case point == star.HookBeat && rank != 0:
				time.Sleep(time.Hour) // every worker frozen
			case point == star.HookAllSilent:
				once.Do(func() {
					go func() {
						begin := time.Now()
						_ = comms[0].Close()
						closed <- time.Since(begin)
					}()
				})
			}
		})()
		comms = startWarm(t, live)
		defer testkit.CloseAll(comms)
		frozen.Store(true)
		err := comms[0].Barrier(context.Background()) // the workers never come
		assert.ErrorIs(t, err, comm.ErrInvalidCommunicator)
		assert.NotContains(t, err.Error(), "unresponsive")
		assert.Less(t, <-closed, live/10, "Close waited for the check")
	})
}

// startWarm starts 4 ranks in the current bubble with the control session
// on (the collective timeout an hour, the given liveness timeout), runs a
// barrier and waits for the control sessions. The caller closes the ranks.
func startWarm(t *testing.T, live time.Duration) []comm.Communicator {
	t.Helper()
	comms := withControl(t, 4, time.Hour, live, nil, nil)
	errs := testkit.RunRanks(comms, func(c comm.Communicator) error { return c.Barrier(context.Background()) })
	if err := errors.Join(errs...); err != nil {
		testkit.CloseAll(comms)
		t.Fatalf("warm-up barrier: %v", err)
	}
	awaitControl(t, comms)
	return comms
}

// TestPeerTimeoutUntilSession: rank 0 holds every worker's data link to
// the liveness timeout (transport.PeerTimeoutSetter: the link fails once
// the worker's host acknowledges nothing for that long) until the
// worker's control session is up, whose heartbeats then take over (the
// link's own setting restored, 0). A worker that never opens one (rank 2,
// without a control session like a spec-only worker) stays held to it:
// lost before its session came up, or without one, it is found within
// the liveness timeout rather than the collective timeout.
func TestPeerTimeoutUntilSession(t *testing.T) {
	testkit.SyncTest(t, func(t *testing.T) {
		s := faulty.NewScript()
		comms := inBubble(t, 3, func(c *star.Config) {
			c.Timeout, c.Liveness = time.Hour, 10*time.Second
			if c.Rank == 2 {
				c.Liveness = -1
			}
			if c.Listener != nil {
				c.Listener = s.WrapListener(c.Listener)
			}
			if c.Dialer != nil {
				c.Dialer = s.WrapDialer(c.Dialer, c.Rank)
			}
		})
		t.Cleanup(func() { testkit.CloseAll(comms) })
		sessionsUp(t) // rank 1's control session is up
		require.NoError(t, errors.Join(testkit.RunRanks(comms, func(c comm.Communicator) error { return c.Barrier(context.Background()) })...))
		assert.Equal(t, map[int]time.Duration{1: 0, 2: 10 * time.Second}, s.PeerTimeouts(0))
		assert.Equal(t, map[int]time.Duration{0: 0}, s.PeerTimeouts(1), "workers leave theirs alone")
	})
}

// TestNoSessionWarnedAtNextCollective: workers whose coordinator offers no
// control session (its liveness off, theirs on) log at warning level that
// liveness is off, once each, at their next collective; a job that closes
// before any collective logs no warning (a short job's coordinator refuses
// the late session as it ends: no news to its user).
func TestNoSessionWarnedAtNextCollective(t *testing.T) {
	const warning = "level=WARN msg=\"no control session"
	for _, collectives := range []int{0, 2} {
		t.Run(fmt.Sprintf("collectives=%d", collectives), func(t *testing.T) {
			testkit.SyncTest(t, func(t *testing.T) {
				var logs logBuffer
				comms := withControl(t, 3, time.Minute, 10*time.Second, &logs, func(c *star.Config) {
					if c.Rank == 0 {
						c.Liveness = -1 // it offers no control session
					}
				})
				sessionsUp(t) // the workers' attempts are over
				assert.Len(t, logs.lines("msg=\"no control session\""), 2, "each worker's attempt failed (debug)")
				assert.Empty(t, logs.lines(warning), "no warning before a collective")
				for range collectives {
					for r, err := range testkit.RunRanks(comms, func(c comm.Communicator) error { return c.Barrier(context.Background()) }) {
						require.NoError(t, err, "rank %d", r)
					}
				}
				require.NoError(t, testkit.CloseAll(comms))
				want := 0
				if collectives > 0 {
					want = 2 // once per worker
				}
				assert.Len(t, logs.lines(warning), want, "%s", logs.lines(""))
			})
		})
	}
}
