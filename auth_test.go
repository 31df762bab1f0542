package starcomm_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm"
	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/star"
	"github.com/starcomm/starcomm/testkit"
)

// Authentication through the configuration and FromEnv, and over real TCP
// with every rank a separate process.

// Tokens of the tests: distinctive, so that a test can tell that none
// appears in a message.
const (
	testToken  = "tok-ROOT-7d41a9c0e2f5b6"
	otherToken = "tok-ELSE-3c8e1f0a9b"
)

// assertNoToken fails when msg shows a test token.
func assertNoToken(t *testing.T, what, msg string) {
	t.Helper()
	for _, tok := range []string{testToken, otherToken} {
		assert.NotContains(t, msg, tok, "%s shows a token", what)
	}
}

// writeFile writes content to a new file in a temporary directory.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

// TestConfigToken: COBRE_TCP_TOKEN (white space around it ignored) and
// COBRE_TCP_TOKEN_FILE (a readable, non-empty file) are read; setting both
// is an error naming both; a file that cannot be read, is a directory, is
// empty or is too large (a device that never ends) is an
// InvalidConfigurationError naming COBRE_TCP_TOKEN_FILE and the file, at
// once. No message shows the token.
func TestConfigToken(t *testing.T) {
	worker := map[string]string{"COBRE_TCP_COORDINATOR": "h", "COBRE_TCP_RANK": "1", "COBRE_TCP_SIZE": "2"}
	with := func(extra map[string]string) map[string]string {
		env := map[string]string{}
		for k, v := range worker {
			env[k] = v
		}
		for k, v := range extra {
			env[k] = v
		}
		return env
	}
	good := writeFile(t, "token", "\n  "+testToken+"\n")
	empty := writeFile(t, "empty", " \n\t\n")
	large := writeFile(t, "large", strings.Repeat("x", 64<<10+1))
	missing := filepath.Join(t.TempDir(), "absent")

	t.Run("token", func(t *testing.T) {
		cfg, err := starcomm.ConfigFromLookup(lookup(with(map[string]string{"COBRE_TCP_TOKEN": "  " + testToken + " "})))
		require.NoError(t, err)
		assert.Equal(t, star.Token(testToken), cfg.Token)
		assert.Empty(t, cfg.TokenFile)
	})
	t.Run("file", func(t *testing.T) {
		cfg, err := starcomm.ConfigFromLookup(lookup(with(map[string]string{"COBRE_TCP_TOKEN_FILE": good})))
		require.NoError(t, err)
		assert.Equal(t, good, cfg.TokenFile)
		assert.Empty(t, cfg.Token, "read when the communicator starts")
		require.NoError(t, cfg.Validate())
	})
	// A file saved by an editor that puts a UTF-8 byte-order mark first
	// holds the same token as one without: the ranks that take theirs from
	// COBRE_TCP_TOKEN must agree with it. A mark anywhere else is kept.
	t.Run("file/byte-order-mark", func(t *testing.T) {
		for _, content := range []string{"\uFEFF" + testToken + "\r\n", " \uFEFF " + testToken, "\uFEFF\n" + testToken + "\n"} {
			path := writeFile(t, "bom", content)
			cfg, err := starcomm.ConfigFromLookup(lookup(with(map[string]string{"COBRE_TCP_TOKEN_FILE": path})))
			require.NoError(t, err)
			tok, err := starcomm.TokenOf(cfg)
			require.NoError(t, err)
			assert.Equal(t, star.Token(testToken), tok, "%q", content)
		}
		inner := writeFile(t, "inner", testToken+"\uFEFF")
		tok, err := starcomm.TokenOf(starcomm.Config{TokenFile: inner})
		require.NoError(t, err)
		assert.Equal(t, star.Token(testToken+"\uFEFF"), tok)
		only := writeFile(t, "only", "\uFEFF\n")
		_, err = starcomm.TokenOf(starcomm.Config{TokenFile: only})
		require.ErrorContains(t, err, "the token file is empty")
	})
	for _, tc := range []struct {
		name   string
		env    map[string]string
		errors int    // how many InvalidConfigurationErrors
		want   string // in the message
		value  string // the value of the COBRE_TCP_TOKEN_FILE error
	}{
		{"both", map[string]string{"COBRE_TCP_TOKEN": testToken, "COBRE_TCP_TOKEN_FILE": good}, 1,
			"COBRE_TCP_TOKEN is set too: give the token in COBRE_TCP_TOKEN or in COBRE_TCP_TOKEN_FILE, not both", good},
		{"both/file=missing", map[string]string{"COBRE_TCP_TOKEN": testToken, "COBRE_TCP_TOKEN_FILE": missing}, 2,
			"not both", missing},
		{"file=missing", map[string]string{"COBRE_TCP_TOKEN_FILE": missing}, 1, "cannot read the token file: open " + missing, missing},
		// A value that may be the token itself (no such file, not a path
		// starting with / . ~) is not shown, nor is it in the reason.
		{"file=token-by-mistake", map[string]string{"COBRE_TCP_TOKEN_FILE": "SeCrEtToKeN0123456789abcdef"}, 1,
			"cannot read the token file: no such file or directory (working directory ", starcomm.NotShown},
		{"file=relative-missing", map[string]string{"COBRE_TCP_TOKEN_FILE": "./no-such-token"}, 1, "cannot read the token file: open ./no-such-token", "./no-such-token"},
		{"file=directory", map[string]string{"COBRE_TCP_TOKEN_FILE": t.TempDir()}, 1, "the token file is a directory, not a regular file", ""},
		{"file=empty", map[string]string{"COBRE_TCP_TOKEN_FILE": empty}, 1, "the token file is empty", empty},
		{"file=large", map[string]string{"COBRE_TCP_TOKEN_FILE": large}, 1, "larger than 64 KiB", large},
		{"file=/dev/zero", map[string]string{"COBRE_TCP_TOKEN_FILE": "/dev/zero"}, 1, "the token file is a device, not a regular file", "/dev/zero"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env["COBRE_TCP_TOKEN_FILE"] == "/dev/zero" {
				if _, err := os.Stat("/dev/zero"); err != nil {
					t.Skip("no /dev/zero here")
				}
			}
			_, err := starcomm.ConfigFromLookup(lookup(with(tc.env)))
			require.Error(t, err)
			errs := allErrors(err)
			require.Len(t, errs, tc.errors, "%v", err)
			for _, e := range errs {
				var ic *starcomm.InvalidConfigurationError
				require.ErrorAs(t, e, &ic)
				assert.Equal(t, "COBRE_TCP_TOKEN_FILE", ic.Var)
				if tc.value != "" {
					assert.Equal(t, tc.value, ic.Value)
				}
			}
			assert.Contains(t, err.Error(), tc.want)
			assertNoToken(t, "the error", err.Error())
			if tc.value == starcomm.NotShown {
				assert.NotContains(t, err.Error(), tc.env["COBRE_TCP_TOKEN_FILE"])
				// Set from Go, the same (New reads the file).
				cfg := starcomm.DefaultConfig()
				cfg.Backend, cfg.Rank, cfg.Size, cfg.TokenFile = "tcp", 0, 2, tc.env["COBRE_TCP_TOKEN_FILE"]
				_, verr := starcomm.TokenOf(cfg)
				require.Error(t, verr)
				assert.NotContains(t, verr.Error(), tc.env["COBRE_TCP_TOKEN_FILE"])
				assert.Contains(t, verr.Error(), starcomm.NotShown)
			}
		})
	}
	// Set but blank: an error naming the variable (a lost secret must not
	// turn authentication off), for the tcp backend only; unset is fine.
	for _, name := range []string{"COBRE_TCP_TOKEN", "COBRE_TCP_TOKEN_FILE"} {
		for _, blank := range []string{"", " \t "} {
			t.Run(fmt.Sprintf("blank/%s=%q", name, blank), func(t *testing.T) {
				_, err := starcomm.ConfigFromLookup(lookup(with(map[string]string{name: blank})))
				errs := allErrors(err)
				require.Len(t, errs, 1, "%v", err)
				var ic *starcomm.InvalidConfigurationError
				require.ErrorAs(t, errs[0], &ic)
				assert.Equal(t, name, ic.Var)
				assert.Contains(t, ic.Allowed, "is set but blank")
				assert.Contains(t, ic.Allowed, "unset it to run without authentication")
				// shm and local do not read the token variables.
				cfg, err := starcomm.ConfigFromLookup(lookup(map[string]string{"COBRE_SHM_NAME": "j", "COBRE_TCP_RANK": "0", "COBRE_TCP_SIZE": "2", name: blank}))
				require.NoError(t, err)
				assert.Empty(t, cfg.Token)
				_, err = starcomm.ConfigFromLookup(lookup(map[string]string{"COBRE_COMM_BACKEND": "local", name: blank}))
				require.NoError(t, err)
			})
		}
	}
	t.Run("unset", func(t *testing.T) {
		cfg, err := starcomm.ConfigFromLookup(lookup(worker))
		require.NoError(t, err)
		assert.Empty(t, cfg.Token)
		assert.Empty(t, cfg.TokenFile)
	})
	t.Run("validate/both", func(t *testing.T) {
		cfg := starcomm.DefaultConfig()
		cfg.Backend, cfg.Size, cfg.Token, cfg.TokenFile = "tcp", 2, star.Token(testToken), good
		err := cfg.Validate()
		var ic *starcomm.InvalidConfigurationError
		require.ErrorAs(t, err, &ic)
		assert.Equal(t, "TokenFile", ic.Var)
		assert.EqualError(t, err, fmt.Sprintf(`starcomm: invalid TokenFile=%q: Token is set too: give the token in Token or in TokenFile, not both`, good))
		assertNoToken(t, "fmt of the Config", fmt.Sprintf("%v %+v %#v", cfg, cfg, cfg))
	})
	t.Run("new/file=missing", func(t *testing.T) {
		cfg := starcomm.DefaultConfig()
		cfg.Backend, cfg.Size, cfg.TokenFile = "tcp", 1, missing
		_, err := starcomm.New(context.Background(), cfg)
		var ic *starcomm.InvalidConfigurationError
		require.ErrorAs(t, err, &ic)
		assert.Equal(t, "TokenFile", ic.Var)
		assert.Contains(t, err.Error(), "cannot read the token file")
	})
	t.Run("suggestion", func(t *testing.T) {
		assert.Equal(t, "COBRE_TCP_TOKEN", starcomm.SuggestVariable("COBRE_TOKEN"))
		_, err := starcomm.ConfigFromEnviron([]string{"COBRE_TCP_TOKN=" + testToken})
		var u *starcomm.UnknownVariableError
		require.ErrorAs(t, err, &u)
		assert.Equal(t, "COBRE_TCP_TOKEN", u.Suggestion)
		assertNoToken(t, "the unknown variable's error", err.Error())
	})
}

// coordinatorTCP starts rank 0 of a size-rank tcp job on a free loopback
// port in the background (with token tok, or tokFile, or neither) and
// returns the port and its result.
func coordinatorTCP(t *testing.T, size int, tok, tokFile string, connectTimeout time.Duration) (int, <-chan rankOutcome) {
	t.Helper()
	cfg := starcomm.DefaultConfig()
	cfg.Backend, cfg.Rank, cfg.Size, cfg.Port, cfg.BindAddr = "tcp", 0, size, 0, "127.0.0.1"
	cfg.Token, cfg.TokenFile, cfg.ConnectTimeout = star.Token(tok), tokFile, connectTimeout
	cfg.Timeout = 10 * time.Second
	port := make(chan int, 1)
	cfg.Listening = func(p int) { port <- p }
	out := testkit.Async(func() rankOutcome {
		c, err := starcomm.New(context.Background(), cfg)
		return rankOutcome{c, err}
	})
	select {
	case p := <-port:
		return p, out
	case o := <-out:
		t.Fatalf("rank 0 did not start: %v", o.err)
		return 0, nil
	}
}

type rankOutcome struct {
	c   comm.Communicator
	err error
}

// setWorkerEnv sets the environment of worker rank of size ranks reaching
// rank 0 on port, with extra.
func setWorkerEnv(t *testing.T, rank, size, port int, extra map[string]string) {
	t.Setenv("COBRE_COMM_BACKEND", "tcp")
	t.Setenv("COBRE_TCP_COORDINATOR", "127.0.0.1")
	t.Setenv("COBRE_TCP_PORT", strconv.Itoa(port))
	t.Setenv("COBRE_TCP_RANK", strconv.Itoa(rank))
	t.Setenv("COBRE_TCP_SIZE", strconv.Itoa(size))
	for k, v := range extra {
		t.Setenv(k, v)
	}
}

// TestFromEnvAuthentication: a worker built by FromEnv over real TCP,
// against a coordinator built by New. With the same token (the
// coordinator's from a file, the worker's from COBRE_TCP_TOKEN_FILE or
// COBRE_TCP_TOKEN) the job runs. With another token FromEnv fails with a
// *comm.InitializationFailedError saying the authentication (token) was
// refused; without a token, that the coordinator asks for one; with a
// token facing a coordinator without one, that it was not asked. The
// coordinator's errors say why too; no message, and no record in
// COBRE_ERROR_FILE, shows a token.
func TestFromEnvAuthentication(t *testing.T) {
	tokenFile := writeFile(t, "token", testToken+"\n")
	for _, tc := range []struct {
		name       string
		coordTok   string
		env        map[string]string
		workerSays string // "" when the job runs
		coordSays  string
	}{
		{"token=same/file", "", map[string]string{"COBRE_TCP_TOKEN_FILE": tokenFile}, "", ""},
		{"token=same/env", "", map[string]string{"COBRE_TCP_TOKEN": testToken}, "", ""},
		{"token=other", "", map[string]string{"COBRE_TCP_TOKEN": otherToken},
			"authentication (token) refused by the coordinator at 127.0.0.1:", "gave a wrong answer to the challenge (its token differs from the coordinator's)"},
		{"token=none", "", nil,
			"asks for authentication (it sent a challenge), but this rank has no token", "answered the challenge with an Abort saying it has no token"},
		{"coordinator=none", "none", map[string]string{"COBRE_TCP_TOKEN": testToken},
			"acknowledged it without asking for its token", "rank 1 has a token and the coordinator did not ask for it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testkit.CheckGoroutines(t)
			file := tokenFile
			if tc.coordTok == "none" {
				file = ""
			}
			port, coord := coordinatorTCP(t, 2, "", file, time.Second)
			errFile := filepath.Join(t.TempDir(), "error.json")
			env := map[string]string{"COBRE_ERROR_FILE": errFile}
			for k, v := range tc.env {
				env[k] = v
			}
			setWorkerEnv(t, 1, 2, port, env)
			var w comm.Communicator
			werr := make(chan error, 1)
			var barrier <-chan error
			if tc.coordTok == "none" {
				// The coordinator's start-up completes (it registered the
				// worker without a challenge): its first collective hears
				// why the worker left.
				go func() {
					c, err := starcomm.FromEnv(context.Background())
					w = c
					werr <- err
				}()
				o := <-coord
				require.NoError(t, o.err)
				defer o.c.Close()
				barrier = testkit.Async(func() error { return o.c.Barrier(context.Background()) })
			} else {
				c, err := starcomm.FromEnv(context.Background())
				w = c
				werr <- err
			}
			err := <-werr
			if tc.workerSays == "" {
				require.NoError(t, err)
				o := <-coord
				require.NoError(t, o.err)
				comms := []comm.Communicator{o.c, w}
				require.NoError(t, errors.Join(testkit.RunRanks(comms, func(c comm.Communicator) error { return c.Barrier(context.Background()) })...))
				require.NoError(t, testkit.CloseAll(comms))
				return
			}
			var ife *comm.InitializationFailedError
			require.ErrorAs(t, err, &ife)
			assert.Equal(t, "tcp", ife.Backend)
			assert.ErrorIs(t, err, star.ErrAuthentication)
			assert.Contains(t, err.Error(), "authentication (token) refused")
			assert.Contains(t, err.Error(), tc.workerSays)
			assertNoToken(t, "the worker's error", err.Error())
			rec, rerr := os.ReadFile(errFile)
			require.NoError(t, rerr, "the failure is recorded")
			assert.Contains(t, string(rec), "authentication (token) refused")
			assertNoToken(t, "the error file", string(rec))
			var cerr error
			if barrier != nil {
				cerr = <-barrier
				var cf *comm.CollectiveFailedError
				require.ErrorAs(t, cerr, &cf)
				assert.Equal(t, 1, cf.Rank)
			} else {
				o := <-coord
				cerr = o.err
				require.ErrorAs(t, cerr, &ife)
				assert.Contains(t, cerr.Error(), "missing ranks [1]")
			}
			assert.Contains(t, cerr.Error(), tc.coordSays)
			assertNoToken(t, "the coordinator's error", cerr.Error())
		})
	}
}

// authJobChild is one rank of a real job with authentication: FromEnv,
// mixed collectives, Close; it prints STARTED and DONE, or a RESULT line
// for its failure.
func authJobChild() int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	begin := time.Now()
	c, err := starcomm.FromEnv(ctx)
	if err != nil {
		return chaosReport("start", err, time.Since(begin))
	}
	fmt.Printf("STARTED ms=%d\n", time.Since(begin).Milliseconds())
	if err := testkit.MixedOps(ctx, c, 11, 40); err != nil {
		_ = c.Close()
		return chaosReport("job", err, 0)
	}
	if err := c.Close(); err != nil {
		return chaosReport("close", err, 0)
	}
	fmt.Println("DONE")
	return 0
}

// sniffer forwards every connection it accepts to target and records
// what the first one's client sends, as an eavesdropper on the network
// would: it hands over the first n bytes once they have passed.
type sniffer struct {
	ln    net.Listener
	first chan []byte
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []net.Conn
}

func newSniffer(t *testing.T, target string, n int) *sniffer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &sniffer{ln: ln, first: make(chan []byte, 1)}
	s.wg.Go(func() {
		for i := 0; ; i++ {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", target)
			if err != nil {
				_ = client.Close()
				continue
			}
			s.mu.Lock()
			s.conns = append(s.conns, client, server)
			s.mu.Unlock()
			var from io.Reader = client
			if i == 0 {
				from = io.TeeReader(client, &recordTo{n: n, done: s.first})
			}
			pipeHalf := func(dst net.Conn, src io.Reader) {
				_, _ = io.Copy(dst, src)
				_ = dst.(*net.TCPConn).CloseWrite()
			}
			s.wg.Go(func() { pipeHalf(server, from) })
			s.wg.Go(func() { pipeHalf(client, server) })
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		s.mu.Lock()
		for _, c := range s.conns {
			_ = c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *sniffer) port() int { return s.ln.Addr().(*net.TCPAddr).Port }

// recordTo keeps the first n bytes written to it and sends them on done.
type recordTo struct {
	n    int
	buf  []byte
	done chan []byte
}

func (r *recordTo) Write(p []byte) (int, error) {
	if len(r.buf) < r.n {
		r.buf = append(r.buf, p[:min(len(p), r.n-len(r.buf))]...)
		if len(r.buf) == r.n {
			r.done <- r.buf
		}
	}
	return len(p), nil
}

// tcpHostile is one connection without the token over real TCP: it plays
// a kind of attack and records what it reads.
type tcpHostile struct {
	kind string
	got  []byte
	err  error
}

// playHostile dials addr and plays kind: rec holds rank 1's real
// Handshake and answer, sniffed off the wire. It calls dialed once its
// connection is established (in rank 0's accept queue) or has failed.
func playHostile(addr, kind string, size int, rng *rand.Rand, rec []byte, dialed func()) tcpHostile {
	h := tcpHostile{kind: kind}
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	dialed()
	if err != nil {
		h.err = err
		return h
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	nonces := make(chan []byte, 1)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		var buf bytes.Buffer
		b := make([]byte, 4096)
		sent := false
		for {
			n, err := conn.Read(b)
			buf.Write(b[:n])
			if !sent && buf.Len() >= star.HeaderSize+star.NonceSize {
				sent = true
				if buf.Bytes()[4] == star.TagAuthChallenge {
					nonces <- bytes.Clone(buf.Bytes()[star.HeaderSize : star.HeaderSize+star.NonceSize])
				} else {
					nonces <- nil
				}
			}
			if err != nil {
				break
			}
		}
		if !sent {
			nonces <- nil
		}
		h.got = buf.Bytes()
	}()
	rank := 1 + rng.IntN(size-1)
	hs := star.EncodeHandshake(rank, size)
	write := func(p []byte) bool { _, err := conn.Write(p); return err == nil }
	answer := func(mac func([]byte) []byte) {
		if write(hs) {
			if nonce := <-nonces; nonce != nil {
				write(star.EncodeAuthResponse(mac(nonce)))
			}
		}
	}
	switch kind {
	case "silent":
	case "garbage":
		b := make([]byte, 1+rng.IntN(64))
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		write(b)
	case "replay/blind":
		write(rec)
	case "replay/after-challenge":
		if write(rec[:13]) && <-nonces != nil {
			write(rec[13:])
		}
	case "replay/other-rank":
		answer(func([]byte) []byte { return rec[13+star.HeaderSize:] })
	case "wrong-token":
		answer(func(n []byte) []byte {
			return star.AuthMAC(star.Token(otherToken), star.TagHandshake, n, uint32(rank), uint32(size))
		})
	case "no-token/silent":
		write(hs)
	case "no-token/close":
		write(hs)
		<-nonces
		_ = conn.(*net.TCPConn).CloseWrite()
	case "trickle":
		msg := append(hs, star.EncodeAuthResponse(make([]byte, star.MACSize))...)
		for _, b := range msg {
			if !write([]byte{b}) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	case "control-frame":
		write(star.EncodeControl(rank, size))
		if nonce := <-nonces; nonce != nil {
			write(star.EncodeAuthResponse(star.AuthMAC(star.Token(otherToken), star.TagControl, nonce, uint32(rank), uint32(size))))
		}
	}
	<-readDone
	return h
}

var tcpHostileKinds = []string{
	"silent", "garbage", "replay/blind", "replay/after-challenge", "replay/other-rank",
	"wrong-token", "no-token/silent", "no-token/close", "trickle", "control-frame",
}

// TestAuthHostileProcesses: a real 4-rank job, each rank a separate
// process over TCP on loopback, with COBRE_TCP_TOKEN. Rank 0 starts; rank
// 1 joins through a sniffer that records its Handshake and answer off the
// wire; then 200 connections without the token (silence, garbage, rank
// 1's answer replayed blindly, after a new challenge and for the free
// ranks, answers made with another token, valid Handshakes for real ranks
// from clients without a token, bytes trickled every 50 ms, Control
// frames) all reach rank 0's port, rank 2 starting among them and rank 3
// once all 200 are established (ahead of it in rank 0's accept queue), so
// that every one comes during start-up.
// Three rounds: every time the job starts and runs to its end on every
// rank, and no hostile connection is sent an Ack or a Control answer.
func TestAuthHostileProcesses(t *testing.T) {
	skipUnlessChaos(t)
	const (
		size     = 4
		hostiles = 200
	)
	exe, err := os.Executable()
	require.NoError(t, err)
	for round := range 3 {
		t.Run(fmt.Sprintf("round=%d", round), func(t *testing.T) {
			ctx := chaosWatchdog(t)
			rng := rand.New(rand.NewPCG(uint64(round), 29))
			port := freePort(t)
			addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
			env := []string{"COBRE_TCP_TOKEN=" + testToken, "COBRE_TCP_CONNECT_TIMEOUT_MS=20000", "COBRE_TCP_TIMEOUT_SECS=20"}
			start := func(rank, port int) *chaosProc {
				p := startChaosCmds(t, []string{"authjob"}, func(int) *exec.Cmd {
					cmd := exec.CommandContext(ctx, exe)
					cmd.Env = append(os.Environ(),
						"COBRE_COMM_BACKEND=tcp", "COBRE_TCP_COORDINATOR=127.0.0.1", "COBRE_TCP_BIND_ADDR=127.0.0.1")
					return cmd
				}, append(env, "COBRE_TCP_PORT="+strconv.Itoa(port), "COBRE_TCP_RANK="+strconv.Itoa(rank), "COBRE_TCP_SIZE="+strconv.Itoa(size))...)[0]
				p.rank = rank
				return p
			}
			procs := []*chaosProc{start(0, port)}
			// Wait for rank 0's port (these probes are silent connections too).
			for {
				conn, err := net.DialTimeout("tcp", addr, time.Second)
				if err == nil {
					conn.Close()
					break
				}
				select {
				case <-ctx.Done():
					t.Fatalf("rank 0 never listened: %v\n%s", err, procs[0].dump())
				case <-time.After(10 * time.Millisecond):
				}
			}
			sn := newSniffer(t, addr, 13+star.HeaderSize+star.MACSize)
			procs = append(procs, start(1, sn.port()))
			var rec []byte
			select {
			case rec = <-sn.first:
			case <-ctx.Done():
				t.Fatalf("rank 1 never answered the challenge\n%s", procs[1].dump())
			}
			require.Equal(t, star.EncodeHandshake(1, size), rec[:13])
			require.Equal(t, star.TagAuthResponse, rec[13+4])

			results := make([]tcpHostile, hostiles)
			var wg, dialed sync.WaitGroup
			for i := range hostiles {
				kind := tcpHostileKinds[(i+round)%len(tcpHostileKinds)]
				seed := rng.Uint64()
				dialed.Add(1)
				wg.Go(func() {
					results[i] = playHostile(addr, kind, size, rand.New(rand.NewPCG(seed, 3)), rec, dialed.Done)
				})
				if i == hostiles/2 {
					procs = append(procs, start(2, port))
				}
			}
			// Rank 3 once every hostile connection is established: they
			// are ahead of it in rank 0's accept queue, so all of them
			// come during start-up.
			dialed.Wait()
			procs = append(procs, start(3, port))
			for _, p := range procs {
				p.await(t, ctx, "DONE")
			}
			for _, p := range procs {
				assert.Equal(t, 0, p.wait(t, ctx), "rank %d exit\n%s", p.rank, p.dump())
			}
			wg.Wait()
			counts := map[string]int{}
			for i, h := range results {
				if h.err != nil {
					counts["dial failed"]++
					continue
				}
				tags, _ := splitFrames(h.got)
				for k, tag := range tags {
					ok := (k == 0 && tag == star.TagAuthChallenge) || tag == star.TagAbort
					assert.True(t, ok, "hostile %d (%s) read %x", i, h.kind, h.got[:min(len(h.got), 64)])
				}
				switch {
				case len(tags) > 0 && tags[len(tags)-1] == star.TagAbort:
					counts["refused with an Abort"]++
				default:
					counts["cut"]++
				}
			}
			t.Logf("round %d: %d hostile connections: %v", round, hostiles, counts)
			assert.Zero(t, counts["dial failed"], "every hostile connection came during start-up")
		})
	}
}

// splitFrames returns the tags of the whole frames at the start of data.
func splitFrames(data []byte) (tags []byte, rest []byte) {
	for len(data) >= star.HeaderSize {
		n := int(binary.BigEndian.Uint32(data)) - 1
		if n < 0 || len(data) < star.HeaderSize+n {
			break
		}
		tags = append(tags, data[4])
		data = data[star.HeaderSize+n:]
	}
	return tags, data
}

// BenchmarkStartupAuth measures start-up of 4 ranks in this process over
// TCP on loopback (every rank's New, with the control sessions opening
// behind it), without and with a token; Close is not timed.
func BenchmarkStartupAuth(b *testing.B) {
	nw := testkit.NewTCPNetwork()
	for _, auth := range []bool{false, true} {
		b.Run(fmt.Sprintf("ranks=4/auth=%t", auth), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				comms, err := testkit.StartStar(context.Background(), nw, 4, func(c *star.Config) {
					if auth {
						c.Token = star.Token(testToken)
					}
				})
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := testkit.CloseAll(comms); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}

// TestAuthProcesses: a 3-rank job, each rank a separate process over TCP
// on loopback, configured by the environment alone. With the same token on
// every rank (rank 0's from COBRE_TCP_TOKEN_FILE, a file ending in a
// newline, the workers' from COBRE_TCP_TOKEN) the job starts, runs mixed
// collectives and ends on every rank. With another token on rank 2, its
// FromEnv fails at once with a *comm.InitializationFailedError saying the
// authentication (token) was refused; rank 0 fails start-up after the
// connect timeout naming rank 2 as missing and saying its answer was
// wrong, and rank 1 names rank 2 too. No output shows a token.
func TestAuthProcesses(t *testing.T) {
	skipUnlessChaos(t)
	const size = 3
	exe, err := os.Executable()
	require.NoError(t, err)
	tokenFile := writeFile(t, "token", testToken+"\n")
	for _, tc := range []struct {
		name  string
		rank2 string // rank 2's token variable
	}{
		{"token=same", "COBRE_TCP_TOKEN=" + testToken},
		{"token=other", "COBRE_TCP_TOKEN=" + otherToken},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := chaosWatchdog(t)
			port := freePort(t)
			procs := startChaosCmds(t, repeat("authjob", size), func(r int) *exec.Cmd {
				cmd := exec.CommandContext(ctx, exe)
				cmd.Env = append(os.Environ(),
					"COBRE_COMM_BACKEND=tcp", "COBRE_TCP_COORDINATOR=127.0.0.1", "COBRE_TCP_BIND_ADDR=127.0.0.1",
					"COBRE_TCP_PORT="+strconv.Itoa(port), "COBRE_TCP_CONNECT_TIMEOUT_MS=3000", "COBRE_TCP_TIMEOUT_SECS=20")
				switch r {
				case 0:
					cmd.Env = append(cmd.Env, "COBRE_TCP_TOKEN_FILE="+tokenFile)
				case 1:
					cmd.Env = append(cmd.Env, "COBRE_TCP_TOKEN="+testToken)
				case 2:
					cmd.Env = append(cmd.Env, tc.rank2)
				}
				return cmd
			})
			defer func() {
				for _, p := range procs {
					assertNoToken(t, fmt.Sprintf("rank %d's output", p.rank), p.dump())
				}
			}()
			if tc.name == "token=same" {
				for _, p := range procs {
					p.await(t, ctx, "DONE")
				}
				for _, p := range procs {
					assert.Equal(t, 0, p.wait(t, ctx), "rank %d exit\n%s", p.rank, p.dump())
				}
				return
			}
			res := parseResult(t, procs[2].await(t, ctx, "RESULT "))
			t.Logf("rank 2: %s call_ms=%s msg=%q", res.fields["type"], res.fields["call_ms"], res.msg)
			assert.Equal(t, "start", res.fields["op"])
			assert.Equal(t, "InitializationFailed", res.fields["type"], res.msg)
			assert.Contains(t, res.msg, "authentication (token) refused by the coordinator at 127.0.0.1:"+strconv.Itoa(port))
			rank2 := res
			res = parseResult(t, procs[0].await(t, ctx, "RESULT "))
			assert.True(t, rank2.at.Before(res.at), "rank 2 failed at once, before rank 0's connect timeout")
			t.Logf("rank 0: %s msg=%q", res.fields["type"], res.msg)
			assert.Equal(t, "InitializationFailed", res.fields["type"], res.msg)
			assert.Contains(t, res.msg, "missing ranks [2]")
			assert.Contains(t, res.msg, "a connection claiming rank 2 gave a wrong answer to the challenge")
			res = parseResult(t, procs[1].await(t, ctx, "RESULT "))
			assert.Equal(t, "InitializationFailed", res.fields["type"], res.msg)
			assert.Equal(t, 2, res.int(t, "rank"), "rank 1 names rank 2: %s", res.msg)
			for _, p := range procs {
				assert.Equal(t, chaosExitExpected, p.wait(t, ctx), "rank %d exit\n%s", p.rank, p.dump())
			}
		})
	}
}
