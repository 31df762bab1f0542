//go:build linux

package netns

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A test's child process: this test binary, re-run by TestMain in a host's
// namespace through SelfCommand.
const (
	envChild = "NETNS_TEST_CHILD" // echo, wait or lookup
	envAddr  = "NETNS_TEST_ADDR"  // for echo: the address to dial; for lookup: the name
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(envChild); mode != "" {
		os.Exit(child(mode))
	}
	os.Exit(m.Run())
}

// child runs a child process's mode:
//   - echo dials envAddr, sends one line, reads it back and prints
//     "ECHO <line>";
//   - wait prints READY and waits for its standard input to close;
//   - lookup resolves each name of the comma-separated envAddr with Go's
//     resolver and prints "<name> <addr> ..." (sorted) or "<name>
//     NOTFOUND" for a *net.DNSError with IsNotFound, a line per name.
func child(mode string) int {
	time.AfterFunc(time.Minute, func() { os.Exit(4) }) // never outlive a lost parent
	switch mode {
	case "echo":
		c, err := net.DialTimeout("tcp", os.Getenv(envAddr), 10*time.Second)
		if err != nil {
			fmt.Println("ERROR", err)
			return 1
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := fmt.Fprintf(c, "hello from %s\n", c.LocalAddr()); err != nil {
			fmt.Println("ERROR", err)
			return 1
		}
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			fmt.Println("ERROR", err)
			return 1
		}
		fmt.Print("ECHO ", line)
		return 0
	case "wait":
		fmt.Println("READY")
		_, _ = io.Copy(io.Discard, os.Stdin)
		return 0
	case "lookup":
		for name := range strings.SplitSeq(os.Getenv(envAddr), ",") {
			addrs, err := net.LookupHost(name)
			var dnsErr *net.DNSError
			switch {
			case errors.As(err, &dnsErr) && dnsErr.IsNotFound:
				fmt.Println(name, "NOTFOUND")
			case err != nil:
				fmt.Println("ERROR", err)
				return 1
			default:
				slices.Sort(addrs)
				fmt.Println(name, strings.Join(addrs, " "))
			}
		}
		return 0
	}
	fmt.Println("ERROR unknown mode", mode)
	return 1
}

// newNet makes a Net for t, closed when t ends, or skips t when
// namespaces cannot be used here.
func newNet(t *testing.T, hosts int, opts Options) *Net {
	t.Helper()
	if err := Available(); err != nil {
		t.Skip(err)
	}
	n, err := New(t.Name(), hosts, opts)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, n.Close()) })
	return n
}

func skipUnavailable(t *testing.T) *tools {
	t.Helper()
	tl, err := probe()
	if err != nil {
		t.Skip(err)
	}
	return tl
}

// namespaceList is what ip netns list shows.
func namespaceList(t *testing.T) []string {
	t.Helper()
	out, err := run(skipUnavailable(t).ip, nil, "netns", "list")
	require.NoError(t, err)
	var names []string
	for line := range strings.Lines(string(out)) {
		if f := strings.Fields(line); len(f) > 0 {
			names = append(names, f[0])
		}
	}
	return names
}

// roundTrip sends msg from a to b and checks that it arrives whole.
func roundTrip(t *testing.T, a, b net.Conn, msg string) {
	t.Helper()
	_, err := a.Write([]byte(msg))
	require.NoError(t, err)
	require.NoError(t, b.SetReadDeadline(time.Now().Add(30*time.Second)))
	buf := make([]byte, len(msg))
	_, err = io.ReadFull(b, buf)
	require.NoError(t, err)
	require.Equal(t, msg, string(buf))
}

func TestParseRate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
	}{
		{"1gbit", 1e9},
		{"100mbit", 100e6},
		{"100Mbit", 100e6},
		{"12.5mbps", 100e6},
		{"1kibit", 1024},
		{"2mibps", 16 << 20},
		{"64000", 64000},
		{"64000bit", 64000},
		{" 1tbit ", 1e12},
	} {
		got, err := ParseRate(tc.in)
		if assert.NoError(t, err, tc.in) {
			assert.Equal(t, tc.want, got, tc.in)
		}
	}
	for _, bad := range []string{"", "mbit", "1 furlong", "1.2.3mbit", "-5mbit", "0", "1e3mbit"} {
		_, err := ParseRate(bad)
		assert.Error(t, err, bad)
	}
}

func TestNames(t *testing.T) {
	assert.Equal(t, "TestX_sub_case_2_x_y", sanitize("TestX/sub case#2-x:y"))
	assert.Equal(t, "net", sanitize(""))
	assert.Len(t, sanitize(strings.Repeat("ab", 40)), 32)

	name := nsName("4242.987654", 7, "TestCut/ipv6", "h3")
	assert.Equal(t, "stnet-4242.987654-7-TestCut_ipv6-h3", name)
	pid, start, ok := parseOwner(name)
	assert.True(t, ok)
	assert.Equal(t, 4242, pid)
	assert.Equal(t, uint64(987654), start)
	for _, bad := range []string{"other-1.2-3-x-h0", "stnet-x.2-3-a-h0", "stnet-12-3-a-h0", "stnet-1.2"} {
		_, _, ok := parseOwner(bad)
		assert.False(t, ok, bad)
	}

	owner, err := selfOwner()
	if err != nil {
		t.Skip(err) // no /proc
	}
	pid, start, ok = parseOwner(nsName(owner, 1, "x", "sw"))
	require.True(t, ok)
	assert.Equal(t, os.Getpid(), pid)
	assert.True(t, ownerAlive(pid, start))
	assert.False(t, ownerAlive(pid, start+1), "same pid, other start time: a reused pid")
}

func TestAvailable(t *testing.T) {
	err := Available()
	if err != nil {
		assert.True(t, strings.HasPrefix(err.Error(), "netns: "), err.Error())
		t.Skip(err)
	}
	assert.Equal(t, err, Available(), "the result is cached")
}

// TestEcho: a listener in host 0, a client process in host 1 (this test
// binary, run there with SelfCommand) that echoes a line through it, over
// IPv4 and IPv6.
func TestEcho(t *testing.T) {
	t.Parallel()
	n := newNet(t, 2, Options{IPv6: true})
	for _, fam := range []struct {
		name string
		addr func(int) string
	}{{"ipv4", n.Addr}, {"ipv6", n.Addr6}} {
		t.Run(fam.name, func(t *testing.T) {
			t.Parallel()
			ln, err := n.Listen(0, "tcp", net.JoinHostPort(fam.addr(0), "0"))
			require.NoError(t, err)
			defer ln.Close()
			remote := make(chan string, 1)
			go func() {
				c, err := ln.Accept()
				if err != nil {
					remote <- "accept: " + err.Error()
					return
				}
				defer c.Close()
				remote <- c.RemoteAddr().String()
				_ = c.SetDeadline(time.Now().Add(30 * time.Second))
				_, _ = io.Copy(c, c)
			}()
			cmd := n.SelfCommand(1, "-test.run=^$")
			cmd.Env = append(os.Environ(), envChild+"=echo", envAddr+"="+ln.Addr().String())
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "child output: %s", out)
			from := <-remote
			host, _, err := net.SplitHostPort(from)
			require.NoError(t, err, from)
			assert.Equal(t, fam.addr(1), host, "the client runs in host 1")
			assert.Equal(t, "ECHO hello from "+from+"\n", string(out))
		})
	}
}

// TestCommand: the process Command starts is the program itself (ip
// execs it), in host i's namespace.
func TestCommand(t *testing.T) {
	t.Parallel()
	n := newNet(t, 2, Options{})
	exe, err := os.Executable()
	require.NoError(t, err)
	for i := range n.Hosts() {
		cmd := n.SelfCommand(i, "-test.run=^$")
		cmd.Env = append(os.Environ(), envChild+"=wait")
		stdin, err := cmd.StdinPipe()
		require.NoError(t, err)
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		line, err := bufio.NewReader(stdout).ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, "READY\n", line)

		pid := cmd.Process.Pid
		got, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		require.NoError(t, err)
		assert.Equal(t, exe, got, "the process is the program, not ip")
		var want, have syscall.Stat_t
		require.NoError(t, syscall.Stat(filepath.Join(n.t.dir, n.Namespace(i)), &want))
		require.NoError(t, syscall.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &have))
		assert.Equal(t, want.Ino, have.Ino, "host %d's process is in %s", i, n.Namespace(i))

		require.NoError(t, stdin.Close())
		require.NoError(t, cmd.Wait())
	}
	cmd := n.Command(7, "true")
	assert.ErrorContains(t, cmd.Run(), "host 7 of a Net of 2 hosts")
	assert.Panics(t, func() { n.Addr(2) })
}

// TestIsolated: each host has a loopback of its own.
func TestIsolated(t *testing.T) {
	t.Parallel()
	n := newNet(t, 2, Options{})
	ln, err := n.Listen(0, "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := n.DialContext(ctx, 0, "tcp", ln.Addr().String())
	require.NoError(t, err, "host 0 reaches its own loopback")
	c.Close()
	_, err = n.DialContext(ctx, 1, "tcp", ln.Addr().String())
	assert.ErrorIs(t, err, syscall.ECONNREFUSED, "host 1's loopback is another")
}

// TestSysctl: Sysctl sets a value in one host's namespace only, and New
// turned DAD off in the hosts.
func TestSysctl(t *testing.T) {
	t.Parallel()
	n := newNet(t, 2, Options{IPv6: true})
	read := func(i int, key string) string {
		out, err := n.Command(i, "cat", "/proc/sys/"+strings.ReplaceAll(key, ".", "/")).Output()
		require.NoError(t, err)
		return strings.TrimSpace(string(out))
	}
	require.NoError(t, n.Sysctl(0, "net.ipv4.tcp_keepalive_time", "77"))
	assert.Equal(t, "77", read(0, "net.ipv4.tcp_keepalive_time"))
	assert.NotEqual(t, "77", read(1, "net.ipv4.tcp_keepalive_time"))
	assert.Equal(t, "0", read(1, "net.ipv6.conf.eth0.accept_dad"))
	assert.Error(t, n.Sysctl(0, "net.no.such.thing", "1"))
}

// TestCut: a cut link drops everything silently. With three hosts and
// connections from hosts 1 and 2 to a listener in host 0, cutting host 2
// leaves its connection silent in both directions (reads end at their
// deadline, with no data, EOF or RST) and makes new connections time out,
// while host 1 is unaffected; after Restore, TCP retransmits what was
// written during the cut.
func TestCut(t *testing.T) {
	t.Parallel()
	n := newNet(t, 3, Options{IPv6: true})
	for _, fam := range []struct {
		name string
		addr func(int) string
	}{{"ipv4", n.Addr}, {"ipv6", n.Addr6}} {
		t.Run(fam.name, func(t *testing.T) {
			// Not parallel: both subtests cut the same host.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			ln, err := n.Listen(0, "tcp", net.JoinHostPort(fam.addr(0), "0"))
			require.NoError(t, err)
			defer ln.Close()
			connect := func(from int) (srv, cli net.Conn) {
				cli, err := n.DialContext(ctx, from, "tcp", ln.Addr().String())
				require.NoError(t, err)
				t.Cleanup(func() { cli.Close() })
				srv, err = ln.Accept()
				require.NoError(t, err)
				t.Cleanup(func() { srv.Close() })
				host, _, _ := net.SplitHostPort(srv.RemoteAddr().String())
				require.Equal(t, fam.addr(from), host)
				return srv, cli
			}
			srv1, cli1 := connect(1)
			srv2, cli2 := connect(2)
			roundTrip(t, cli1, srv1, "ping 1")
			roundTrip(t, srv1, cli1, "pong 1")
			roundTrip(t, cli2, srv2, "ping 2")
			roundTrip(t, srv2, cli2, "pong 2")

			require.NoError(t, n.Cut(2))
			require.NoError(t, n.Cut(2), "cutting a cut link")
			const up, down = "sent up during the cut", "sent down during the cut"
			_, err = cli2.Write([]byte(up))
			require.NoError(t, err, "a write is buffered")
			_, err = srv2.Write([]byte(down))
			require.NoError(t, err, "a write is buffered")
			var wg sync.WaitGroup
			for _, c := range []net.Conn{srv2, cli2} {
				wg.Go(func() {
					require.NoError(t, c.SetReadDeadline(time.Now().Add(1500*time.Millisecond)))
					buf := make([]byte, 64)
					k, err := c.Read(buf)
					assert.Zero(t, k, "data through a cut link: %q", buf[:k])
					assert.ErrorIs(t, err, os.ErrDeadlineExceeded, "no EOF, no RST: the read waits for its deadline")
				})
			}
			wg.Go(func() {
				dctx, cancel := context.WithTimeout(ctx, time.Second)
				defer cancel()
				c, err := n.DialContext(dctx, 2, "tcp", ln.Addr().String())
				if c != nil {
					c.Close()
				}
				var ne net.Error
				if assert.ErrorAs(t, err, &ne, "a new connection through a cut link") {
					assert.True(t, ne.Timeout(), "it times out (no refusal, no unreachable): %v", err)
				}
			})
			roundTrip(t, cli1, srv1, "host 1 is not cut")
			roundTrip(t, srv1, cli1, "host 1 is still not cut")
			wg.Wait()

			require.NoError(t, n.Restore(2))
			require.NoError(t, n.Restore(2), "restoring a link that is up")
			buf := make([]byte, len(up))
			require.NoError(t, srv2.SetReadDeadline(time.Now().Add(30*time.Second)))
			_, err = io.ReadFull(srv2, buf)
			require.NoError(t, err)
			assert.Equal(t, up, string(buf), "retransmitted after the restore")
			buf = make([]byte, len(down))
			require.NoError(t, cli2.SetReadDeadline(time.Now().Add(30*time.Second)))
			_, err = io.ReadFull(cli2, buf)
			require.NoError(t, err)
			assert.Equal(t, down, string(buf), "retransmitted after the restore")
			roundTrip(t, cli2, srv2, "ping again")
			roundTrip(t, srv2, cli2, "pong again")
		})
	}
	assert.Error(t, n.Cut(3))
	assert.Error(t, n.Restore(-1))
}

// TestLimit: with a 100 Mbit/s limit on either end of a link, 20 MB take at
// least 70% of the ideal 1.6 s. A lower bound only: this checks that
// shaping happens, not how fast anything is.
func TestLimit(t *testing.T) {
	t.Parallel()
	const (
		rate  = "100mbit"
		bytes = 20_000_000
		ideal = time.Duration(bytes * 8 * int64(time.Second) / 100e6)
	)
	for _, tc := range []struct {
		name    string
		limited int // the host whose link is limited; host 1 sends to host 0
	}{{"egress", 1}, {"ingress", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			n := newNet(t, 2, Options{})
			require.NoError(t, n.Limit(tc.limited, rate))
			qdiscs := func() string {
				var all string
				for _, q := range n.qdiscs(tc.limited) {
					out, err := run(n.t.tc, nil, "-n", q.ns, "qdisc", "show", "dev", q.dev, "root")
					require.NoError(t, err)
					all += string(out)
				}
				return all
			}
			assert.Equal(t, 2, strings.Count(qdiscs(), "tbf"), qdiscs())
			assert.Equal(t, 2, strings.Count(qdiscs(), "rate 100Mbit"), qdiscs())

			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			ln, err := n.Listen(0, "tcp", net.JoinHostPort(n.Addr(0), "0"))
			require.NoError(t, err)
			defer ln.Close()
			cli, err := n.DialContext(ctx, 1, "tcp", ln.Addr().String())
			require.NoError(t, err)
			defer cli.Close()
			srv, err := ln.Accept()
			require.NoError(t, err)
			defer srv.Close()
			require.NoError(t, srv.SetDeadline(time.Now().Add(time.Minute)))
			require.NoError(t, cli.SetDeadline(time.Now().Add(time.Minute)))

			begin := time.Now()
			sent := make(chan error, 1)
			go func() {
				buf := make([]byte, 64<<10)
				var err error
				for left := bytes; left > 0 && err == nil; left -= len(buf) {
					_, err = cli.Write(buf[:min(left, len(buf))])
				}
				if err == nil {
					err = cli.(*net.TCPConn).CloseWrite()
				}
				sent <- err
			}()
			got, err := io.Copy(io.Discard, srv)
			elapsed := time.Since(begin)
			require.NoError(t, err)
			require.NoError(t, <-sent)
			require.Equal(t, int64(bytes), got)
			t.Logf("%d bytes at %s in %v (ideal %v)", got, rate, elapsed, ideal)
			assert.GreaterOrEqual(t, elapsed, ideal*7/10, "the transfer was not shaped")

			require.NoError(t, n.Unlimit(tc.limited))
			assert.NotContains(t, qdiscs(), "tbf")
			require.NoError(t, n.Unlimit(tc.limited), "unlimiting an unlimited link")
		})
	}
	n := newNet(t, 1, Options{})
	assert.ErrorContains(t, n.Limit(0, "fast"), "unknown unit")
	assert.Error(t, n.Limit(1, "1gbit"))
}

// TestClose: Close deletes every namespace and interface, even those of a
// namespace a process still runs in, and is idempotent.
func TestClose(t *testing.T) {
	t.Parallel()
	n := newNet(t, 2, Options{IPv6: true})
	names := n.Namespaces()
	require.Len(t, names, 3)
	list := namespaceList(t)
	for _, ns := range names {
		require.Contains(t, list, ns)
	}

	cmd := n.SelfCommand(0, "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"=wait")
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer func() {
		_ = stdin.Close()
		_ = cmd.Wait()
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "READY\n", line)

	require.NoError(t, n.Close())
	list = namespaceList(t)
	for _, ns := range names {
		assert.NotContains(t, list, ns)
	}
	var ifaces []string
	require.NoError(t, doInPath(fmt.Sprintf("/proc/%d/ns/net", cmd.Process.Pid), func() error {
		is, err := net.Interfaces()
		for _, i := range is {
			ifaces = append(ifaces, i.Name)
		}
		return err
	}))
	assert.Equal(t, []string{"lo"}, ifaces, "the namespace host 0's process still runs in lost its link")
	out, err := run(n.t.ip, nil, "link", "show")
	require.NoError(t, err)
	for _, nw := range n.nets {
		for _, mac := range nw.macs {
			assert.NotContains(t, string(out), mac, "nothing leaked into this namespace")
		}
	}

	require.NoError(t, n.Close(), "a second Close")
	assert.ErrorIs(t, n.Cut(0), ErrClosed)
	assert.ErrorIs(t, n.Limit(0, "1mbit"), ErrClosed)
	_, err = n.Listen(0, "tcp", ":0")
	assert.ErrorIs(t, err, ErrClosed)
}

// TestSweep: New deletes the namespaces of dead processes (a pid that is
// gone, or a pid reused by a process started at another time) and leaves
// those of live ones alone; so does Sweep.
func TestSweep(t *testing.T) {
	t.Parallel()
	tl := skipUnavailable(t)
	exited := exec.Command(tl.ip, "-V")
	require.NoError(t, exited.Run())
	self, err := selfOwner()
	require.NoError(t, err)
	_, start, _ := parseOwner(nsName(self, 0, "", ""))
	dead := fmt.Sprintf("%d.%d", exited.Process.Pid, 1)
	reused := fmt.Sprintf("%d.%d", os.Getpid(), start+1)

	add := func(ns string) {
		t.Helper()
		_, err := run(tl.ip, nil, "netns", "add", ns)
		require.NoError(t, err)
		t.Cleanup(func() { _ = deleteNamespace(tl, ns) })
	}
	leftDead := nsName(dead, 1, t.Name(), "h0")
	leftReused := nsName(reused, 1, t.Name(), "sw")
	live := nsName(self, nextSeq(), t.Name(), "h0")
	for _, ns := range []string{leftDead, leftReused, live} {
		add(ns)
	}
	// Another test process (go test runs packages at once) may sweep the
	// dead pid's leftovers at any moment, New's own job: a step of the
	// set-up that fails on a leftover is that sweep's doing (it fails
	// with "Cannot open" once the namespace is gone, "Invalid argument"
	// while it goes), and the leftovers must be gone after New all the
	// same (below).
	// An interface in a leftover, as a killed New leaves them.
	_, err = run(tl.ip, nil, "-n", leftDead, "link", "add", "h0", "type", "veth", "peer", "name", "eth0", "netns", leftReused)
	if err != nil {
		require.Contains(t, err.Error(), "TestSweep", "link add: %v", err)
		t.Logf("a concurrent sweep took a leftover before its interface was added: %v", err)
	}
	// Hosts files: of a leftover namespace, of one already gone, of a
	// live one.
	orphan := nsName(dead, 3, t.Name(), "h1")
	for _, ns := range []string{leftDead, orphan, live} {
		dir := filepath.Join(EtcDir, ns)
		t.Cleanup(func() { _ = os.RemoveAll(dir) })
		err := os.MkdirAll(dir, 0o755)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, "hosts"), nil, 0o644)
		}
		// Only a dead pid's files can be swept from under us.
		require.True(t, err == nil || (ns != live && errors.Is(err, os.ErrNotExist)), "hosts file of %s: %v", ns, err)
	}

	n, err := New(t.Name(), 1, Options{})
	require.NoError(t, err)
	require.NoError(t, n.Close())
	list := namespaceList(t)
	assert.NotContains(t, list, leftDead, "swept by New: its creator is gone")
	assert.NotContains(t, list, leftReused, "swept by New: its creator's pid is another process's")
	assert.Contains(t, list, live, "a live process's namespace stays")
	for _, ns := range []string{leftDead, orphan} {
		_, err := os.Stat(filepath.Join(EtcDir, ns))
		assert.ErrorIs(t, err, os.ErrNotExist, "swept: %s", ns)
	}
	_, err = os.Stat(filepath.Join(EtcDir, live, "hosts"))
	assert.NoError(t, err, "a live process's files stay")

	again := nsName(dead, 2, t.Name(), "h1")
	add(again)
	_, err = Sweep()
	require.NoError(t, err)
	list = namespaceList(t)
	assert.NotContains(t, list, again, "swept by Sweep")
	assert.Contains(t, list, live)
}

// TestParallelNets: Nets made at the same time have distinct namespaces
// and subnets, and each works.
func TestParallelNets(t *testing.T) {
	t.Parallel()
	skipUnavailable(t)
	const k = 4
	nets := make([]*Net, k)
	errs := make([]error, k)
	var wg sync.WaitGroup
	for i := range k {
		wg.Go(func() { nets[i], errs[i] = New(t.Name(), 2, Options{IPv6: true}) })
	}
	wg.Wait()
	for i := range k {
		require.NoError(t, errs[i])
		t.Cleanup(func() { assert.NoError(t, nets[i].Close()) })
	}
	var names, subnets []string
	for _, n := range nets {
		names = append(names, n.Namespaces()...)
		subnets = append(subnets, n.Subnet(), n.Subnet6())
		ln, err := n.Listen(0, "tcp", net.JoinHostPort(n.Addr(0), "0"))
		require.NoError(t, err)
		c, err := n.DialContext(context.Background(), 1, "tcp", ln.Addr().String())
		require.NoError(t, err)
		c.Close()
		ln.Close()
	}
	assert.Len(t, slices.Compact(slices.Sorted(slices.Values(names))), 3*k)
	assert.Len(t, slices.Compact(slices.Sorted(slices.Values(subnets))), 2*k)
}

// TestNewErrors: bad arguments fail before anything is created.
func TestNewErrors(t *testing.T) {
	skipUnavailable(t)
	for _, h := range []int{0, -1, MaxHosts + 1} {
		_, err := New(t.Name(), h, Options{})
		assert.Error(t, err, h)
	}
	_, err := New(t.Name(), 2, Options{MTU: 10})
	assert.Error(t, err)
	_, err = New(t.Name(), 2, Options{MTU: 1000, IPv6: true})
	assert.Error(t, err)
	assert.False(t, errors.Is(err, ErrClosed))
	for _, opts := range []Options{
		{Networks: MaxNetworks + 1},
		{Networks: -1},
		{Names: []string{"a", "b", "c"}},
		{Names: []string{"node0", "NODE0"}},
		{Names: []string{"no de"}},
		{Names: []string{"10.1.2.3"}},
		{Names: []string{"-x"}},
		{Names: []string{strings.Repeat("a", 64)}},
	} {
		_, err := New(t.Name(), 2, opts)
		assert.Error(t, err, "%+v", opts)
	}
}

// lookup resolves names in host i, in a process started there with
// SelfCommand (so through the host's hosts file), and returns what it
// found for each: its addresses, sorted and joined by spaces, or
// "NOTFOUND".
func lookup(t *testing.T, n *Net, i int, names ...string) map[string]string {
	t.Helper()
	cmd := n.SelfCommand(i, "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"=lookup", envAddr+"="+strings.Join(names, ","))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "lookup %v in host %d: %s", names, i, out)
	got := map[string]string{}
	for line := range strings.Lines(string(out)) {
		name, addrs, _ := strings.Cut(strings.TrimSpace(line), " ")
		got[name] = addrs
	}
	return got
}

// sortedJoin sorts addrs and joins them with spaces.
func sortedJoin(addrs ...string) string {
	slices.Sort(addrs)
	return strings.Join(addrs, " ")
}

// TestHostNames: with Options.Names, every host resolves every named
// host's addresses (IPv4 and IPv6) through its own hosts file, which only
// processes started with Command see; a name in no hosts file is "not
// found" at once (no DNS is asked); AddName makes a name resolve for the
// next lookup; Close deletes the files.
func TestHostNames(t *testing.T) {
	t.Parallel()
	n := newNet(t, 3, Options{IPv6: true, Names: []string{"alpha", "beta.example"}})
	assert.Equal(t, "alpha", n.Name(0))
	assert.Equal(t, "", n.Name(2))
	for i := range n.Hosts() {
		assert.Equal(t, map[string]string{
			"alpha":        sortedJoin(n.Addr(0), n.Addr6(0)),
			"beta.example": sortedJoin(n.Addr(1), n.Addr6(1)),
			"localhost":    "127.0.0.1 ::1",
			"gamma":        "NOTFOUND",
		}, lookup(t, n, i, "alpha", "beta.example", "localhost", "gamma"), "host %d", i)
	}

	etcHosts, err := os.ReadFile("/etc/hosts")
	require.NoError(t, err)
	assert.NotContains(t, string(etcHosts), n.Addr(0), "this process's /etc/hosts is untouched")

	before, err := os.Stat(n.HostsFile(1))
	require.NoError(t, err)
	require.NoError(t, n.AddName("gamma", n.Addr(2)))
	require.NoError(t, n.AddName("beta.example", n.Addr6(2)))
	after, err := os.Stat(n.HostsFile(1))
	require.NoError(t, err)
	assert.True(t, os.SameFile(before, after), "AddName keeps the file (its inode is what ip netns exec mounts)")
	assert.Equal(t, map[string]string{
		"gamma":        n.Addr(2),
		"beta.example": sortedJoin(n.Addr(1), n.Addr6(1), n.Addr6(2)),
	}, lookup(t, n, 1, "gamma", "beta.example"), "AddName adds a name, or addresses to a name")

	assert.ErrorContains(t, n.AddName("-bad", n.Addr(0)), "not a host name")
	assert.ErrorContains(t, n.AddName("ok", "nonsense"), "not an IP address")
	assert.ErrorContains(t, n.AddName("ok", "fe80::1%eth0"), "without a zone")
	assert.ErrorContains(t, n.AddName("ok"), "no address")

	dir := filepath.Dir(n.HostsFile(0))
	require.NoError(t, n.Close())
	_, err = os.Stat(dir)
	assert.ErrorIs(t, err, os.ErrNotExist, "Close deletes the hosts' files")
	assert.ErrorIs(t, n.AddName("late", n.Addr(0)), ErrClosed)
}

// TestNetworks: with two networks every host has eth0 and eth1, each with
// an address of its own subnet; a listener bound to host 0's address on
// network 1 is reached through it (from host 1's address on network 1),
// and one bound to network 0's refuses connections to network 1's; Cut
// takes both links down.
func TestNetworks(t *testing.T) {
	t.Parallel()
	n := newNet(t, 2, Options{IPv6: true, Networks: 2})
	require.Equal(t, 2, n.Networks())
	assert.NotEqual(t, n.SubnetOn(0), n.SubnetOn(1))
	assert.NotEqual(t, n.Subnet6On(0), n.Subnet6On(1))
	assert.Equal(t, n.Addr(1), n.AddrOn(0, 1))
	assert.Panics(t, func() { n.AddrOn(2, 0) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, fam := range []struct {
		name string
		addr func(k, i int) string
	}{{"ipv4", n.AddrOn}, {"ipv6", n.Addr6On}} {
		t.Run(fam.name, func(t *testing.T) {
			ln, err := n.Listen(0, "tcp", net.JoinHostPort(fam.addr(1, 0), "0"))
			require.NoError(t, err)
			defer ln.Close()
			_, portStr, _ := net.SplitHostPort(ln.Addr().String())
			c, err := n.DialContext(ctx, 1, "tcp", ln.Addr().String())
			require.NoError(t, err)
			defer c.Close()
			s, err := ln.Accept()
			require.NoError(t, err)
			defer s.Close()
			host, _, _ := net.SplitHostPort(s.RemoteAddr().String())
			assert.Equal(t, fam.addr(1, 1), host, "the connection came through network 1")
			roundTrip(t, c, s, "through eth1")

			_, err = n.DialContext(ctx, 1, "tcp", net.JoinHostPort(fam.addr(0, 0), portStr))
			assert.ErrorIs(t, err, syscall.ECONNREFUSED, "nothing listens on host 0's network-0 address")
		})
	}
	state := func(dev string) string {
		ls, err := links(n.t, n.Namespace(1), "link", "show", "dev", dev)
		require.NoError(t, err)
		require.Len(t, ls, 1)
		return ls[0].OperState
	}
	require.NoError(t, n.Cut(1))
	assert.NotEqual(t, "UP", state(Interface(0)))
	assert.NotEqual(t, "UP", state(Interface(1)))
	require.NoError(t, n.Restore(1))
	assert.Equal(t, "UP", state(Interface(0)))
	assert.Equal(t, "UP", state(Interface(1)))
}

// TestBlock: iptables DROP rules in host 2 make its connection to host 0
// silent in both directions (no data, EOF or RST before the read
// deadline) and new connections to it time out, while its link stays up
// and host 1 is unaffected; after Unblock, TCP retransmits what was
// written meanwhile.
func TestBlock(t *testing.T) {
	t.Parallel()
	if err := BlockAvailable(); err != nil {
		t.Skip(err)
	}
	n := newNet(t, 3, Options{IPv6: true})
	for _, fam := range []struct {
		name string
		addr func(int) string
	}{{"ipv4", n.Addr}, {"ipv6", n.Addr6}} {
		t.Run(fam.name, func(t *testing.T) {
			// Not parallel: both subtests block the same host.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			ln, err := n.Listen(0, "tcp", net.JoinHostPort(fam.addr(0), "0"))
			require.NoError(t, err)
			defer ln.Close()
			connect := func(from int) (srv, cli net.Conn) {
				cli, err := n.DialContext(ctx, from, "tcp", ln.Addr().String())
				require.NoError(t, err)
				t.Cleanup(func() { cli.Close() })
				srv, err = ln.Accept()
				require.NoError(t, err)
				t.Cleanup(func() { srv.Close() })
				return srv, cli
			}
			srv1, cli1 := connect(1)
			srv2, cli2 := connect(2)
			roundTrip(t, cli2, srv2, "ping 2")

			require.NoError(t, n.Block(2))
			require.NoError(t, n.Block(2), "blocking a blocked host")
			ls, err := links(n.t, n.Namespace(2), "link", "show", "dev", HostInterface)
			require.NoError(t, err)
			assert.Equal(t, "UP", ls[0].OperState, "the link stays up")
			const up, down = "sent up while blocked", "sent down while blocked"
			_, err = cli2.Write([]byte(up))
			require.NoError(t, err, "a write is buffered")
			_, err = srv2.Write([]byte(down))
			require.NoError(t, err, "a write is buffered")
			var wg sync.WaitGroup
			for _, c := range []net.Conn{srv2, cli2} {
				wg.Go(func() {
					require.NoError(t, c.SetReadDeadline(time.Now().Add(1500*time.Millisecond)))
					buf := make([]byte, 64)
					k, err := c.Read(buf)
					assert.Zero(t, k, "data through a blocked host: %q", buf[:k])
					assert.ErrorIs(t, err, os.ErrDeadlineExceeded, "no EOF, no RST: the read waits for its deadline")
				})
			}
			wg.Go(func() {
				ln2, err := n.Listen(2, "tcp", net.JoinHostPort(fam.addr(2), "0"))
				if !assert.NoError(t, err) {
					return
				}
				defer ln2.Close()
				dctx, cancel := context.WithTimeout(ctx, time.Second)
				defer cancel()
				c, err := n.DialContext(dctx, 1, "tcp", ln2.Addr().String())
				if c != nil {
					c.Close()
				}
				var ne net.Error
				if assert.ErrorAs(t, err, &ne, "a new connection to a blocked host") {
					assert.True(t, ne.Timeout(), "it times out (no refusal, no unreachable): %v", err)
				}
			})
			roundTrip(t, cli1, srv1, "host 1 is not blocked")
			roundTrip(t, srv1, cli1, "host 1 is still not blocked")
			wg.Wait()

			require.NoError(t, n.Unblock(2))
			require.NoError(t, n.Unblock(2), "unblocking a host that is not blocked")
			buf := make([]byte, len(up))
			require.NoError(t, srv2.SetReadDeadline(time.Now().Add(30*time.Second)))
			_, err = io.ReadFull(srv2, buf)
			require.NoError(t, err)
			assert.Equal(t, up, string(buf), "retransmitted after Unblock")
			buf = make([]byte, len(down))
			require.NoError(t, cli2.SetReadDeadline(time.Now().Add(30*time.Second)))
			_, err = io.ReadFull(cli2, buf)
			require.NoError(t, err)
			assert.Equal(t, down, string(buf), "retransmitted after Unblock")
		})
	}
	assert.Error(t, n.Block(3))
}
