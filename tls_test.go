package starcomm_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
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
	"github.com/starcomm/starcomm/transport/mtls"
)

// TestConformanceTLS runs the conformance suite over TLS (transport/mtls)
// over real TCP on loopback, all ranks in this process, with the control
// session (a second TLS connection per worker) on.
func TestConformanceTLS(t *testing.T) {
	nw, err := testkit.NewTLSNetwork()
	require.NoError(t, err)
	testkit.RunConformance(t, []int{1, 2, 4, 8}, func(t testing.TB, size int) []comm.Communicator {
		comms, err := testkit.StartStar(context.Background(), nw, size, nil)
		require.NoError(t, err)
		return comms
	})
}

// TestTLSPartialSet: the TLS variables go all three or none; a partial
// set is an error naming each missing variable and the ones set, from the
// environment and from Validate.
func TestTLSPartialSet(t *testing.T) {
	vars := []string{"COBRE_TCP_TLS_CERT", "COBRE_TCP_TLS_KEY", "COBRE_TCP_TLS_CA"}
	base := []string{"COBRE_TCP_SIZE=2", "COBRE_TCP_RANK=1", "COBRE_TCP_COORDINATOR=h"}
	for mask := 1; mask < 7; mask++ {
		var env, set, missing []string
		for i, v := range vars {
			if mask&(1<<i) != 0 {
				env, set = append(env, v+"=/etc/"+strconv.Itoa(i)+".pem"), append(set, v)
			} else {
				missing = append(missing, v)
			}
		}
		t.Run(envCase(env), func(t *testing.T) {
			_, err := parseEnviron(t, append(append([]string{}, base...), env...)...)
			require.Error(t, err)
			var got []string
			for _, e := range allErrors(err) {
				var ic *starcomm.InvalidConfigurationError
				require.ErrorAs(t, e, &ic)
				got = append(got, ic.Var)
				assert.Contains(t, e.Error(), "missing: TLS needs COBRE_TCP_TLS_CERT, COBRE_TCP_TLS_KEY and COBRE_TCP_TLS_CA")
				assert.Contains(t, e.Error(), "only "+strings.Join(set, " and "))
			}
			assert.Equal(t, missing, got, "%v", err)
		})
	}
	t.Run("all", func(t *testing.T) {
		cfg, err := parseEnviron(t, append(base, "COBRE_TCP_TLS_CERT=c", "COBRE_TCP_TLS_KEY=k", "COBRE_TCP_TLS_CA=a")...)
		require.NoError(t, err)
		assert.Equal(t, [3]string{"c", "k", "a"}, [3]string{cfg.TLSCert, cfg.TLSKey, cfg.TLSCA})
	})
	t.Run("Validate", func(t *testing.T) {
		c := starcomm.DefaultConfig()
		c.Size, c.TLSCA = 2, "ca.pem"
		err := c.Validate()
		require.Error(t, err)
		assert.ErrorContains(t, err, `invalid TLSCert="": missing: TLS needs TLSCert, TLSKey and TLSCA`)
		assert.ErrorContains(t, err, `only TLSCA is set`)
		assert.Len(t, allErrors(err), 2)
	})
}

// tlsFiles writes a CA and certificates for size ranks in a temporary
// directory.
func tlsFiles(t *testing.T, size int) *testkit.TLSFiles {
	t.Helper()
	f, err := testkit.WriteTLSFiles(t.TempDir(), size)
	require.NoError(t, err)
	return f
}

// tlsConfig is a tcp Config for rank of size with f's files: rank 0
// listens on a free port (reported on port), workers dial 127.0.0.1.
func tlsConfig(f *testkit.TLSFiles, rank, size int, port int) starcomm.Config {
	c := starcomm.DefaultConfig()
	c.Backend, c.Rank, c.Size = starcomm.BackendTCP, rank, size
	c.Coordinator, c.BindAddr, c.Port = "127.0.0.1", "127.0.0.1", port
	c.ConnectTimeout, c.Timeout = 20*time.Second, 20*time.Second
	if f != nil {
		c.TLSCert, c.TLSKey, c.TLSCA = f.Cert[rank], f.Key[rank], f.CA
	}
	return c
}

// TestTLSBadFiles: a certificate, key or CA file that cannot be used fails
// New (and FromEnv) before any connection with an
// *InvalidConfigurationError naming the variable, the file and what is
// wrong.
func TestTLSBadFiles(t *testing.T) {
	testkit.CheckGoroutines(t)
	f := tlsFiles(t, 2)
	other := tlsFiles(t, 2) // another CA
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(data), 0o600))
		return p
	}
	notPEM, empty := write("notpem.pem", "hello\n"), write("empty.pem", "")
	missing := filepath.Join(dir, "missing.pem")
	past := time.Now().Add(-48 * time.Hour)
	expiredCert, expiredKey, err := f.WriteLeaf(mtls.Leaf{Name: "expired", NotBefore: past, NotAfter: past.Add(time.Hour)})
	require.NoError(t, err)
	serverOnlyCert, serverOnlyKey, err := f.WriteLeaf(mtls.Leaf{Name: "server-only", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	require.NoError(t, err)
	for _, tc := range []struct {
		name          string
		rank          int
		cert, key, ca string
		vars          []string // the variables named, in order
		says          []string
	}{
		{name: "cert=missing", cert: missing, vars: []string{"COBRE_TCP_TLS_CERT"}, says: []string{missing, "the certificate file cannot be read", "no such file"}},
		{name: "key=missing", key: missing, vars: []string{"COBRE_TCP_TLS_KEY"}, says: []string{missing, "the key file cannot be read"}},
		{name: "ca=missing", ca: missing, vars: []string{"COBRE_TCP_TLS_CA"}, says: []string{missing, "the CA file cannot be read"}},
		{name: "all=missing", cert: missing, key: missing, ca: missing, vars: []string{"COBRE_TCP_TLS_CERT", "COBRE_TCP_TLS_KEY", "COBRE_TCP_TLS_CA"}},
		{name: "cert=not-PEM", cert: notPEM, vars: []string{"COBRE_TCP_TLS_CERT"}, says: []string{"holds no PEM block"}},
		{name: "ca=empty", ca: empty, vars: []string{"COBRE_TCP_TLS_CA"}, says: []string{"is empty"}},
		{name: "swapped", cert: f.Key[0], key: f.Cert[0], vars: []string{"COBRE_TCP_TLS_CERT", "COBRE_TCP_TLS_KEY"},
			says: []string{"the private key belongs in the key file", "holds a certificate, not a private key"}},
		{name: "key=another-certificate's", key: f.Key[1], vars: []string{"COBRE_TCP_TLS_KEY"}, says: []string{"does not match the certificate in " + f.Cert[0]}},
		{name: "ca=another-CA", ca: other.CA, vars: []string{"COBRE_TCP_TLS_CERT"}, says: []string{"unusable with COBRE_TCP_TLS_CA=" + other.CA, "is not signed by the CA"}},
		{name: "ca=a-key", ca: f.Key[0], vars: []string{"COBRE_TCP_TLS_CA"}, says: []string{"give the CA's certificate only"}},
		{name: "cert=expired", cert: expiredCert, key: expiredKey, vars: []string{"COBRE_TCP_TLS_CERT"}, says: []string{"expired at"}},
		{name: "coordinator-cert=server-only", rank: 0, cert: serverOnlyCert, key: serverOnlyKey, vars: nil},
		{name: "worker-cert=server-only", rank: 1, cert: serverOnlyCert, key: serverOnlyKey, vars: []string{"COBRE_TCP_TLS_CERT"}, says: []string{"not valid for client authentication"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tlsConfig(f, tc.rank, 2, 0)
			if tc.rank > 0 {
				c.Port = 1 // never dialed: the files fail first
			}
			for _, s := range []struct {
				dst *string
				v   string
			}{{&c.TLSCert, tc.cert}, {&c.TLSKey, tc.key}, {&c.TLSCA, tc.ca}} {
				if s.v != "" {
					*s.dst = s.v
				}
			}
			if tc.vars == nil { // a certificate that is fine for this role
				c.ConnectTimeout = 100 * time.Millisecond
				_, err := starcomm.New(context.Background(), c)
				var ic *starcomm.InvalidConfigurationError
				assert.False(t, errors.As(err, &ic), "%v", err)
				return
			}
			_, err := starcomm.New(context.Background(), c)
			require.Error(t, err)
			t.Log(err)
			var got []string
			for _, e := range allErrors(err) {
				var ic *starcomm.InvalidConfigurationError
				require.ErrorAs(t, e, &ic)
				got = append(got, ic.Var)
				want := map[string]string{"COBRE_TCP_TLS_CERT": c.TLSCert, "COBRE_TCP_TLS_KEY": c.TLSKey, "COBRE_TCP_TLS_CA": c.TLSCA}[ic.Var]
				assert.Equal(t, want, ic.Value, "the error's value is the file")
			}
			assert.Equal(t, tc.vars, got)
			for _, s := range tc.says {
				assert.ErrorContains(t, err, s)
			}
		})
	}
	t.Run("error-file", func(t *testing.T) {
		c := tlsConfig(f, 0, 2, 0)
		c.TLSKey, c.ErrorFile = missing, filepath.Join(t.TempDir(), "rank-0.json")
		_, err := starcomm.New(context.Background(), c)
		require.Error(t, err)
		rec, rerr := os.ReadFile(c.ErrorFile)
		require.NoError(t, rerr, "New records the failure for the launcher")
		assert.Contains(t, string(rec), "COBRE_TCP_TLS_KEY")
	})
	t.Run("FromEnv", func(t *testing.T) {
		t.Setenv("COBRE_COMM_BACKEND", "tcp")
		t.Setenv("COBRE_TCP_SIZE", "2")
		t.Setenv("COBRE_TCP_RANK", "1")
		t.Setenv("COBRE_TCP_COORDINATOR", "127.0.0.1")
		t.Setenv("COBRE_TCP_TLS_CERT", f.Cert[1])
		t.Setenv("COBRE_TCP_TLS_KEY", missing)
		t.Setenv("COBRE_TCP_TLS_CA", f.CA)
		_, err := starcomm.FromEnv(context.Background())
		assert.ErrorContains(t, err, `starcomm: invalid COBRE_TCP_TLS_KEY="`+missing+`": the key file cannot be read`)
	})
}

// job starts rank 0 of cfgs[0] and, once it listens, the other ranks, and
// returns every rank's communicator and error.
func job(t *testing.T, cfgs []starcomm.Config, listening func(port int)) ([]comm.Communicator, []error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	comms, errs := make([]comm.Communicator, len(cfgs)), make([]error, len(cfgs))
	port := make(chan int, 1)
	cfgs[0].Port = 0
	cfgs[0].Listening = func(p int) { port <- p }
	var wg sync.WaitGroup
	wg.Go(func() { comms[0], errs[0] = starcomm.New(ctx, cfgs[0]) })
	p := <-port
	if listening != nil {
		listening(p)
	}
	for r := 1; r < len(cfgs); r++ {
		cfgs[r].Port = p
		wg.Go(func() { comms[r], errs[r] = starcomm.New(ctx, cfgs[r]) })
	}
	wg.Wait()
	return comms, errs
}

// TestTLSJob: a 3-rank job over TLS starts, runs collectives (control
// sessions on) and ends cleanly.
func TestTLSJob(t *testing.T) {
	testkit.CheckGoroutines(t)
	f := tlsFiles(t, 3)
	comms, errs := job(t, []starcomm.Config{tlsConfig(f, 0, 3, 0), tlsConfig(f, 1, 3, 0), tlsConfig(f, 2, 3, 0)}, nil)
	require.NoError(t, errors.Join(errs...))
	require.NoError(t, errors.Join(testkit.RunRanks(comms, func(c comm.Communicator) error {
		out := make([]float64, 1)
		if err := comm.Allreduce(context.Background(), c, []float64{float64(c.Rank() + 1)}, out, comm.Sum); err != nil {
			return err
		}
		if out[0] != 6 {
			return errors.New("wrong sum")
		}
		return nil
	})...))
	require.NoError(t, testkit.CloseAll(comms))
}

// TestTLSForeignPeerRefused: while a TLS job starts, clients that do not
// hold a certificate signed by the job's CA (one signed by another CA,
// none at all) connect and send a valid Handshake for rank 1: the
// coordinator refuses each with a TLS alert saying why, neither takes a
// rank, and the real rank 1 joins and the job runs.
func TestTLSForeignPeerRefused(t *testing.T) {
	testkit.CheckGoroutines(t)
	f := tlsFiles(t, 2)
	other := tlsFiles(t, 2)
	foreign, err := tls.LoadX509KeyPair(other.Cert[1], other.Key[1])
	require.NoError(t, err)
	caPEM, err := os.ReadFile(f.CA)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(caPEM))
	intruder := func(port int, certs []tls.Certificate) error {
		conf := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", Certificates: certs}
		c, err := tls.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), conf)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write(star.EncodeHandshake(1, 2)); err != nil {
			return err
		}
		_, err = c.Read(make([]byte, 1))
		return err
	}
	var refusals []error
	comms, errs := job(t, []starcomm.Config{tlsConfig(f, 0, 2, 0), tlsConfig(f, 1, 2, 0)}, func(port int) {
		refusals = append(refusals, intruder(port, []tls.Certificate{foreign}), intruder(port, nil))
	})
	assert.ErrorContains(t, refusals[0], "unknown certificate authority")
	assert.ErrorContains(t, refusals[1], "certificate required")
	require.NoError(t, errors.Join(errs...), "the real rank 1 joins")
	require.NoError(t, errors.Join(testkit.RunRanks(comms, func(c comm.Communicator) error { return c.Barrier(context.Background()) })...))
	require.NoError(t, testkit.CloseAll(comms))
}

// TestTLSOtherCA: a worker whose files come from another CA (consistent
// in themselves) and a TLS coordinator refuse each other: the worker
// fails saying the coordinator's certificate is not signed by its CA, and
// the coordinator, once its connect timeout is over, says rank 1 never
// came and why its connection was refused. No hang.
func TestTLSOtherCA(t *testing.T) {
	testkit.CheckGoroutines(t)
	f := tlsFiles(t, 2)
	other := tlsFiles(t, 2)
	c0 := tlsConfig(f, 0, 2, 0)
	c0.ConnectTimeout = 2 * time.Second
	_, errs := job(t, []starcomm.Config{c0, tlsConfig(other, 1, 2, 0)}, nil)
	for r, err := range errs {
		t.Logf("rank %d: %v", r, err)
		var ife *comm.InitializationFailedError
		assert.ErrorAs(t, err, &ife, "rank %d", r)
	}
	assert.ErrorContains(t, errs[1], "the coordinator's certificate is not signed by this end's CA")
	assert.ErrorContains(t, errs[0], "refused 1 connection(s)")
	assert.ErrorContains(t, errs[0], "the client refused this end's certificate")
}

// TestTLSPlainPeer: a plain-TCP worker of a TLS coordinator, and a TLS
// worker of a plain-TCP coordinator, fail on both sides with errors that
// say that one side speaks TLS and the other does not; nobody hangs.
func TestTLSPlainPeer(t *testing.T) {
	testkit.CheckGoroutines(t)
	f := tlsFiles(t, 2)
	t.Run("worker=plain", func(t *testing.T) {
		c0 := tlsConfig(f, 0, 2, 0)
		c0.ConnectTimeout = 2 * time.Second
		_, errs := job(t, []starcomm.Config{c0, tlsConfig(nil, 1, 2, 0)}, nil)
		t.Logf("coordinator: %v\nworker: %v", errs[0], errs[1])
		var re *star.RefusedError
		require.ErrorAs(t, errs[1], &re)
		assert.ErrorContains(t, errs[1], "this coordinator requires TLS (COBRE_TCP_TLS_CERT, COBRE_TCP_TLS_KEY, COBRE_TCP_TLS_CA) and this connection spoke plain TCP")
		assert.ErrorContains(t, errs[0], "refused 1 connection(s)")
		assert.ErrorContains(t, errs[0], "the peer does not speak TLS")
	})
	t.Run("coordinator=plain", func(t *testing.T) {
		c0 := tlsConfig(nil, 0, 2, 0)
		c0.ConnectTimeout = 2 * time.Second
		_, errs := job(t, []starcomm.Config{c0, tlsConfig(f, 1, 2, 0)}, nil)
		t.Logf("coordinator: %v\nworker: %v", errs[0], errs[1])
		var he *mtls.HandshakeError
		require.ErrorAs(t, errs[1], &he)
		assert.ErrorContains(t, errs[1], "the peer does not speak TLS")
		assert.ErrorContains(t, errs[0], "refused 1 connection(s), last: bad handshake")
	})
}

// signalHandler is a slog.Handler that closes hit the first time a
// record's message or attributes contain want.
type signalHandler struct {
	want string
	once *sync.Once
	hit  chan struct{}
}

func (h signalHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h signalHandler) Handle(_ context.Context, r slog.Record) error {
	text := r.Message
	r.Attrs(func(a slog.Attr) bool { text += " " + a.Value.String(); return true })
	if strings.Contains(text, h.want) {
		h.once.Do(func() { close(h.hit) })
	}
	return nil
}
func (h signalHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h signalHandler) WithGroup(string) slog.Handler      { return h }

// TestTLSNextJobOnSamePort: over TLS, a worker of the next job that
// reaches the previous job's coordinator on the same port (kept open for
// a control session that rank 1 of the first job does not open) is
// refused with cause "running" and tries again; once the first job has
// ended and the next coordinator listens on that port, it joins, and the
// next job runs with its control sessions.
func TestTLSNextJobOnSamePort(t *testing.T) {
	testkit.CheckGoroutines(t)
	f := tlsFiles(t, 2)
	hit := make(chan struct{})
	first := []starcomm.Config{tlsConfig(f, 0, 2, 0), tlsConfig(f, 1, 2, 0)}
	first[0].Logger = slog.New(signalHandler{want: "is running", once: new(sync.Once), hit: hit})
	first[1].Liveness = 0 // no control session: the coordinator keeps listening for it
	var port int
	comms, errs := job(t, first, func(p int) { port = p })
	require.NoError(t, errors.Join(errs...))
	next := tlsConfig(f, 1, 2, port)
	type result struct {
		c   comm.Communicator
		err error
	}
	joined := make(chan result, 1)
	go func() {
		c, err := starcomm.New(context.Background(), next)
		joined <- result{c, err}
	}()
	select {
	case <-hit:
	case r := <-joined:
		t.Fatalf("the next job's worker did not wait for its coordinator: %v", r.err)
	case <-time.After(time.Minute):
		t.Fatal("the running coordinator never refused the next job's worker")
	}
	require.NoError(t, testkit.CloseAll(comms))
	c0 := tlsConfig(f, 0, 2, port)
	coord, err := starcomm.New(context.Background(), c0)
	require.NoError(t, err)
	r := <-joined
	require.NoError(t, r.err)
	second := []comm.Communicator{coord, r.c}
	require.NoError(t, errors.Join(testkit.RunRanks(second, func(c comm.Communicator) error { return c.Barrier(context.Background()) })...))
	require.NoError(t, testkit.CloseAll(second))
}

// chanHandler is a slog.Handler that sends every record's message and
// attributes, as one line, on lines (dropping them when it is full).
type chanHandler struct{ lines chan string }

func (h chanHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h chanHandler) Handle(_ context.Context, r slog.Record) error {
	text := r.Message
	r.Attrs(func(a slog.Attr) bool { text += " " + a.Key + "=" + a.Value.String(); return true })
	select {
	case h.lines <- text:
	default:
	}
	return nil
}
func (h chanHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h chanHandler) WithGroup(string) slog.Handler      { return h }

// TestTLSControlSession: over TLS, every worker's control session (a
// second TLS connection, Control frame 0x0C, then smux) comes up on both
// ends, and none falls back to running without one.
func TestTLSControlSession(t *testing.T) {
	testkit.CheckGoroutines(t)
	f := tlsFiles(t, 3)
	cfgs := []starcomm.Config{tlsConfig(f, 0, 3, 0), tlsConfig(f, 1, 3, 0), tlsConfig(f, 2, 3, 0)}
	logs := make([]chan string, 3)
	for r := range cfgs {
		logs[r] = make(chan string, 100)
		cfgs[r].Logger = slog.New(chanHandler{logs[r]})
	}
	comms, errs := job(t, cfgs, nil)
	require.NoError(t, errors.Join(errs...))
	defer func() { require.NoError(t, testkit.CloseAll(comms)) }()
	timeout := time.After(30 * time.Second)
	await := func(r int, want string) {
		t.Helper()
		for {
			select {
			case l := <-logs[r]:
				require.NotContains(t, l, "no control session", "rank %d", r)
				if strings.Contains(l, want) {
					return
				}
			case <-timeout:
				t.Fatalf("rank %d never logged %q", r, want)
			}
		}
	}
	await(1, "control session up rank=0")
	await(2, "control session up rank=0")
	up := map[string]bool{}
	for len(up) < 2 {
		select {
		case l := <-logs[0]:
			if strings.HasPrefix(l, "control session up") {
				up[l] = true
			}
		case <-timeout:
			t.Fatalf("the coordinator's control sessions up: %v; want ranks 1 and 2", up)
		}
	}
	assert.Equal(t, map[string]bool{"control session up rank=1 self=0": true, "control session up rank=2 self=0": true}, up)
	require.NoError(t, errors.Join(testkit.RunRanks(comms, func(c comm.Communicator) error { return c.Barrier(context.Background()) })...))
}

// TestTLSLivenessStop: over TLS, with separate OS processes and a
// collective timeout of an hour, a rank frozen with SIGSTOP in the middle
// of allgathervs is named unresponsive by every other rank within the
// liveness timeout + 1 s: the control sessions' heartbeats run over TLS.
func TestTLSLivenessStop(t *testing.T) {
	skipUnlessChaos(t)
	if runtime.GOOS != "linux" || strings.HasPrefix(runtime.GOARCH, "mips") {
		t.Skipf("SIGSTOP is signal %d only on Linux (not MIPS); this is %s/%s", int(sigStop), runtime.GOOS, runtime.GOARCH)
	}
	const size, victim = 4, 2
	f := tlsFiles(t, 1) // one certificate, valid for both roles, for every rank
	ctx := chaosWatchdog(t)
	// READY after 5 allgathervs (and once the control sessions are up):
	// 20 of 4 MiB per rank over TLS took 9 s under -race on an idle
	// 2-core machine, and more than the 30 s watchdog once in a CI run
	// beside the other packages' tests.
	env := append(append(append([]string{}, liveEnv...), envChaosReady+"=5"), f.Env(0)...)
	procs := startChaos(t, ctx, repeat(comm.OpAllgatherv, size), env...)
	for _, p := range procs {
		p.await(t, ctx, "READY ")
	}
	stopped := procs[victim].signal(t, sigStop)
	checkUnresponsive(t, ctx, procs, victim, stopped, stopped)
	procs[victim].signal(t, os.Kill)
	for _, p := range procs {
		if p.rank != victim {
			assert.Equal(t, chaosExitExpected, p.wait(t, ctx), "rank %d exit: %v\n%s", p.rank, p.state, p.dump())
		}
	}
}
