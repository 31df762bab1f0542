package star_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/star"
	"github.com/starcomm/starcomm/testkit"
)

// The tests in this file put time into healthy jobs over real TCP, with
// polling on (the default): links that idle longer than the timeout, a
// worker that joins late, ranks that compute for most of the timeout. None
// of them may fail. Sleeps here are the scenario (time passing in a rank),
// never synchronisation.

// startTCPLate starts size ranks over loopback TCP with tweak applied to
// each, worker late's process starting only after delay, and returns the
// communicators and how long each rank's New took.
func startTCPLate(t *testing.T, size, late int, delay time.Duration, tweak func(*star.Config)) ([]comm.Communicator, []time.Duration) {
	t.Helper()
	testkit.CheckGoroutines(t)
	comms, took, err := testkit.StartStarTimed(context.Background(), testkit.NewTCPNetwork(), size, func(c *star.Config) {
		if c.Rank == late {
			c.Dialer = testkit.LateDialer{Dialer: c.Dialer, Delay: delay}
		}
		if tweak != nil {
			tweak(c)
		}
	})
	require.NoError(t, err, "start-up")
	t.Cleanup(func() { testkit.CloseAll(comms) })
	return comms, took
}

// barrierAll runs one barrier on every rank and fails the test naming the
// ranks that failed.
func barrierAll(t *testing.T, comms []comm.Communicator, what string) {
	t.Helper()
	for r, err := range testkit.RunRanks(comms, func(c comm.Communicator) error { return c.Barrier(context.Background()) }) {
		require.NoError(t, err, "%s: rank %d", what, r)
	}
}

// TestLateWorkerDefaults: with the default timeouts, the last worker
// joins after the others' handshakes are long over (well past
// HandshakeTimeout). Nothing of the start-up may linger on the sockets:
// the first collectives succeed.
func TestLateWorkerDefaults(t *testing.T) {
	const handshake = 150 * time.Millisecond
	comms, _ := startTCPLate(t, 4, 3, 3*handshake, func(c *star.Config) {
		c.HandshakeTimeout = handshake
	})
	for i := range 3 {
		barrierAll(t, comms, "barrier "+string(rune('0'+i)))
	}
}

// TestStartupBoundedByConnectTimeout: a worker that joins later than the
// collective timeout (but within the connect timeout) must not make the
// first collective of the others fail: every rank's start-up returns once
// all have joined, so the collective timeout starts counting together.
func TestStartupBoundedByConnectTimeout(t *testing.T) {
	const timeout, delay = 300 * time.Millisecond, 900 * time.Millisecond
	comms, took := startTCPLate(t, 4, 3, delay, func(c *star.Config) {
		c.Timeout, c.ConnectTimeout = timeout, 20*time.Second
	})
	for r := 1; r < 3; r++ {
		assert.GreaterOrEqual(t, took[r], delay-50*time.Millisecond, "rank %d's start-up returned before the last worker joined", r)
	}
	barrierAll(t, comms, "first barrier")
}

// TestIdleLongerThanTimeout: one large collective (whose frames are
// written and read by the links' goroutines, which arm the sockets'
// deadlines) and a relayed one whose frames are polled first, then only
// small, polled collectives for longer than the timeout, with idle gaps
// longer than the timeout too, and the polled relay again after one. A
// healthy job never fails. (The timeout is 1 s: at 300 ms the test failed once in CI, 1.5 s
// in, with the race detector and other packages' tests sharing 2 cores,
// where a healthy rank held up that long cannot be told from a hung one.)
func TestIdleLongerThanTimeout(t *testing.T) {
	const timeout = time.Second
	comms, _ := startTCPLate(t, 4, -1, 0, func(c *star.Config) { c.Timeout = timeout })
	ctx := context.Background()
	// 4 MiB of float64 per rank (not polled), then 256 KiB (1 MiB in all:
	// relayed, its frames polled first).
	large := func(n int, what string) {
		t.Helper()
		for r, err := range testkit.RunRanks(comms, func(c comm.Communicator) error {
			counts, displs := make([]int, 4), make([]int, 4)
			for i := range counts {
				counts[i], displs[i] = n, i*n
			}
			return comm.Allgatherv(ctx, c, make([]float64, n), make([]float64, 4*n), counts, displs)
		}) {
			require.NoError(t, err, "%s: rank %d", what, r)
		}
	}
	large(1<<19, "large allgatherv")
	large(1<<15, "polled relayed allgatherv")
	end := time.Now().Add(3 * timeout)
	for i := 0; time.Now().Before(end); i++ {
		for r, err := range testkit.RunRanks(comms, func(c comm.Communicator) error {
			out := make([]float64, 4)
			return comm.Allreduce(ctx, c, []float64{1, 2, 3, 4}, out, comm.Sum)
		}) {
			require.NoError(t, err, "small allreduce %d: rank %d", i, r)
		}
	}
	time.Sleep(2 * timeout) // every link idles longer than the timeout
	barrierAll(t, comms, "barrier after idling")
	time.Sleep(2 * timeout)
	large(1<<15, "polled relayed allgatherv after idling")
}

// TestSlowButAliveRank: one rank computes for most of the timeout before
// each collective; every collective succeeds, whichever rank it is. The
// handshake timeout equals the collective timeout, as with the defaults
// (10 s each when COBRE_TCP_TIMEOUT_SECS=10), so the job outlives every
// deadline of the start-up.
func TestSlowButAliveRank(t *testing.T) {
	const timeout = 400 * time.Millisecond
	for _, slow := range []int{0, 2} {
		t.Run("slow="+string(rune('0'+slow)), func(t *testing.T) {
			comms, _ := startTCPLate(t, 4, -1, 0, func(c *star.Config) { c.Timeout, c.HandshakeTimeout = timeout, timeout })
			ctx := context.Background()
			for i := range 4 {
				for r, err := range testkit.RunRanks(comms, func(c comm.Communicator) error {
					if c.Rank() == slow {
						time.Sleep(timeout * 6 / 10) // computing
					}
					if i%2 == 0 {
						return c.Barrier(ctx)
					}
					out := make([]float64, 4)
					return comm.Allreduce(ctx, c, []float64{1, 2, 3, 4}, out, comm.Sum)
				}) {
					require.NoError(t, err, "collective %d: rank %d", i, r)
				}
			}
		})
	}
}
