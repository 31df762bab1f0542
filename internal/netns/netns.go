package netns

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// HostInterface is the name of every host's interface on network 0
// (besides loopback), e.g. for binding to a device; with several networks,
// Interface(k) names the others.
const HostInterface = "eth0"

// MaxHosts is the largest number of hosts of a Net.
const MaxHosts = 250

// ulaPrefix is the IPv6 /48 of every Net (a ULA, RFC 4193).
const ulaPrefix = "fd53:7463:6e65"

// ErrClosed is returned by the methods of a Net after Close.
var ErrClosed = errors.New("netns: the Net is closed")

// Options configure New.
type Options struct {
	// IPv6 gives every host an IPv6 ULA address (Addr6) besides its IPv4
	// address.
	IPv6 bool
	// DynamicNeighbors leaves neighbour resolution (ARP, NDP) to the
	// kernel instead of installing permanent entries: hosts behind a cut
	// link then become "no route to host" once their entries expire, as
	// on a LAN, instead of a silent black hole. See the package
	// documentation.
	DynamicNeighbors bool
	// MTU of every link (both ends of each veth pair and the bridge); 0
	// leaves the default, 1500.
	MTU int
	// Networks is the number of networks, 1 to MaxNetworks (0 means 1).
	// Every host has one interface on each (eth0, eth1, ...: Interface),
	// with an address of its own on each (AddrOn), so that a host can
	// be reached through several interfaces, as a machine on a data and
	// a management network can.
	Networks int
	// Names gives host i the host name Names[i] ("" or a missing entry:
	// no name). Every host's hosts file maps each name to that host's
	// addresses on network 0 (IPv4, and IPv6 with IPv6), so processes
	// started with Command reach host i as Names[i]. Names must be valid
	// host names (letters, digits, '-' and '_' in dot-separated labels)
	// and distinct. See the package documentation (Names).
	Names []string
}

// MaxNetworks is the largest Options.Networks.
const MaxNetworks = 8

// Net is a set of hosts, each a network namespace with one link to a
// common bridge. See the package documentation for the topology. Its
// methods are safe for concurrent use; Cut, Restore, Limit, Unlimit and
// Close run one at a time.
type Net struct {
	t        *tools
	opts     Options
	sw       string     // the switch namespace
	hosts    []string   // host namespaces
	nets     []*network // the networks, 0 first
	names    []string   // host names, "" for none; len(hosts)
	mu       sync.Mutex
	created  []string // namespaces that exist, in creation order
	closed   bool
	closeErr error
	limited  map[int]bool
	blocked  map[int]bool
}

// network is one of the Net's networks: a bridge in the switch and an
// interface in every host.
type network struct {
	v4, v6  []netip.Addr // v6 is nil without Options.IPv6
	macs    []string
	subnet4 netip.Prefix
	subnet6 netip.Prefix
}

// port is the name of the switch end of host i's link to network k: h<i>
// on network 0 (as before there were several), h<i>n<k> on the others.
func port(k, i int) string {
	if k == 0 {
		return "h" + strconv.Itoa(i)
	}
	return "h" + strconv.Itoa(i) + "n" + strconv.Itoa(k)
}

// Interface is the name of a host's interface on network k: eth<k>.
// HostInterface is network 0's.
func Interface(k int) string { return "eth" + strconv.Itoa(k) }

// bridgeOf is the name of network k's bridge in the switch: br<k>.
func bridgeOf(k int) string { return "br" + strconv.Itoa(k) }

// New creates a Net of hosts hosts (1 to MaxHosts) named after name (any
// string; t.Name() is fine) and returns when every link is up and every
// address usable. It first deletes what dead processes left behind
// (Sweep). On failure it deletes whatever it had created.
func New(name string, hosts int, opts Options) (*Net, error) {
	t, err := probe()
	if err != nil {
		return nil, err
	}
	if hosts < 1 || hosts > MaxHosts {
		return nil, fmt.Errorf("netns: %d hosts: want 1 to %d", hosts, MaxHosts)
	}
	if opts.MTU != 0 && (opts.MTU < 68 || opts.MTU > 65535 || opts.IPv6 && opts.MTU < 1280) {
		return nil, fmt.Errorf("netns: MTU %d out of range", opts.MTU)
	}
	if opts.Networks == 0 {
		opts.Networks = 1
	}
	if opts.Networks < 1 || opts.Networks > MaxNetworks {
		return nil, fmt.Errorf("netns: %d networks: want 1 to %d", opts.Networks, MaxNetworks)
	}
	names, err := checkNames(opts.Names, hosts)
	if err != nil {
		return nil, err
	}
	_, _ = Sweep() // best effort: a failure here must not stop this Net
	owner, err := selfOwner()
	if err != nil {
		return nil, err
	}
	seq := nextSeq()
	n := &Net{
		t:       t,
		opts:    opts,
		sw:      nsName(owner, seq, name, "sw"),
		names:   names,
		limited: map[int]bool{},
		blocked: map[int]bool{},
	}
	for i := range hosts {
		n.hosts = append(n.hosts, nsName(owner, seq, name, "h"+strconv.Itoa(i)))
	}
	for k := range opts.Networks {
		// Network k of this Net gets the subnet of index idx + k*4096, so
		// the networks of one Net never share one and those of a
		// process's Nets only after 4096 Nets.
		idx := uint16(uint32(os.Getpid())*251 + seq + uint32(k)<<12)
		x, y := byte(idx>>8), byte(idx)
		nw := &network{subnet4: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, x, y, 0}), 24)}
		if opts.IPv6 {
			nw.subnet6 = netip.MustParsePrefix(fmt.Sprintf("%s:%x::/64", ulaPrefix, idx))
		}
		for i := range hosts {
			nw.v4 = append(nw.v4, netip.AddrFrom4([4]byte{10, x, y, byte(i + 1)}))
			if opts.IPv6 {
				nw.v6 = append(nw.v6, netip.MustParseAddr(fmt.Sprintf("%s:%x::%x", ulaPrefix, idx, i+1)))
			}
			nw.macs = append(nw.macs, fmt.Sprintf("02:53:%02x:%02x:%02x:%02x", x, y, k, byte(i+1)))
		}
		n.nets = append(n.nets, nw)
	}
	if err := n.build(); err != nil {
		if cerr := n.Close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
		return nil, err
	}
	return n, nil
}

// build creates the namespaces, interfaces, addresses, neighbour entries
// and hosts files, and waits for the links to settle.
func (n *Net) build() error {
	for _, ns := range append([]string{n.sw}, n.hosts...) {
		if _, err := run(n.t.ip, nil, "netns", "add", ns); err != nil {
			return fmt.Errorf("netns: %w", err)
		}
		n.created = append(n.created, ns)
	}
	if err := n.writeEtc(); err != nil {
		return err
	}
	// Before any interface exists, so that new interfaces inherit the
	// defaults: no IPv6 at all on the switch (it is layer 2 only), no DAD
	// on the hosts (addresses usable at once, and again after a Restore).
	for _, s := range []struct{ ns, key, value string }{
		{n.sw, "net.ipv6.conf.all.disable_ipv6", "1"},
		{n.sw, "net.ipv6.conf.default.disable_ipv6", "1"},
	} {
		if err := n.sysctl(s.ns, s.key, s.value); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	for _, ns := range n.hosts {
		for _, key := range []string{"net.ipv6.conf.all.accept_dad", "net.ipv6.conf.default.accept_dad", "net.ipv6.conf.default.router_solicitations"} {
			err := n.sysctl(ns, key, "0")
			if err != nil && (n.opts.IPv6 || !errors.Is(err, fs.ErrNotExist)) {
				return err
			}
		}
	}
	mtu := ""
	if n.opts.MTU != 0 {
		mtu = " mtu " + strconv.Itoa(n.opts.MTU)
	}
	var sw []string
	for k, nw := range n.nets {
		br := bridgeOf(k)
		sw = append(sw,
			"link add "+br+mtu+" type bridge stp_state 0 mcast_snooping 0",
			"link set "+br+" up",
		)
		for i, ns := range n.hosts {
			p := port(k, i)
			sw = append(sw,
				"link add "+p+mtu+" type veth peer name "+Interface(k)+" netns "+ns+" address "+nw.macs[i]+mtu,
				"link set "+p+" master "+br,
				"link set "+p+" up",
			)
		}
	}
	if err := batch(n.t, n.sw, false, sw); err != nil {
		return fmt.Errorf("netns: building the switch: %w", err)
	}
	for i, ns := range n.hosts {
		cmds := []string{"link set lo up"}
		for k, nw := range n.nets {
			dev := Interface(k)
			cmds = append(cmds, "addr add "+nw.v4[i].String()+"/24 dev "+dev)
			if n.opts.IPv6 {
				cmds = append(cmds, "addr add "+nw.v6[i].String()+"/64 dev "+dev+" nodad")
			}
			cmds = append(cmds, "link set "+dev+" up")
			if n.opts.DynamicNeighbors {
				continue
			}
			for j := range n.hosts {
				if j == i {
					continue
				}
				cmds = append(cmds, "neigh replace "+nw.v4[j].String()+" lladdr "+nw.macs[j]+" dev "+dev+" nud permanent")
				if n.opts.IPv6 {
					cmds = append(cmds, "neigh replace "+nw.v6[j].String()+" lladdr "+nw.macs[j]+" dev "+dev+" nud permanent")
				}
			}
		}
		if err := batch(n.t, ns, false, cmds); err != nil {
			return fmt.Errorf("netns: configuring host %d: %w", i, err)
		}
	}
	for i := range n.hosts {
		if err := n.waitUp(i); err != nil {
			return err
		}
	}
	return nil
}

// waitUp waits until host i's links carry traffic: each of its interfaces
// has carrier and its addresses are not tentative, and each bridge port
// forwards.
func (n *Net) waitUp(i int) error {
	for k, nw := range n.nets {
		dev, p := Interface(k), port(k, i)
		err := waitFor(fmt.Sprintf("host %d's link %s (%s) to come up", i, dev, n.hosts[i]), func() (bool, string, error) {
			hs, err := links(n.t, n.hosts[i], "addr", "show", "dev", dev)
			if err != nil || len(hs) != 1 {
				return false, "", err
			}
			ps, err := links(n.t, n.sw, "-d", "link", "show", "dev", p)
			if err != nil || len(ps) != 1 {
				return false, "", err
			}
			h, sp := hs[0], ps[0]
			state := fmt.Sprintf("%s operstate %s, switch port %s operstate %s, port state %q", dev, h.OperState, p, sp.OperState, sp.portState())
			if h.OperState != "UP" || sp.OperState != "UP" || sp.portState() != "forwarding" {
				return false, state, nil
			}
			var v4, v6 bool
			for _, a := range h.AddrInfo {
				if a.Tentative || a.DADFailed {
					return false, state + ", address " + a.Local + " tentative or failed DAD", nil
				}
				v4 = v4 || a.Local == nw.v4[i].String()
				v6 = v6 || n.opts.IPv6 && a.Local == nw.v6[i].String()
			}
			if !v4 || n.opts.IPv6 && !v6 {
				return false, state + ", address missing", nil
			}
			return true, state, nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// Hosts is the number of hosts.
func (n *Net) Hosts() int { return len(n.hosts) }

// Networks is the number of networks (Options.Networks).
func (n *Net) Networks() int { return len(n.nets) }

// Addr is host i's IPv4 address on network 0, e.g. "10.36.17.2".
func (n *Net) Addr(i int) string { return n.AddrOn(0, i) }

// Addr6 is host i's IPv6 address on network 0 (without brackets), or ""
// without Options.IPv6.
func (n *Net) Addr6(i int) string { return n.Addr6On(0, i) }

// AddrOn is host i's IPv4 address on network k (its interface
// Interface(k)).
func (n *Net) AddrOn(k, i int) string { return n.network(k).v4[n.host(i)].String() }

// Addr6On is host i's IPv6 address on network k, or "" without
// Options.IPv6.
func (n *Net) Addr6On(k, i int) string {
	nw, i := n.network(k), n.host(i)
	if nw.v6 == nil {
		return ""
	}
	return nw.v6[i].String()
}

// Subnet is the IPv4 subnet of network 0, e.g. "10.36.17.0/24".
func (n *Net) Subnet() string { return n.SubnetOn(0) }

// Subnet6 is the IPv6 subnet of network 0, or "" without Options.IPv6.
func (n *Net) Subnet6() string { return n.Subnet6On(0) }

// SubnetOn is the IPv4 subnet of network k.
func (n *Net) SubnetOn(k int) string { return n.network(k).subnet4.String() }

// Subnet6On is the IPv6 subnet of network k, or "" without Options.IPv6.
func (n *Net) Subnet6On(k int) string {
	nw := n.network(k)
	if !nw.subnet6.IsValid() {
		return ""
	}
	return nw.subnet6.String()
}

// Name is host i's host name (Options.Names), or "" if it has none.
func (n *Net) Name(i int) string { return n.names[n.host(i)] }

// network checks a network index; an index out of range is a programming
// error.
func (n *Net) network(k int) *network {
	if k < 0 || k >= len(n.nets) {
		panic(fmt.Sprintf("netns: network %d of a Net of %d networks", k, len(n.nets)))
	}
	return n.nets[k]
}

// Namespace is the name of host i's network namespace, as ip netns knows
// it.
func (n *Net) Namespace(i int) string { return n.hosts[n.host(i)] }

// SwitchNamespace is the name of the namespace that holds the bridges.
func (n *Net) SwitchNamespace() string { return n.sw }

// Namespaces lists every namespace of the Net: the hosts', then the
// switch's.
func (n *Net) Namespaces() []string { return append(slices.Clone(n.hosts), n.sw) }

// host checks a host index; an index out of range is a programming error.
func (n *Net) host(i int) int {
	if i < 0 || i >= len(n.hosts) {
		panic(fmt.Sprintf("netns: host %d of a Net of %d hosts", i, len(n.hosts)))
	}
	return i
}

// checkHost is host for methods that return errors.
func (n *Net) checkHost(i int) error {
	if i < 0 || i >= len(n.hosts) {
		return fmt.Errorf("netns: host %d of a Net of %d hosts", i, len(n.hosts))
	}
	return nil
}

// Command returns a command that runs name with args in host i's
// namespace, through "ip netns exec": ip joins the namespace (and mounts a
// /sys that shows it) and then execs name, so the process started is name
// itself (its pid, its signals). Set Env, Stdout and the rest as usual;
// the environment passes through ip unchanged. Nothing stops the process
// when the Net is closed.
func (n *Net) Command(i int, name string, args ...string) *exec.Cmd {
	return n.CommandContext(context.Background(), i, name, args...)
}

// CommandContext is Command with a context that kills the process, as
// exec.CommandContext.
func (n *Net) CommandContext(ctx context.Context, i int, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, n.t.ip, append([]string{"netns", "exec", "", name}, args...)...)
	if err := n.checkHost(i); err != nil {
		cmd.Err = err
		return cmd
	}
	cmd.Args[3] = n.hosts[i]
	return cmd
}

// SelfCommand returns a command that runs the current executable (a test
// binary, typically, with args such as "-test.run=^TestX$") in host i's
// namespace: Command with os.Executable.
func (n *Net) SelfCommand(i int, args ...string) *exec.Cmd {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	return n.Command(i, exe, args...)
}

// Do runs fn on an OS thread in host i's network namespace and returns its
// error. Sockets that fn creates belong to that namespace for their whole
// life, wherever they are used afterwards. Only fn's own goroutine is in
// the namespace: goroutines it starts are not. The thread is discarded
// afterwards.
func (n *Net) Do(i int, fn func() error) error {
	if err := n.checkHost(i); err != nil {
		return err
	}
	if n.isClosed() {
		return ErrClosed
	}
	return doInPath(filepath.Join(n.t.dir, n.hosts[i]), fn)
}

// Listen is net.Listen in host i's namespace.
func (n *Net) Listen(i int, network, address string) (net.Listener, error) {
	var ln net.Listener
	err := n.Do(i, func() (err error) {
		ln, err = net.Listen(network, address)
		return err
	})
	return ln, err
}

// DialContext is net.Dialer.DialContext from host i's namespace. The
// address should be numeric: a name would be resolved inside the
// namespace, where there is no DNS server.
func (n *Net) DialContext(ctx context.Context, i int, network, address string) (net.Conn, error) {
	var c net.Conn
	err := n.Do(i, func() (err error) {
		var d net.Dialer
		c, err = d.DialContext(ctx, network, address)
		return err
	})
	return c, err
}

// Sysctl sets a sysctl (dotted name, e.g. "net.ipv4.tcp_keepalive_time")
// in host i's namespace; only the net.* ones are per namespace.
func (n *Net) Sysctl(i int, key, value string) error {
	if err := n.checkHost(i); err != nil {
		return err
	}
	if n.isClosed() {
		return ErrClosed
	}
	return n.sysctl(n.hosts[i], key, value)
}

func (n *Net) sysctl(ns, key, value string) error {
	path := "/proc/sys/" + strings.ReplaceAll(key, ".", "/")
	err := doInPath(filepath.Join(n.t.dir, ns), func() error {
		return os.WriteFile(path, []byte(value), 0o644)
	})
	if err != nil {
		return fmt.Errorf("netns: sysctl %s=%s in %s: %w", key, value, ns, err)
	}
	return nil
}

func (n *Net) isClosed() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.closed
}

// lock takes the Net's lock for an operation on host i, checking i and
// that the Net is open.
func (n *Net) lock(i int) error {
	if err := n.checkHost(i); err != nil {
		return err
	}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return ErrClosed
	}
	return nil
}

// Cut takes host i's links down: it sets the bridge-side end of each of
// the host's veth pairs down (one per network), so that everything host i
// sends and everything sent to it is dropped without a trace (no RST, FIN
// or ICMP; see the package documentation). It returns once every
// interface of host i has lost carrier. Cutting a cut link does nothing.
func (n *Net) Cut(i int) error {
	if err := n.lock(i); err != nil {
		return err
	}
	defer n.mu.Unlock()
	for k := range n.nets {
		if _, err := run(n.t.ip, nil, "-n", n.sw, "link", "set", "dev", port(k, i), "down"); err != nil {
			return fmt.Errorf("netns: cutting host %d: %w", i, err)
		}
	}
	for k := range n.nets {
		dev := Interface(k)
		err := waitFor(fmt.Sprintf("host %d's %s to lose carrier", i, dev), func() (bool, string, error) {
			hs, err := links(n.t, n.hosts[i], "link", "show", "dev", dev)
			if err != nil || len(hs) != 1 {
				return false, "", err
			}
			return hs[0].OperState != "UP", "operstate " + hs[0].OperState, nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// Restore brings host i's links back up after Cut and returns once they
// carry traffic again. Restoring links that are up does nothing.
func (n *Net) Restore(i int) error {
	if err := n.lock(i); err != nil {
		return err
	}
	defer n.mu.Unlock()
	for k := range n.nets {
		if _, err := run(n.t.ip, nil, "-n", n.sw, "link", "set", "dev", port(k, i), "up"); err != nil {
			return fmt.Errorf("netns: restoring host %d: %w", i, err)
		}
	}
	return n.waitUp(i)
}

// Limit caps host i's links at rate, in tc's syntax ("1gbit", "100mbit",
// "12.5mbps"; see ParseRate), in each direction: a tbf qdisc on each of
// host i's interfaces (eth0, ...) shapes what it sends, one on each switch
// port (h<i>, ...) shapes what it receives. Calling it again changes the
// rate. It needs the tc command.
func (n *Net) Limit(i int, rate string) error {
	bits, err := ParseRate(rate)
	if err != nil {
		return err
	}
	if n.t.tc == "" {
		return errors.New("netns: Limit needs the tc command (iproute2), which is not installed")
	}
	if err := n.lock(i); err != nil {
		return err
	}
	defer n.mu.Unlock()
	burst := max(bits/8/100, 16<<10) // 10 ms at rate
	for _, q := range n.qdiscs(i) {
		if _, err := run(n.t.tc, nil, "-n", q.ns, "qdisc", "replace", "dev", q.dev, "root",
			"tbf", "rate", strconv.FormatUint(bits, 10)+"bit", "burst", strconv.FormatUint(burst, 10), "latency", "50ms"); err != nil {
			return fmt.Errorf("netns: limiting host %d: %w", i, err)
		}
	}
	n.limited[i] = true
	return nil
}

// Unlimit removes the rate limit of host i's links, if any.
func (n *Net) Unlimit(i int) error {
	if err := n.lock(i); err != nil {
		return err
	}
	defer n.mu.Unlock()
	if !n.limited[i] {
		return nil
	}
	for _, q := range n.qdiscs(i) {
		if _, err := run(n.t.tc, nil, "-n", q.ns, "qdisc", "del", "dev", q.dev, "root"); err != nil {
			return fmt.Errorf("netns: unlimiting host %d: %w", i, err)
		}
	}
	delete(n.limited, i)
	return nil
}

// qdiscs are the two ends of each of host i's links: its egress and its
// ingress.
func (n *Net) qdiscs(i int) []struct{ ns, dev string } {
	var qs []struct{ ns, dev string }
	for k := range n.nets {
		qs = append(qs, struct{ ns, dev string }{n.hosts[i], Interface(k)}, struct{ ns, dev string }{n.sw, port(k, i)})
	}
	return qs
}

// Close deletes every interface and namespace of the Net, and the hosts'
// files under /etc/netns. It is idempotent: later calls return the first
// call's result. Processes still running in a host's namespace are not
// stopped; they are left with loopback only (and the hosts file they had).
func (n *Net) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return n.closeErr
	}
	n.closed = true
	var errs []error
	// Hosts first: deleting a host's eth0 deletes its switch port too.
	for _, ns := range slices.Backward(n.created) {
		if err := deleteNamespace(n.t, ns); err != nil {
			errs = append(errs, err)
		}
	}
	n.created = nil
	n.closeErr = errors.Join(errs...)
	return n.closeErr
}
