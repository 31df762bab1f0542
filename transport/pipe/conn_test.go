package pipe_test

import (
	"bytes"
	"fmt"
	"github.com/starcomm/starcomm/testkit"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm/transport"
	"github.com/starcomm/starcomm/transport/pipe"
)

// The tests in this file run in synctest bubbles: deadlines follow the fake
// clock, so times are exact; synctest.Wait tells a blocked call from one
// that returned; and a goroutine left blocked when a test ends (say, a
// Read that Close failed to unblock) fails it as a deadlock.

type ioResult struct {
	n   int
	err error
}

func write(c transport.Conn, p []byte) func() ioResult {
	return func() ioResult { n, err := c.Write(p); return ioResult{n, err} }
}

func read(c transport.Conn, size int) func() ioResult {
	return func() ioResult { n, err := c.Read(make([]byte, size)); return ioResult{n, err} }
}

// readAll reads n bytes from c with Reads of at most size bytes.
func readAll(t *testing.T, c transport.Conn, n, size int) []byte {
	t.Helper()
	var got []byte
	buf := make([]byte, size)
	for len(got) < n {
		k, err := c.Read(buf[:min(size, n-len(got))])
		require.NoError(t, err, "Read after %d of %d bytes", len(got), n)
		got = append(got, buf[:k]...)
	}
	return got
}

// connect returns both ends of a new connection of n; they are closed when
// the test ends.
func connect(t *testing.T, n *pipe.Network) (dialed, accepted transport.Conn) {
	t.Helper()
	l, err := n.Listen(fmt.Sprintf("l-%p", t))
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	type connResult struct {
		c   transport.Conn
		err error
	}
	acc := testkit.Async(func() connResult { c, err := l.Accept(); return connResult{c, err} })
	dialed, err = n.Dial(t.Context(), l.Addr())
	require.NoError(t, err, "Dial")
	t.Cleanup(func() { dialed.Close() })
	a := <-acc
	require.NoError(t, a.err, "Accept")
	t.Cleanup(func() { a.c.Close() })
	return dialed, a.c
}

func network(buffer int) *pipe.Network {
	n := pipe.NewNetwork()
	n.Buffer = buffer
	return n
}

// pollers returns both ends of a new connection of n as *pipe.Conn.
func pollers(t *testing.T, n *pipe.Network) (a, b *pipe.Conn) {
	t.Helper()
	ca, cb := connect(t, n)
	a, ok := ca.(*pipe.Conn)
	require.True(t, ok, "Dial returned a %T, want *pipe.Conn", ca)
	b, ok = cb.(*pipe.Conn)
	require.True(t, ok, "Accept returned a %T, want *pipe.Conn", cb)
	return a, b
}

func seq(n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(i*13 + 1)
	}
	return p
}

// TestUnbuffered: a Write returns only once the peer has read all of it.
func TestUnbuffered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := connect(t, pipe.NewNetwork())
		msg := seq(100)
		wr := testkit.Async(write(a, msg))
		testkit.Blocked(t, wr, "Write with nobody reading")
		require.Equal(t, msg[:30], readAll(t, b, 30, 30))
		testkit.Blocked(t, wr, "Write with 70 bytes unread")
		require.Equal(t, msg[30:], readAll(t, b, 70, 7))
		require.Equal(t, ioResult{100, nil}, testkit.Ready(t, wr, "Write read in full"))

		// A Read waiting first gets the bytes of a later Write.
		rd := testkit.Async(func() []byte { return readAll(t, a, 5, 64) })
		testkit.Blocked(t, rd, "Read with nothing written")
		n, err := b.Write([]byte("hello"))
		require.NoError(t, err)
		require.Equal(t, 5, n)
		require.Equal(t, []byte("hello"), testkit.Ready(t, rd, "Read"))
	})
}

// TestBuffered: with Network.Buffer, a Write returns once its bytes fit in
// the buffer, and one larger than the free room waits for the reader.
func TestBuffered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := connect(t, network(10))
		n, err := a.Write([]byte("0123456"))
		require.NoError(t, err, "Write that fits")
		require.Equal(t, 7, n)
		wr := testkit.Async(write(a, []byte("789abcdefghij")))
		testkit.Blocked(t, wr, "Write larger than the free room")
		require.Equal(t, []byte("0123"), readAll(t, b, 4, 4))
		testkit.Blocked(t, wr, "Write with 6 bytes still waiting")
		require.Equal(t, []byte("456789abcd"), readAll(t, b, 10, 10), "the buffer refills from the waiting Write")
		require.Equal(t, ioResult{13, nil}, testkit.Ready(t, wr, "Write that fits after the reads"))
		require.Equal(t, []byte("efghij"), readAll(t, b, 6, 64))

		// The other direction has its own buffer.
		n, err = b.Write(seq(10))
		require.NoError(t, err)
		require.Equal(t, 10, n)
		require.Equal(t, seq(10), readAll(t, a, 10, 3))

		// Close: the peer reads what is buffered, then io.EOF.
		_, err = a.Write([]byte("bye"))
		require.NoError(t, err)
		require.NoError(t, a.Close())
		require.Equal(t, []byte("bye"), readAll(t, b, 3, 64))
		n, err = b.Read(make([]byte, 1))
		require.Equal(t, io.EOF, err)
		require.Zero(t, n)
	})
}

// TestWriteDeadlineMidWrite: a Write that hits its deadline reports the
// bytes the peer got.
func TestWriteDeadlineMidWrite(t *testing.T) {
	for _, buffer := range []int{0, 4} {
		t.Run(fmt.Sprintf("buffer=%d", buffer), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a, b := connect(t, network(buffer))
				start := time.Now()
				require.NoError(t, a.SetWriteDeadline(start.Add(time.Second)))
				wr := testkit.Async(write(a, seq(20)))
				require.Equal(t, seq(6), readAll(t, b, 6, 6))
				testkit.Blocked(t, wr, "Write before its deadline")
				res := <-wr
				require.ErrorIs(t, res.err, os.ErrDeadlineExceeded)
				require.Equal(t, time.Second, time.Since(start))
				require.Equal(t, 6+buffer, res.n, "bytes read or buffered")
				// What was buffered still arrives, then the next Write's.
				require.NoError(t, a.SetWriteDeadline(time.Time{}))
				wr = testkit.Async(write(a, []byte("next")))
				require.Equal(t, append(seq(6 + buffer)[6:], "next"...), readAll(t, b, buffer+4, 64))
				require.Equal(t, ioResult{4, nil}, testkit.Ready(t, wr, "Write after the deadline was cleared"))
			})
		})
	}
}

// TestDeadlinesFakeClock: deadlines follow the synctest clock exactly, move
// while a call waits, and a passed one fails I/O even with data or room
// there, until it is cleared.
func TestDeadlinesFakeClock(t *testing.T) {
	for _, buffer := range []int{0, 128} {
		t.Run(fmt.Sprintf("buffer=%d", buffer), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a, b := connect(t, network(buffer))
				start := time.Now()
				require.NoError(t, a.SetReadDeadline(start.Add(10*time.Second)))
				type timed struct {
					ioResult
					at time.Duration
				}
				rd := testkit.Async(func() timed { r := read(a, 8)(); return timed{r, time.Since(start)} })
				testkit.Blocked(t, rd, "Read before its deadline")
				require.NoError(t, a.SetReadDeadline(start.Add(20*time.Second))) // later
				time.Sleep(15 * time.Second)
				testkit.Blocked(t, rd, "Read after its deadline moved later")
				require.NoError(t, a.SetReadDeadline(time.Now().Add(time.Second))) // earlier
				r := <-rd
				require.ErrorIs(t, r.err, os.ErrDeadlineExceeded)
				require.Zero(t, r.n)
				require.Equal(t, 16*time.Second, r.at)

				// The passed deadline fails Read even with data there (a
				// pending Write, or the buffer).
				wr := testkit.Async(write(b, []byte("data")))
				synctest.Wait()
				_, err := a.Read(make([]byte, 8))
				require.ErrorIs(t, err, os.ErrDeadlineExceeded, "Read past its deadline, data there")
				_, err = a.(*pipe.Conn).ReadNow(make([]byte, 8))
				require.ErrorIs(t, err, os.ErrDeadlineExceeded, "ReadNow past the deadline, data there")
				require.NoError(t, a.SetReadDeadline(time.Time{}))
				require.Equal(t, []byte("data"), readAll(t, a, 4, 8))
				require.Equal(t, ioResult{4, nil}, testkit.Ready(t, wr, "Write"))

				// A deadline moved into the past unblocks a pending Write
				// at once.
				wr = testkit.Async(write(a, seq(buffer+1)))
				testkit.Blocked(t, wr, "Write larger than the buffer")
				now := time.Now()
				require.NoError(t, a.SetWriteDeadline(now.Add(-time.Second)))
				res := testkit.Ready(t, wr, "Write after its deadline moved into the past")
				require.ErrorIs(t, res.err, os.ErrDeadlineExceeded)
				require.Equal(t, buffer, res.n)
				require.Zero(t, time.Since(now))
				n, err := a.(*pipe.Conn).WriteNow([]byte("x"))
				require.ErrorIs(t, err, os.ErrDeadlineExceeded, "WriteNow past the deadline")
				require.Zero(t, n)
				require.NoError(t, a.SetDeadline(time.Time{}))
				wr = testkit.Async(write(a, []byte("ok")))
				require.Equal(t, append(seq(buffer), "ok"...), readAll(t, b, buffer+2, 64))
				require.Equal(t, ioResult{2, nil}, testkit.Ready(t, wr, "Write after the deadline was cleared"))
			})
		})
	}
}

// TestClose: Close unblocks pending I/O on both ends; the closed end's I/O
// fails with io.ErrClosedPipe; the peer reads io.EOF and its Writes fail
// with io.ErrClosedPipe. No goroutine is left behind (synctest.Test would
// report it).
func TestClose(t *testing.T) {
	for _, buffer := range []int{0, 16} {
		t.Run(fmt.Sprintf("buffer=%d", buffer), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// Reads pending on both ends.
				a, b := connect(t, network(buffer))
				ownRead, peerRead := testkit.Async(read(a, 8)), testkit.Async(read(b, 8))
				testkit.Blocked(t, ownRead, "Read with nothing sent")
				testkit.Blocked(t, peerRead, "Read with nothing sent")
				require.NoError(t, a.Close())
				r := testkit.Ready(t, ownRead, "Read pending during Close")
				require.ErrorIs(t, r.err, io.ErrClosedPipe)
				require.Equal(t, ioResult{0, io.EOF}, testkit.Ready(t, peerRead, "peer's Read pending during Close"))
				require.NoError(t, a.Close(), "second Close")
				_, err := a.Read(make([]byte, 1))
				require.ErrorIs(t, err, io.ErrClosedPipe, "Read after Close")
				_, err = a.Write([]byte{1})
				require.ErrorIs(t, err, io.ErrClosedPipe, "Write after Close")
				require.ErrorIs(t, a.SetDeadline(time.Now()), io.ErrClosedPipe, "SetDeadline after Close")
				require.ErrorIs(t, a.(transport.CloseWriter).CloseWrite(), io.ErrClosedPipe, "CloseWrite after Close")
				_, err = b.Write([]byte{1})
				require.ErrorIs(t, err, io.ErrClosedPipe, "peer's Write after Close")

				// Writes pending on both ends: each stalls on the bytes
				// beyond the buffer.
				a, b = connect(t, network(buffer))
				ownWrite, peerWrite := testkit.Async(write(a, seq(buffer+8))), testkit.Async(write(b, seq(buffer+8)))
				testkit.Blocked(t, ownWrite, "Write with nobody reading")
				testkit.Blocked(t, peerWrite, "Write with nobody reading")
				require.NoError(t, a.Close())
				r = testkit.Ready(t, ownWrite, "Write pending during Close")
				require.ErrorIs(t, r.err, io.ErrClosedPipe)
				require.Equal(t, buffer, r.n, "bytes buffered before Close")
				r = testkit.Ready(t, peerWrite, "peer's Write pending during Close")
				require.ErrorIs(t, r.err, io.ErrClosedPipe)
				require.Equal(t, buffer, r.n)
				// The peer reads what the closed end had buffered, then
				// io.EOF.
				got, err := io.ReadAll(b)
				require.NoError(t, err)
				require.Equal(t, seq(buffer), got)
			})
		})
	}
}

// TestCloseWrite: after CloseWrite the peer reads the data written so far
// then io.EOF, this end still reads, and its Writes, pending or later, fail
// with io.ErrClosedPipe.
func TestCloseWrite(t *testing.T) {
	for _, buffer := range []int{0, 16} {
		t.Run(fmt.Sprintf("buffer=%d", buffer), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a, b := pollers(t, network(buffer))
				wr := testkit.Async(write(a, seq(buffer+5)))
				require.Equal(t, seq(2), readAll(t, b, 2, 2))
				testkit.Blocked(t, wr, "Write larger than the buffer")
				require.NoError(t, a.CloseWrite())
				res := testkit.Ready(t, wr, "pending Write after CloseWrite")
				require.ErrorIs(t, res.err, io.ErrClosedPipe)
				require.Equal(t, buffer+2, res.n, "bytes the peer read or has buffered")
				_, err := a.Write([]byte("x"))
				require.ErrorIs(t, err, io.ErrClosedPipe, "Write after CloseWrite")
				_, err = a.WriteNow([]byte("x"))
				require.ErrorIs(t, err, io.ErrClosedPipe, "WriteNow after CloseWrite")

				got, err := io.ReadAll(b)
				require.NoError(t, err)
				require.Equal(t, seq(buffer + 2)[2:], got)
				n, err := b.ReadNow(make([]byte, 1))
				require.Equal(t, io.EOF, err, "peer's ReadNow after CloseWrite")
				require.Zero(t, n)

				// The half-closed end still reads, by Read and ReadNow.
				wr = testkit.Async(write(b, []byte("reply")))
				require.Equal(t, []byte("re"), readAll(t, a, 2, 2))
				n, err = a.ReadNow(make([]byte, 8))
				require.NoError(t, err)
				require.Equal(t, 3, n)
				require.Equal(t, ioResult{5, nil}, testkit.Ready(t, wr, "peer's Write"))
				require.NoError(t, b.Close())
				n, err = a.Read(make([]byte, 1))
				require.Equal(t, io.EOF, err)
				require.Zero(t, n)
			})
		})
	}
}

// TestReadNow: ReadNow takes what has arrived without waiting, from a
// pending Write (unbuffered) or the buffer, and never more.
func TestReadNow(t *testing.T) {
	for _, buffer := range []int{0, 8} {
		t.Run(fmt.Sprintf("buffer=%d", buffer), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a, b := pollers(t, network(buffer))
				n, err := b.ReadNow(make([]byte, 8))
				require.NoError(t, err, "ReadNow with nothing sent")
				require.Zero(t, n)
				n, err = b.ReadNow(nil)
				require.NoError(t, err)
				require.Zero(t, n)

				msg := seq(20)
				wr := testkit.Async(write(a, msg))
				synctest.Wait()
				var got []byte
				buf := make([]byte, 3)
				for len(got) < len(msg) {
					n, err := b.ReadNow(buf)
					require.NoError(t, err)
					require.NotZero(t, n, "ReadNow after %d bytes, with the rest pending or buffered", len(got))
					got = append(got, buf[:n]...)
				}
				require.Equal(t, msg, got)
				require.Equal(t, ioResult{20, nil}, testkit.Ready(t, wr, "Write read by ReadNow"))
				n, err = b.ReadNow(buf)
				require.NoError(t, err)
				require.Zero(t, n, "ReadNow after all was read")

				// ReadNow and Read share the stream.
				wr = testkit.Async(write(a, []byte("abcdef")))
				synctest.Wait()
				n, err = b.ReadNow(buf)
				require.NoError(t, err)
				require.Equal(t, []byte("abc"), buf[:n])
				require.Equal(t, []byte("def"), readAll(t, b, 3, 8))
				require.Equal(t, ioResult{6, nil}, testkit.Ready(t, wr, "Write"))
			})
		})
	}
}

// TestReadNowEOFAndClose: ReadNow returns the data then io.EOF after the
// peer's Close, and fails with io.ErrClosedPipe after its own.
func TestReadNowEOFAndClose(t *testing.T) {
	for _, buffer := range []int{0, 8} {
		t.Run(fmt.Sprintf("buffer=%d", buffer), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a, b := pollers(t, network(buffer))
				wr := testkit.Async(func() error {
					if _, err := a.Write([]byte("last")); err != nil {
						return err
					}
					return a.Close()
				})
				synctest.Wait()
				buf := make([]byte, 8)
				n, err := b.ReadNow(buf)
				require.NoError(t, err)
				require.Equal(t, []byte("last"), buf[:n])
				require.NoError(t, testkit.Ready(t, wr, "Write then Close"))
				for range 2 {
					n, err = b.ReadNow(buf)
					require.Equal(t, io.EOF, err, "ReadNow after the peer's Close")
					require.Zero(t, n)
				}
				n, err = b.WriteNow([]byte("x"))
				require.ErrorIs(t, err, io.ErrClosedPipe, "WriteNow to a closed peer")
				require.Zero(t, n)
				require.NoError(t, b.Close())
				n, err = b.ReadNow(buf)
				require.ErrorIs(t, err, io.ErrClosedPipe, "ReadNow after Close")
				require.Zero(t, n)
				n, err = b.WriteNow([]byte("x"))
				require.ErrorIs(t, err, io.ErrClosedPipe, "WriteNow after Close")
				require.Zero(t, n)
			})
		})
	}
}

// TestWriteNow: WriteNow takes what the peer takes now: unbuffered, only
// into a pending Read; buffered, the free room; never the room a pending
// Write is waiting for.
func TestWriteNow(t *testing.T) {
	t.Run("buffer=0", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a, b := pollers(t, pipe.NewNetwork())
			n, err := a.WriteNow([]byte("hello"))
			require.NoError(t, err)
			require.Zero(t, n, "WriteNow with nobody reading")
			rd := testkit.Async(read(b, 3))
			synctest.Wait()
			n, err = a.WriteNow([]byte("hello"))
			require.NoError(t, err)
			require.Equal(t, 3, n, "WriteNow into a pending 3-byte Read")
			require.Equal(t, ioResult{3, nil}, testkit.Ready(t, rd, "Read"))
			n, err = a.WriteNow([]byte("lo"))
			require.NoError(t, err)
			require.Zero(t, n, "WriteNow once the Read returned")

			// WriteNow into a pending Read, then a Write: in order.
			rd2 := testkit.Async(func() []byte { return readAll(t, b, 6, 4) })
			synctest.Wait()
			n, err = a.WriteNow([]byte("ab"))
			require.NoError(t, err)
			require.Equal(t, 2, n)
			wr := testkit.Async(write(a, []byte("cdef")))
			require.Equal(t, []byte("abcdef"), testkit.Ready(t, rd2, "Read"))
			require.Equal(t, ioResult{4, nil}, testkit.Ready(t, wr, "Write"))
		})
	})
	t.Run("buffer=8", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a, b := pollers(t, network(8))
			n, err := a.WriteNow(seq(5))
			require.NoError(t, err)
			require.Equal(t, 5, n)
			n, err = a.WriteNow(seq(10)[5:])
			require.NoError(t, err)
			require.Equal(t, 3, n, "WriteNow into the free room")
			n, err = a.WriteNow([]byte("x"))
			require.NoError(t, err)
			require.Zero(t, n, "WriteNow into a full buffer")
			require.Equal(t, seq(8), readAll(t, b, 8, 8))

			// A Write waiting for room goes first.
			wr := testkit.Async(write(a, seq(12)))
			synctest.Wait()
			require.Equal(t, seq(2), readAll(t, b, 2, 2))
			n, err = a.WriteNow([]byte("x"))
			require.NoError(t, err)
			require.Zero(t, n, "WriteNow while a Write waits")
			require.Equal(t, seq(12)[2:], readAll(t, b, 10, 64))
			require.Equal(t, ioResult{12, nil}, testkit.Ready(t, wr, "Write"))
			n, err = a.WriteNow([]byte("x"))
			require.NoError(t, err)
			require.Equal(t, 1, n)
			require.Equal(t, []byte("x"), readAll(t, b, 1, 64))
		})
	})
}

// TestYieldLetsFakeTimePass: a poller that calls Yield between empty
// rounds, as star's does, sees the synctest clock move, so its spin time
// ends even while every other goroutine waits for the clock.
func TestYieldLetsFakeTimePass(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := pollers(t, pipe.NewNetwork())
		// The peer writes only after a second of fake time.
		go func() {
			time.Sleep(time.Second)
			_, _ = a.Write([]byte("late"))
		}()
		const spin = 100 * time.Microsecond
		start := time.Now()
		buf := make([]byte, 8)
		polls := 0
		for time.Since(start) < spin {
			n, err := b.ReadNow(buf)
			require.NoError(t, err)
			require.Zero(t, n)
			polls++
			b.Yield()
		}
		require.Less(t, time.Since(start), spin+10*time.Microsecond, "Yield lets the clock move in small steps")
		require.Greater(t, polls, 1)
		// Parked after the spin, the Read gets the late bytes.
		require.Equal(t, []byte("late"), readAll(t, b, 4, 8))
		require.Equal(t, time.Second, time.Since(start))
	})
}

// TestAbilityOptions: Network.NoPoll and Network.NoCloseWrite make conns
// without transport.Poller and transport.CloseWriter; they stay net.Conns
// and work the same otherwise.
func TestAbilityOptions(t *testing.T) {
	for _, tc := range []struct {
		noPoll, noCloseWrite bool
	}{{false, false}, {true, false}, {false, true}, {true, true}} {
		t.Run(fmt.Sprintf("nopoll=%v/noclosewrite=%v", tc.noPoll, tc.noCloseWrite), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				n := pipe.NewNetwork()
				n.NoPoll, n.NoCloseWrite = tc.noPoll, tc.noCloseWrite
				a, b := connect(t, n)
				for _, c := range []transport.Conn{a, b} {
					_, ok := c.(transport.Poller)
					require.Equal(t, !tc.noPoll, ok, "%T is a transport.Poller", c)
					_, ok = c.(transport.CloseWriter)
					require.Equal(t, !tc.noCloseWrite, ok, "%T is a transport.CloseWriter", c)
					_, ok = c.(net.Conn)
					require.True(t, ok, "%T is not a net.Conn", c)
					_, ok = c.(*pipe.Conn)
					require.Equal(t, !tc.noPoll && !tc.noCloseWrite, ok, "%T is a *pipe.Conn", c)
				}
				wr := testkit.Async(write(a, []byte("hi")))
				require.Equal(t, []byte("hi"), readAll(t, b, 2, 8))
				require.Equal(t, ioResult{2, nil}, testkit.Ready(t, wr, "Write"))
				if cw, ok := a.(transport.CloseWriter); ok {
					require.NoError(t, cw.CloseWrite())
				} else {
					require.NoError(t, a.Close())
				}
				_, err := b.Read(make([]byte, 1))
				require.Equal(t, io.EOF, err)
			})
		})
	}
}

// TestConcurrentWrites: Writes on one end from several goroutines are
// serialised, each whole; Reads, ReadNow, deadlines and Close may run
// concurrently with them (the race detector checks the rest).
func TestConcurrentWrites(t *testing.T) {
	for _, buffer := range []int{0, 5} {
		t.Run(fmt.Sprintf("buffer=%d", buffer), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a, b := pollers(t, network(buffer))
				const writers, size = 4, 50
				errs := make(chan error, writers)
				for i := range writers {
					go func() {
						_, err := a.Write(bytes.Repeat([]byte{byte('A' + i)}, size))
						errs <- err
					}()
				}
				got := readAll(t, b, writers*size, 7)
				for range writers {
					require.NoError(t, <-errs)
				}
				seen := map[byte]bool{}
				for i := 0; i < len(got); i += size {
					block := got[i : i+size]
					require.Equal(t, bytes.Repeat(block[:1], size), block, "block %d is one Write's", i/size)
					require.False(t, seen[block[0]])
					seen[block[0]] = true
				}

				// Everything at once, then Close: every call returns.
				var all sync.WaitGroup
				all.Go(func() {
					for {
						if _, err := a.Write(seq(13)); err != nil {
							return
						}
					}
				})
				all.Go(func() {
					for {
						if _, err := a.WriteNow(seq(3)); err != nil {
							return
						}
						a.Yield()
					}
				})
				all.Go(func() {
					buf := make([]byte, 9)
					for {
						if _, err := b.Read(buf); err != nil {
							return
						}
					}
				})
				all.Go(func() {
					buf := make([]byte, 4)
					for {
						if _, err := b.ReadNow(buf); err != nil {
							return
						}
						b.Yield()
					}
				})
				all.Go(func() {
					for i := range 100 {
						_ = a.SetDeadline(time.Now().Add(time.Duration(i) * time.Microsecond))
						_ = b.SetReadDeadline(time.Now().Add(time.Hour))
						time.Sleep(time.Microsecond)
					}
					_ = b.SetReadDeadline(time.Time{})
					_ = a.SetDeadline(time.Time{})
				})
				time.Sleep(time.Millisecond)
				require.NoError(t, a.Close())
				require.NoError(t, b.Close())
				all.Wait()
			})
		})
	}
}

// TestRandomStream: whatever mix of Write, WriteNow, Read and ReadNow, of
// whatever sizes, and whatever the buffer, the bytes arrive whole and in
// order.
func TestRandomStream(t *testing.T) {
	for _, buffer := range []int{0, 1, 3, 17, 4096} {
		t.Run(fmt.Sprintf("buffer=%d", buffer), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a, b := pollers(t, network(buffer))
				const total = 200_000
				msg := make([]byte, total)
				rng := rand.New(rand.NewPCG(uint64(buffer), 1))
				for i := range msg {
					msg[i] = byte(rng.Uint32())
				}
				wrng := rand.New(rand.NewPCG(uint64(buffer), 2))
				werr := testkit.Async(func() error {
					for off := 0; off < total; {
						end := min(total, off+1+wrng.IntN(5000))
						if wrng.IntN(2) == 0 {
							n, err := a.Write(msg[off:end])
							if err != nil || n != end-off {
								return fmt.Errorf("Write = %d, %v", n, err)
							}
							off = end
							continue
						}
						n, err := a.WriteNow(msg[off:end])
						if err != nil || n < 0 || n > end-off {
							return fmt.Errorf("WriteNow = %d, %v", n, err)
						}
						if n == 0 {
							a.Yield()
						}
						off += n
					}
					return a.CloseWrite()
				})
				var got []byte
				buf := make([]byte, 6000)
				for {
					size := 1 + rng.IntN(len(buf))
					var n int
					var err error
					if rng.IntN(2) == 0 {
						n, err = b.Read(buf[:size])
					} else {
						n, err = b.ReadNow(buf[:size])
						if n == 0 && err == nil {
							b.Yield()
						}
					}
					require.LessOrEqual(t, n, size)
					got = append(got, buf[:n]...)
					if err == io.EOF {
						break
					}
					require.NoError(t, err)
				}
				require.NoError(t, <-werr)
				require.True(t, bytes.Equal(msg, got), "got %d bytes, want %d, equal prefix %d", len(got), len(msg), commonPrefix(got, msg))
			})
		})
	}
}

func commonPrefix(a, b []byte) int {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	return i
}

// TestUnread: what the peer wrote and this end has not read, buffered or
// offered by a Write still waiting (unbuffered); still counted after the
// peer closed; none once this end closed.
func TestUnread(t *testing.T) {
	for _, buffer := range []int{0, 128} {
		t.Run(fmt.Sprintf("buffer=%d", buffer), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a, b := pollers(t, network(buffer))
				n, err := a.Unread()
				require.NoError(t, err)
				require.Equal(t, 0, n, "a fresh connection")
				wrote := testkit.Async(write(b, seq(100)))
				synctest.Wait()
				n, err = a.Unread()
				require.NoError(t, err)
				require.Equal(t, 100, n, "the peer's 100 bytes")
				got := make([]byte, 30)
				_, err = io.ReadFull(a, got)
				require.NoError(t, err)
				n, _ = a.Unread()
				require.Equal(t, 70, n, "after reading 30")
				if buffer > 0 {
					require.NoError(t, (<-wrote).err)
					require.NoError(t, b.Close())
					n, _ = a.Unread()
					require.Equal(t, 70, n, "after the peer closed")
				}
				rest := readAll(t, a, 70, 16)
				require.Equal(t, seq(100)[30:], rest)
				if buffer == 0 {
					require.NoError(t, (<-wrote).err)
				}
				n, _ = a.Unread()
				require.Equal(t, 0, n, "all read")
				require.NoError(t, a.Close())
				n, err = a.Unread()
				require.NoError(t, err)
				require.Equal(t, 0, n, "after Close")
			})
		})
	}
}
