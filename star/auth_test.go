package star_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
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

// Authentication: with a token, a rank is registered (and a control
// session approved) only once its connection has answered the
// coordinator's challenge with the HMAC of a fresh nonce keyed with the
// token.

// Tokens of the tests: distinctive, so that a test can tell that none
// appears in a message.
var (
	jobToken   = star.Token("tok-JOB-4f9c2e71d0b3a8")
	otherToken = star.Token("tok-OTHER-9a1b7c3d5e")
)

// authCluster is a coordinator and workers of size ranks over one pipe
// network, in the current synctest bubble or not, each rank's Config made
// by cfg.
type authCluster struct {
	nw   *pipe.Network
	ln   transport.Listener
	size int
	// tweak adjusts every rank's Config.
	tweak func(rank int, c *star.Config)
}

func newAuthCluster(t *testing.T, size int, tweak func(rank int, c *star.Config)) *authCluster {
	t.Helper()
	nw := pipe.NewNetwork()
	ln, err := nw.Listen("coord")
	require.NoError(t, err)
	return &authCluster{nw: nw, ln: ln, size: size, tweak: tweak}
}

func (ac *authCluster) cfg(rank int) star.Config {
	cfg := star.DefaultConfig()
	cfg.Rank, cfg.Size = rank, ac.size
	cfg.Timeout, cfg.ShutdownTimeout = 10*time.Second, 100*time.Millisecond
	if rank == 0 {
		cfg.Listener = ac.ln
	} else {
		cfg.Dialer, cfg.Addr = ac.nw, "coord"
	}
	if ac.tweak != nil {
		ac.tweak(rank, &cfg)
	}
	return cfg
}

// start starts rank in the background.
func (ac *authCluster) start(rank int) <-chan rankResult {
	cfg := ac.cfg(rank)
	return testkit.Async(func() rankResult {
		c, err := newRank(cfg)
		return rankResult{c, err}
	})
}

type rankResult struct {
	c   comm.Communicator
	err error
}

// withToken gives every rank tok (or, with per, each rank its own).
func withToken(tok star.Token) func(int, *star.Config) {
	return func(_ int, c *star.Config) { c.Token = tok }
}

// frames splits a byte stream into whole frames (tag, payload); a frame
// cut short at the end is returned as rest.
func frames(data []byte) (tags []byte, payloads [][]byte, rest []byte) {
	for len(data) >= star.HeaderSize {
		n := int(binary.BigEndian.Uint32(data)) - 1
		if n < 0 || len(data) < star.HeaderSize+n {
			break
		}
		tags = append(tags, data[4])
		payloads = append(payloads, data[star.HeaderSize:star.HeaderSize+n])
		data = data[star.HeaderSize+n:]
	}
	return tags, payloads, data
}

func tagNames(tags []byte) []string {
	var names []string
	for _, t := range tags {
		names = append(names, star.TagName(t))
	}
	return names
}

// TestAuthExchange: with a token on every rank, each worker's data link
// carries Handshake, then AuthChallenge from the coordinator (a 32-byte
// nonce, different on every connection), AuthResponse (the HMAC of that
// nonce, the rank and the size), then Ack; each control connection
// carries Control, AuthChallenge, AuthResponse and the Control answer.
// The token is not on the wire, and the job works.
func TestAuthExchange(t *testing.T) {
	testkit.SyncTest(t, func(t *testing.T) {
		const size = 3
		ts := &taps{}
		comms := inBubble(t, size, func(c *star.Config) {
			c.Token, c.Liveness = jobToken, 10*time.Second
			if c.Dialer != nil {
				c.Dialer = ts.dialer(c.Dialer)
			}
		})
		defer testkit.CloseAll(comms)
		synctest.Wait() // the control sessions are up
		errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
			return testkit.MixedOps(context.Background(), c, 1, 20)
		})
		require.NoError(t, errors.Join(errs...))

		ts.mu.Lock()
		all := append([]*tap(nil), ts.all...)
		ts.mu.Unlock()
		require.Len(t, all, 2*(size-1), "a data and a control connection per worker")
		nonces := map[string]bool{}
		kinds := map[byte]int{}
		for _, tp := range all {
			tp.mu.Lock()
			wrote, read := bytes.Clone(tp.wrote.Bytes()), bytes.Clone(tp.read.Bytes())
			tp.mu.Unlock()
			require.GreaterOrEqual(t, len(wrote), 13+star.HeaderSize+star.MACSize)
			first := wrote[4]
			kinds[first]++
			rank, sz, err := star.ParseHandshake(wrote[5:13])
			require.NoError(t, err)
			require.EqualValues(t, size, sz)
			challenge := read[:star.HeaderSize+star.NonceSize]
			nonce := challenge[star.HeaderSize:]
			assert.Equal(t, star.EncodeAuthChallenge(nonce), challenge)
			assert.False(t, nonces[string(nonce)], "a nonce used twice")
			nonces[string(nonce)] = true
			mac := star.AuthMAC(jobToken, first, nonce, rank, sz)
			assert.Equal(t, star.EncodeAuthResponse(mac), wrote[13:13+star.HeaderSize+star.MACSize], "the answer")
			after := read[star.HeaderSize+star.NonceSize:]
			switch first {
			case star.TagHandshake:
				assert.Equal(t, star.EncodeAck(size), after[:9], "then the Ack")
			case star.TagControl:
				assert.Equal(t, star.EncodeControl(int(rank), size), after[:13], "then the Control answer")
			default:
				t.Errorf("connection opened with %s", star.TagName(first))
			}
			assert.False(t, bytes.Contains(wrote, jobToken), "the token crossed the wire")
			assert.False(t, bytes.Contains(read, jobToken), "the token crossed the wire")
		}
		assert.Equal(t, map[byte]int{star.TagHandshake: size - 1, star.TagControl: size - 1}, kinds)
	})
}

// TestAuthMAC: the answer depends on every input (token, kind of
// connection, nonce, rank, size), so that it answers one challenge of one
// connection only; another first tag gives nil.
func TestAuthMAC(t *testing.T) {
	nonce := bytes.Repeat([]byte{7}, star.NonceSize)
	base := star.AuthMAC(jobToken, star.TagHandshake, nonce, 1, 4)
	require.Len(t, base, star.MACSize)
	other := append(bytes.Clone(nonce[:31]), 8)
	for name, mac := range map[string][]byte{
		"token":   star.AuthMAC(otherToken, star.TagHandshake, nonce, 1, 4),
		"control": star.AuthMAC(jobToken, star.TagControl, nonce, 1, 4),
		"nonce":   star.AuthMAC(jobToken, star.TagHandshake, other, 1, 4),
		"rank":    star.AuthMAC(jobToken, star.TagHandshake, nonce, 2, 4),
		"size":    star.AuthMAC(jobToken, star.TagHandshake, nonce, 1, 5),
	} {
		assert.NotEqual(t, base, mac, "another %s, the same answer", name)
	}
	assert.Equal(t, base, star.AuthMAC(jobToken, star.TagHandshake, nonce, 1, 4))
	assert.Nil(t, star.AuthMAC(jobToken, star.TagAck, nonce, 1, 4))
}

// rawConn is a hostile or scripted client: it reads everything the
// coordinator sends in the background and hands over the first
// AuthChallenge's nonce.
type rawConn struct {
	conn      transport.Conn
	nonce     chan []byte // the challenge's nonce, or nil when none came
	done      chan struct{}
	got       []byte // what it read, complete once done is closed
	endedAt   time.Duration
	writes    sync.WaitGroup
	closeOnce sync.Once
}

// dialRaw connects a raw client to addr through nw (a pipe network or a
// TCP dialer); begin is the time its endedAt counts from.
func dialRaw(t *testing.T, nw transport.Dialer, addr string, begin time.Time) (*rawConn, error) {
	conn, err := nw.Dial(context.Background(), addr)
	if err != nil {
		return nil, err
	}
	rc := &rawConn{conn: conn, nonce: make(chan []byte, 1), done: make(chan struct{})}
	go func() {
		defer close(rc.done)
		var buf bytes.Buffer
		sent := false
		b := make([]byte, 512)
		for {
			n, err := conn.Read(b)
			buf.Write(b[:n])
			if !sent {
				if tags, payloads, _ := frames(buf.Bytes()); len(tags) > 0 {
					sent = true
					if tags[0] == star.TagAuthChallenge {
						rc.nonce <- bytes.Clone(payloads[0])
					} else {
						rc.nonce <- nil
					}
				}
			}
			if err != nil {
				break
			}
		}
		if !sent {
			rc.nonce <- nil
		}
		rc.got = buf.Bytes()
		rc.endedAt = time.Since(begin)
	}()
	return rc, nil
}

// write writes p in the background (an unbuffered pipe waits for the
// reader, which may be writing to us).
func (rc *rawConn) write(p []byte) {
	rc.writes.Go(func() { _, _ = rc.conn.Write(p) })
}

// writeNow writes p and waits for it to be taken (or refused).
func (rc *rawConn) writeNow(p []byte) error {
	_, err := rc.conn.Write(p)
	return err
}

func (rc *rawConn) close() {
	rc.closeOnce.Do(func() { _ = rc.conn.Close() })
	rc.writes.Wait()
}

// wait waits for the coordinator to end the connection, then closes it.
func (rc *rawConn) wait() []byte {
	<-rc.done
	rc.close()
	return rc.got
}

// TestAuthReplayRefused: a worker's answer, recorded from a real exchange,
// is refused when replayed on another connection, whether sent blindly
// with the Handshake or after reading the new challenge, whether for the
// rank it was made for or another. Each replay is refused at once with an
// Abort (cause auth) saying the answer is wrong, and takes no rank: the
// real rank joins after it.
func TestAuthReplayRefused(t *testing.T) {
	testkit.SyncTest(t, func(t *testing.T) {
		const size = 3
		// The recording: a real worker's data link of a job with the same
		// token (the same job's, say, sniffed on the network).
		ts := &taps{}
		rec := inBubble(t, size, func(c *star.Config) {
			c.Token, c.Liveness = jobToken, -1
			if c.Rank == 1 {
				c.Dialer = ts.dialer(c.Dialer)
			}
		})
		require.NoError(t, testkit.CloseAll(rec))
		ts.mu.Lock()
		wrote, read := bytes.Clone(ts.all[0].wrote.Bytes()), bytes.Clone(ts.all[0].read.Bytes())
		ts.mu.Unlock()
		hs, answerFrame := wrote[:13], wrote[13:13+star.HeaderSize+star.MACSize]
		recordedNonce := read[star.HeaderSize : star.HeaderSize+star.NonceSize]
		require.Equal(t, star.EncodeAuthResponse(star.AuthMAC(jobToken, star.TagHandshake, recordedNonce, 1, size)), answerFrame, "a real answer")

		ac := newAuthCluster(t, size, withToken(jobToken))
		coord := ac.start(0)
		begin := time.Now()
		for _, tc := range []struct {
			name  string
			hs    []byte
			blind bool
		}{
			{"blind/rank=1", hs, true},
			{"after-challenge/rank=1", hs, false},
			{"after-challenge/rank=2", star.EncodeHandshake(2, size), false},
		} {
			rc, err := dialRaw(t, ac.nw, "coord", begin)
			require.NoError(t, err)
			if tc.blind {
				rc.write(append(bytes.Clone(tc.hs), answerFrame...))
			} else {
				rc.write(tc.hs)
			}
			nonce := <-rc.nonce
			require.NotNil(t, nonce, "%s: a challenge", tc.name)
			assert.NotEqual(t, recordedNonce, nonce, "%s: a fresh nonce", tc.name)
			if !tc.blind {
				rc.write(answerFrame)
			}
			got := rc.wait()
			assert.Zero(t, rc.endedAt, "%s: refused at once", tc.name)
			tags, payloads, rest := frames(got)
			require.Equal(t, []string{"AuthChallenge", "Abort"}, tagNames(tags), "%s", tc.name)
			assert.Empty(t, rest)
			assert.Contains(t, string(payloads[1]), "wrong answer to the challenge", tc.name)
			assert.Contains(t, string(payloads[1]), "cause=auth", tc.name)
		}
		// The real ranks join after the replays: nothing was taken.
		w1, w2 := ac.start(1), ac.start(2)
		r0, r1, r2 := <-coord, <-w1, <-w2
		require.NoError(t, errors.Join(r0.err, r1.err, r2.err))
		comms := []comm.Communicator{r0.c, r1.c, r2.c}
		defer testkit.CloseAll(comms)
		errs := testkit.RunRanks(comms, func(c comm.Communicator) error { return c.Barrier(context.Background()) })
		require.NoError(t, errors.Join(errs...))
	})
}

// checkNoToken fails when a message contains either test token.
func checkNoToken(t *testing.T, what, msg string) {
	t.Helper()
	for _, tok := range []star.Token{jobToken, otherToken} {
		assert.NotContains(t, msg, string(tok), "%s shows a token", what)
	}
}

// TestAuthMismatch: a worker whose token differs from the coordinator's,
// one without a token facing a coordinator with one, and one with a token
// facing a coordinator without one: each fails start-up at once with an
// *comm.InitializationFailedError that errors.Is ErrAuthentication and
// says why, and takes no rank (the first two) or leaves at once (the
// third, whose Abort tells the coordinator why). No message shows a
// token. On the fake clock.
func TestAuthMismatch(t *testing.T) {
	for _, tc := range []struct {
		name          string
		coord, worker star.Token
		workerSays    string
		coordSays     string // in the coordinator's start-up error, or its first collective's
	}{
		{"token=wrong", jobToken, otherToken,
			"authentication (token) refused by the coordinator at coord", "gave a wrong answer to the challenge (its token differs"},
		{"token=worker-none", jobToken, nil,
			"asks for authentication (it sent a challenge), but this rank has no token", "answered the challenge with an Abort saying it has no token"},
		{"token=coordinator-none", nil, jobToken,
			"acknowledged it without asking for its token, so rank 0 runs without one", "rank 1 has a token and the coordinator did not ask for it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testkit.SyncTest(t, func(t *testing.T) {
				const connectTimeout = 5 * time.Second
				ac := newAuthCluster(t, 2, func(rank int, c *star.Config) {
					c.ConnectTimeout = connectTimeout
					c.Token = tc.worker
					if rank == 0 {
						c.Token = tc.coord
					}
				})
				coord := ac.start(0)
				begin := time.Now()
				wch := ac.start(1)
				var ife *comm.InitializationFailedError
				checkWorker := func(w rankResult) {
					t.Helper()
					require.ErrorAs(t, w.err, &ife)
					assert.ErrorIs(t, w.err, star.ErrAuthentication)
					assert.Contains(t, w.err.Error(), tc.workerSays)
					checkNoToken(t, "the worker's error", w.err.Error())
				}
				if tc.coord == nil {
					// Registered, then gone: the coordinator's start-up
					// succeeded, its first collective names rank 1.
					r := <-coord
					require.NoError(t, r.err)
					defer r.c.Close()
					barrier := testkit.Async(func() error { return r.c.Barrier(context.Background()) })
					checkWorker(<-wch)
					assert.Zero(t, time.Since(begin), "the worker left at once")
					err := <-barrier
					collectiveFailed(t, err, 1)
					assert.ErrorIs(t, err, star.ErrAuthentication)
					assert.Contains(t, err.Error(), tc.coordSays)
					checkNoToken(t, "the coordinator's error", err.Error())
					return
				}
				checkWorker(<-wch)
				assert.Zero(t, time.Since(begin), "the worker failed at once")
				r := <-coord
				require.ErrorAs(t, r.err, &ife)
				assert.Equal(t, connectTimeout, time.Since(begin), "the coordinator waited for rank 1 to its connect timeout")
				assert.Contains(t, r.err.Error(), "missing ranks [1]")
				assert.Contains(t, r.err.Error(), tc.coordSays)
				checkNoToken(t, "the coordinator's error", r.err.Error())
			})
		})
	}
}

// TestAuthHandshakeTimeout: the whole handshake, the answer included, is
// bounded by HandshakeTimeout from the moment the connection is accepted:
// a client holding the right token that trickles a right answer so that
// its last byte comes just after HandshakeTimeout is refused then, without
// a rank, while one whose last byte comes just before it registers. Bytes
// that keep coming do not extend the bound. On the fake clock.
func TestAuthHandshakeTimeout(t *testing.T) {
	const size, handshakeTimeout = 2, time.Second
	for _, late := range []bool{false, true} {
		t.Run(fmt.Sprintf("late=%t", late), func(t *testing.T) {
			testkit.SyncTest(t, func(t *testing.T) {
				ac := newAuthCluster(t, size, func(_ int, c *star.Config) {
					c.Token, c.HandshakeTimeout, c.Liveness = jobToken, handshakeTimeout, -1
				})
				coord := ac.start(0)
				begin := time.Now()
				rc, err := dialRaw(t, ac.nw, "coord", begin)
				require.NoError(t, err)
				defer rc.close()
				// The Handshake one byte at a time, then the answer.
				hs := star.EncodeHandshake(1, size)
				step := handshakeTimeout / 100
				for _, b := range hs {
					require.NoError(t, rc.writeNow([]byte{b}))
					time.Sleep(step)
				}
				nonce := <-rc.nonce
				require.NotNil(t, nonce)
				resp := star.EncodeAuthResponse(star.AuthMAC(jobToken, star.TagHandshake, nonce, 1, size))
				lastAt := handshakeTimeout - time.Millisecond
				if late {
					lastAt = handshakeTimeout + time.Millisecond
				}
				// Trickle all but the last byte, then wait for lastAt.
				for _, b := range resp[:len(resp)-1] {
					require.NoError(t, rc.writeNow([]byte{b}))
					time.Sleep(step)
				}
				time.Sleep(lastAt - time.Since(begin))
				werr := rc.writeNow(resp[len(resp)-1:])
				if late {
					got := rc.wait()
					assert.Equal(t, handshakeTimeout, rc.endedAt, "refused at HandshakeTimeout")
					tags, payloads, _ := frames(got)
					require.Equal(t, []string{"AuthChallenge", "Abort"}, tagNames(tags))
					assert.Contains(t, string(payloads[1]), "did not answer the challenge within the handshake timeout")
					// Rank 1 is free: the real one joins.
					w := <-ac.start(1)
					require.NoError(t, w.err)
					c := (<-coord).c
					require.NotNil(t, c)
					require.NoError(t, testkit.CloseAll([]comm.Communicator{c, w.c}))
					return
				}
				require.NoError(t, werr)
				r := <-coord
				require.NoError(t, r.err, "the client registered as rank 1")
				assert.Equal(t, lastAt, time.Since(begin))
				tags, _, _ := frames(<-testkit.Async(func() []byte {
					// The Ack, then the Shutdown of Close.
					go r.c.Close()
					return rc.wait()
				}))
				assert.Equal(t, []string{"AuthChallenge", "Ack", "Shutdown"}, tagNames(tags))
			})
		})
	}
}

// TestAuthSquatterTakesNoRank: the attack the token stops. Without a
// token, a connection that sends a valid Handshake for rank 1 and then
// nothing holds rank 1, the real rank 1 is refused and start-up fails
// (TestSquatterFailsStartup). With a token, the same connection never
// answers the challenge: it is not registered, the real rank 1 joins, and
// start-up completes the moment it does, without waiting for the
// squatter's HandshakeTimeout. On the fake clock.
func TestAuthSquatterTakesNoRank(t *testing.T) {
	testkit.SyncTest(t, func(t *testing.T) {
		const size = 3
		ac := newAuthCluster(t, size, func(_ int, c *star.Config) { c.Token = jobToken })
		coord := ac.start(0)
		begin := time.Now()
		squatter, err := dialRaw(t, ac.nw, "coord", begin)
		require.NoError(t, err)
		require.NoError(t, squatter.writeNow(star.EncodeHandshake(1, size)))
		require.NotNil(t, <-squatter.nonce)
		time.Sleep(100 * time.Millisecond)
		w1, w2 := ac.start(1), ac.start(2)
		r0, r1, r2 := <-coord, <-w1, <-w2
		require.NoError(t, errors.Join(r0.err, r1.err, r2.err))
		assert.Equal(t, 100*time.Millisecond, time.Since(begin), "start-up did not wait for the squatter")
		comms := []comm.Communicator{r0.c, r1.c, r2.c}
		defer testkit.CloseAll(comms)
		tags, payloads, _ := frames(squatter.wait())
		// Dropped when start-up completed, never acknowledged: refused
		// (cause "running", as a worker of the next job on the port is).
		require.Equal(t, []string{"AuthChallenge", "Abort"}, tagNames(tags), "dropped when start-up completed, never acknowledged")
		assert.Contains(t, string(payloads[1]), "cause=running")
		errs := testkit.RunRanks(comms, func(c comm.Communicator) error { return c.Barrier(context.Background()) })
		require.NoError(t, errors.Join(errs...))
	})
}

// TestAuthControlHijack: once start-up is complete, a connection that
// opens with a Control frame for rank 2 before the real rank 2 does (to
// take its control session: its heartbeats, the Aborts sent to it) is
// challenged, answers wrongly or replays another connection's answer, and
// is refused with an Abort (cause auth); the real rank 2 then gets its
// session, and the port closes once every worker has one. Without the
// token check the hijacker took the session and the real rank 2 was
// refused. On the fake clock.
func TestAuthControlHijack(t *testing.T) {
	testkit.SyncTest(t, func(t *testing.T) {
		const size, late = 3, time.Second
		ts := &taps{}
		var dials atomic.Int32
		ac := newAuthCluster(t, size, func(rank int, c *star.Config) {
			c.Token, c.Liveness = jobToken, 10*time.Second
			if rank == 2 {
				// Rank 2 opens its control connection late.
				d := ts.dialer(c.Dialer)
				c.Dialer = transport.DialerFunc(func(ctx context.Context, addr string) (transport.Conn, error) {
					if dials.Add(1) == 2 {
						time.Sleep(late)
					}
					return d.Dial(ctx, addr)
				})
			}
		})
		coord, w1, w2 := ac.start(0), ac.start(1), ac.start(2)
		r0, r1, r2 := <-coord, <-w1, <-w2
		require.NoError(t, errors.Join(r0.err, r1.err, r2.err))
		comms := []comm.Communicator{r0.c, r1.c, r2.c}
		defer testkit.CloseAll(comms)
		synctest.Wait() // rank 1's session is up; rank 2's comes in a second
		begin := time.Now()
		for _, kind := range []string{"wrong-token", "replay", "silent"} {
			rc, err := dialRaw(t, ac.nw, "coord", begin)
			require.NoError(t, err, "the port is open while rank 2 has no session")
			require.NoError(t, rc.writeNow(star.EncodeControl(2, size)))
			nonce := <-rc.nonce
			require.NotNil(t, nonce, kind)
			switch kind {
			case "wrong-token":
				rc.write(star.EncodeAuthResponse(star.AuthMAC(otherToken, star.TagControl, nonce, 2, size)))
			case "replay": // a right answer to another nonce
				other := bytes.Repeat([]byte{1}, star.NonceSize)
				rc.write(star.EncodeAuthResponse(star.AuthMAC(jobToken, star.TagControl, other, 2, size)))
			}
			if kind == "silent" {
				// Holds its connection past rank 2's arrival: dropped at
				// HandshakeTimeout, or when rank 0 closes.
				defer func() {
					tags, _, _ := frames(rc.wait())
					assert.NotContains(t, tagNames(tags), "Control", "the silent hijacker was approved")
				}()
				continue
			}
			tags, payloads, _ := frames(rc.wait())
			require.Equal(t, []string{"AuthChallenge", "Abort"}, tagNames(tags), kind)
			assert.Contains(t, string(payloads[1]), "control connection claiming rank 2 gave a wrong answer", kind)
			assert.Contains(t, string(payloads[1]), "cause=auth", kind)
		}
		time.Sleep(late)
		synctest.Wait()
		// Rank 2's control connection: challenged, answered, approved.
		ts.mu.Lock()
		require.Len(t, ts.all, 2)
		ctl := ts.all[1]
		ts.mu.Unlock()
		ctl.mu.Lock()
		read := bytes.Clone(ctl.read.Bytes())
		ctl.mu.Unlock()
		tags, _, _ := frames(read[:star.HeaderSize+star.NonceSize+13])
		assert.Equal(t, []string{"AuthChallenge", "Control"}, tagNames(tags), "the real rank 2 has its session")
		_, err := ac.nw.Dial(context.Background(), "coord")
		assert.ErrorIs(t, err, syscall.ECONNREFUSED, "the port closes once every worker has its session")
		errs := testkit.RunRanks(comms, func(c comm.Communicator) error { return c.Barrier(context.Background()) })
		require.NoError(t, errors.Join(errs...))
	})
}

// TestAuthOverFaulty: the real worker's answer runs through the fault
// injector, delayed on its way: by less than what remains of
// HandshakeTimeout, it registers; by more, the coordinator refuses the
// connection once HandshakeTimeout has passed, the worker's start-up
// fails saying it did not answer in time, and it takes no rank. And a
// corrupted answer (its tag, or its LEN: one byte short, or 0) is refused
// at once as no answer, saying what was wrong. On the fake clock.
func TestAuthOverFaulty(t *testing.T) {
	const size, handshakeTimeout = 2, time.Second
	for _, tc := range []struct {
		name  string
		fault faulty.Fault
		want  string // "" when the worker registers
	}{
		{"delay=short", faulty.Fault{Kind: faulty.Delay, Delay: handshakeTimeout - time.Millisecond}, ""},
		{"delay=long", faulty.Fault{Kind: faulty.Delay, Delay: handshakeTimeout + time.Millisecond}, "did not answer the challenge within the handshake timeout"},
		{"corrupt=tag", faulty.Fault{Kind: faulty.CorruptTag}, "answered the challenge with a 0xEE frame"},
		{"len=short", faulty.Fault{Kind: faulty.LenTooSmall}, "answered the challenge with 31 bytes, expected 32"},
		// LEN 33 + (2^32 - 33) wraps to LEN 0.
		{"len=0", faulty.Fault{Kind: faulty.LenTooLarge, Extra: 1<<32 - 33}, "answered the challenge with a frame of LEN 0 (no room for its tag), expected 32 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testkit.SyncTest(t, func(t *testing.T) {
				f := tc.fault
				f.Rank, f.Link, f.Dir, f.Frame = 1, 0, faulty.Write, 1 // the worker's second frame: its answer
				script := faulty.NewScript(f)
				ac := newAuthCluster(t, size, func(rank int, c *star.Config) {
					c.Token, c.HandshakeTimeout, c.Liveness = jobToken, handshakeTimeout, -1
					c.ConnectTimeout = 3 * time.Second
					if rank == 1 {
						c.Dialer = script.WrapDialer(c.Dialer, 1)
					}
				})
				coord := ac.start(0)
				begin := time.Now()
				w := <-ac.start(1)
				assert.Equal(t, 1, script.Fired())
				if tc.want == "" {
					require.NoError(t, w.err)
					r := <-coord
					require.NoError(t, r.err)
					assert.Equal(t, f.Delay, time.Since(begin))
					require.NoError(t, testkit.CloseAll([]comm.Communicator{r.c, w.c}))
					return
				}
				var ife *comm.InitializationFailedError
				require.ErrorAs(t, w.err, &ife)
				assert.Contains(t, w.err.Error(), tc.want)
				r := <-coord
				require.Error(t, r.err)
				assert.Contains(t, r.err.Error(), "missing ranks [1]")
				assert.Contains(t, r.err.Error(), tc.want)
			})
		})
	}
}

// TestTokenRedacted: a Token prints as [redacted] whatever the verb, and
// in slog's text and JSON output and encoding/json; an empty one prints
// as nothing.
func TestTokenRedacted(t *testing.T) {
	tok := jobToken
	cfg := star.Config{Token: tok}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%10.3s"} {
		got := fmt.Sprintf(verb, tok)
		assert.Equal(t, "[redacted]", got, verb)
		got = fmt.Sprintf(verb, cfg)
		checkNoToken(t, "fmt "+verb+" of a Config", got)
		assert.NotContains(t, got, fmt.Sprintf("%x", []byte(tok)), verb)
	}
	var logs bytes.Buffer
	slog.New(slog.NewTextHandler(&logs, nil)).Info("m", "token", tok, "cfg", cfg)
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("m", "token", tok)
	js, err := json.Marshal(struct{ T star.Token }{tok})
	require.NoError(t, err)
	logs.Write(js)
	checkNoToken(t, "logs", logs.String())
	assert.Contains(t, logs.String(), "[redacted]")
	assert.Equal(t, "", star.Token(nil).String())
}

// hostileKind is one way a connection without the token tries to take a
// rank during start-up. play runs it on rc; rec is a real worker's answer
// recorded on another connection of the same job (rank 1's).
type hostileKind struct {
	name string
	play func(rc *rawConn, rng *rand.Rand, rec recorded)
}

// recorded is a real exchange: rank 1's Handshake and answer frames.
type recorded struct {
	handshake, answer []byte
}

// hostileKinds plays, for a job of size ranks whose HandshakeTimeout is
// ht: silence, garbage, replays of a recorded answer, answers made with
// another token, trickled handshakes, valid Handshakes for real ranks
// from clients that have no token, and Control frames before their time.
func hostileKinds(size int, ht time.Duration) []hostileKind {
	anyRank := func(rng *rand.Rand) int { return 1 + rng.IntN(size-1) }
	answerWith := func(rc *rawConn, rank int, mac func(nonce []byte) []byte) {
		rc.write(star.EncodeHandshake(rank, size))
		if nonce := <-rc.nonce; nonce != nil {
			rc.write(star.EncodeAuthResponse(mac(nonce)))
		}
	}
	return []hostileKind{
		{"silent", func(*rawConn, *rand.Rand, recorded) {}},
		{"garbage", func(rc *rawConn, rng *rand.Rand, _ recorded) {
			b := make([]byte, 1+rng.IntN(64))
			for i := range b {
				b[i] = byte(rng.IntN(256))
			}
			rc.write(b)
		}},
		{"garbage-frame", func(rc *rawConn, rng *rand.Rand, _ recorded) {
			rc.write([]byte{0, 0, 0, 3, byte(0x10 + rng.IntN(0xE0)), 1, 2})
		}},
		{"replay/blind", func(rc *rawConn, _ *rand.Rand, rec recorded) {
			rc.write(append(bytes.Clone(rec.handshake), rec.answer...))
		}},
		{"replay/after-challenge", func(rc *rawConn, _ *rand.Rand, rec recorded) {
			rc.write(rec.handshake)
			if <-rc.nonce != nil {
				rc.write(rec.answer)
			}
		}},
		{"replay/other-rank", func(rc *rawConn, rng *rand.Rand, rec recorded) {
			rc.write(star.EncodeHandshake(anyRank(rng), size))
			if <-rc.nonce != nil {
				rc.write(rec.answer)
			}
		}},
		{"wrong-token", func(rc *rawConn, rng *rand.Rand, _ recorded) {
			r := anyRank(rng)
			answerWith(rc, r, func(n []byte) []byte { return star.AuthMAC(otherToken, star.TagHandshake, n, uint32(r), uint32(size)) })
		}},
		{"zero-answer", func(rc *rawConn, rng *rand.Rand, _ recorded) {
			answerWith(rc, anyRank(rng), func([]byte) []byte { return make([]byte, star.MACSize) })
		}},
		{"answer=4GiB", func(rc *rawConn, rng *rand.Rand, _ recorded) {
			rc.write(star.EncodeHandshake(anyRank(rng), size))
			if <-rc.nonce != nil {
				rc.write([]byte{0xFF, 0xFF, 0xFF, 0xFF, star.TagAuthResponse})
			}
		}},
		{"no-token/silent", func(rc *rawConn, rng *rand.Rand, _ recorded) {
			rc.write(star.EncodeHandshake(anyRank(rng), size))
		}},
		{"no-token/abort", func(rc *rawConn, rng *rand.Rand, _ recorded) {
			rc.write(star.EncodeHandshake(anyRank(rng), size))
			if <-rc.nonce != nil {
				rc.write(star.EncodeAbort("rank 1 has no token"))
			}
		}},
		{"no-token/ack-like", func(rc *rawConn, rng *rand.Rand, _ recorded) {
			rc.write(star.EncodeHandshake(anyRank(rng), size))
			if <-rc.nonce != nil {
				rc.write(star.EncodeAck(size)) // what a spec-only peer might send
			}
		}},
		{"trickle", func(rc *rawConn, rng *rand.Rand, _ recorded) {
			// A byte every ht/20: the Handshake, then an answer, never
			// finished within ht.
			msg := append(star.EncodeHandshake(anyRank(rng), size), star.EncodeAuthResponse(make([]byte, star.MACSize))...)
			for _, b := range msg {
				if rc.writeNow([]byte{b}) != nil {
					return
				}
				time.Sleep(ht / 20)
			}
		}},
		{"control-frame", func(rc *rawConn, rng *rand.Rand, _ recorded) {
			r := anyRank(rng)
			rc.write(star.EncodeControl(r, size))
			if nonce := <-rc.nonce; nonce != nil {
				rc.write(star.EncodeAuthResponse(star.AuthMAC(otherToken, star.TagControl, nonce, uint32(r), uint32(size))))
			}
		}},
		{"answer-first", func(rc *rawConn, _ *rand.Rand, rec recorded) {
			rc.write(rec.answer)
		}},
	}
}

// TestAuthHostileStartup: 200 connections without the token (every kind
// of hostileKinds, rank 1's real answer replayed among them) come during
// start-up, spread over its first 1.2 s, while the real workers join:
// rank 1 first (its answer is recorded off the wire as it registers),
// then rank 2 or 3 among the hostile ones, and the other after them. Every round, on the fake
// clock: the job starts the moment the last real rank joins and runs to
// its end; exactly the three real workers are ever registered; no hostile
// connection is ever sent an Ack or a Control answer (only a challenge,
// and an Abort or the end of the connection). Five rounds with other
// seeds and arrival orders.
func TestAuthHostileStartup(t *testing.T) {
	const (
		size     = 4
		hostiles = 200
		ht       = 2 * time.Second
	)
	var registered atomic.Int32
	restore := star.SetTestHook(func(_ int, point string) {
		if point == star.HookRegistered {
			registered.Add(1)
		}
	})
	defer restore()
	kinds := hostileKinds(size, ht)
	for round := range 5 {
		t.Run(fmt.Sprintf("round=%d", round), func(t *testing.T) {
			registered.Store(0)
			testkit.SyncTest(t, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(round), 13))
				ts := &taps{}
				ac := newAuthCluster(t, size, func(rank int, c *star.Config) {
					c.Token, c.HandshakeTimeout, c.Liveness = jobToken, ht, 10*time.Second
					if rank == 1 {
						c.Dialer = ts.dialer(c.Dialer)
					}
				})
				begin := time.Now()
				coord := ac.start(0)
				w1 := ac.start(1)
				synctest.Wait() // rank 1 registered, waits for its Ack
				require.EqualValues(t, 1, registered.Load())
				ts.mu.Lock()
				wrote := bytes.Clone(ts.all[0].wrote.Bytes())
				ts.mu.Unlock()
				rec := recorded{handshake: wrote[:13], answer: wrote[13 : 13+star.HeaderSize+star.MACSize]}

				// Rank 2 joins at a random moment within the hostile
				// traffic, rank 3 (or 2) last, after every hostile
				// connection has come.
				joins := []time.Duration{time.Duration(rng.IntN(1200)) * time.Millisecond, time.Duration(1200+rng.IntN(100)) * time.Millisecond}
				if rng.IntN(2) == 0 {
					joins[0], joins[1] = joins[1], joins[0]
				}
				last := max(joins[0], joins[1])
				workers := make([]<-chan rankResult, size)
				var wg sync.WaitGroup
				for i, at := range joins {
					wg.Go(func() {
						time.Sleep(at)
						workers[2+i] = ac.start(2 + i)
					})
				}
				clients := make([]*rawConn, hostiles)
				played := make([]string, hostiles)
				var hs sync.WaitGroup
				for i := range hostiles {
					kind := kinds[(i+round)%len(kinds)]
					played[i] = kind.name
					seed := rng.Uint64()
					at := time.Duration(rng.IntN(1200)) * time.Millisecond
					hs.Go(func() {
						time.Sleep(at)
						rc, err := dialRaw(t, ac.nw, "coord", begin)
						if !assert.NoError(t, err, "hostile %d, during start-up", i) {
							return
						}
						clients[i] = rc
						kind.play(rc, rand.New(rand.NewPCG(seed, 1)), rec)
					})
				}
				wg.Wait()
				r0, r1, r2, r3 := <-coord, <-w1, <-workers[2], <-workers[3]
				require.NoError(t, errors.Join(r0.err, r1.err, r2.err, r3.err))
				assert.Equal(t, last, time.Since(begin), "start-up ended when the last real rank joined")
				comms := []comm.Communicator{r0.c, r1.c, r2.c, r3.c}
				errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
					return testkit.MixedOps(context.Background(), c, uint64(round), 30)
				})
				require.NoError(t, errors.Join(errs...))
				require.NoError(t, testkit.CloseAll(comms))
				hs.Wait()
				assert.EqualValues(t, size-1, registered.Load(), "only the real workers were registered")
				refused := 0
				for i, rc := range clients {
					if rc == nil {
						continue
					}
					got := rc.wait()
					tags, _, _ := frames(got)
					for k, tag := range tags {
						ok := (k == 0 && tag == star.TagAuthChallenge) || tag == star.TagAbort
						assert.True(t, ok, "hostile %d (%s) read %v", i, played[i], tagNames(tags))
					}
					if len(tags) > 0 && tags[len(tags)-1] == star.TagAbort {
						refused++
					}
				}
				t.Logf("round %d: start-up at %v; %d hostile connections during start-up, %d refused with an Abort, the others cut when it ended", round, last, hostiles, refused)
			})
		})
	}
}

// TestSpecOnlyWorkerRefusedWithToken: with a token, a spec-only worker
// (raw spec frames) cannot answer the challenge: it reads an AuthChallenge
// frame where it expects its Ack (so it fails, as the package
// documentation says every rank must be starcomm), and is refused after
// HandshakeTimeout without a rank. On the fake clock.
func TestSpecOnlyWorkerRefusedWithToken(t *testing.T) {
	testkit.SyncTest(t, func(t *testing.T) {
		const size = 2
		ac := newAuthCluster(t, size, func(_ int, c *star.Config) {
			c.Token, c.HandshakeTimeout, c.ConnectTimeout = jobToken, time.Second, 3*time.Second
		})
		coord := ac.start(0)
		begin := time.Now()
		rc, err := dialRaw(t, ac.nw, "coord", begin)
		require.NoError(t, err)
		rc.write(star.EncodeHandshake(1, size))
		require.NotNil(t, <-rc.nonce, "an AuthChallenge, not the Ack a spec-only worker waits for")
		tags, _, _ := frames(rc.wait())
		assert.Equal(t, []string{"AuthChallenge", "Abort"}, tagNames(tags))
		assert.Equal(t, time.Second, rc.endedAt, "refused after HandshakeTimeout")
		r := <-coord
		require.Error(t, r.err)
		assert.Contains(t, r.err.Error(), "missing ranks [1]")
		assert.Contains(t, r.err.Error(), "did not answer the challenge within the handshake timeout")
	})
}
