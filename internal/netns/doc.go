// Package netns puts processes on separate "hosts" on one Linux machine:
// network namespaces joined by veth pairs to a bridge, so that tests and
// scripts can cut a host's link (packets vanish: no RST, no FIN, no ICMP)
// or firewall it off, cap its bandwidth with tc tbf, give it IPv6, a second
// interface and a host name, and let the processes on each side see a real
// network with real addresses and names.
//
// It needs root, the ip command of iproute2 (and tc for Net.Limit, iptables
// and ip6tables for Net.Block), a writable /etc, and a kernel with network
// namespaces, veth and bridge support. Available reports what is missing,
// in words a test can hand to t.Skip (BlockAvailable does the same for
// Block):
//
//	if err := netns.Available(); err != nil {
//		t.Skip(err)
//	}
//	n, err := netns.New(t.Name(), 4, netns.Options{IPv6: true, Names: []string{"node0", "node1", "node2", "node3"}})
//	if err != nil {
//		t.Fatal(err)
//	}
//	t.Cleanup(func() { _ = n.Close() })
//
// # Topology
//
// A Net of H hosts is H+1 namespaces: one per host and a "switch" holding a
// bridge (br0, STP off, multicast snooping off, IPv6 disabled). Host i has
// loopback (up) and one interface, eth0 (HostInterface), the end of a veth
// pair whose other end, h<i>, is a port of the bridge:
//
//	host 0            host 1                  host H-1
//	 lo, eth0          lo, eth0                lo, eth0
//	   |                 |                        |
//	   h0 ------------- h1 ---- ... ---------- h<H-1>     (switch: br0)
//
// With Options.Networks = K > 1 there are K such networks, each a bridge
// br<k> in the switch: host i then has eth0 to eth<K-1> (Interface(k)), one
// on each, with switch ports h<i> (network 0) and h<i>n<k>, and an address
// of network k's own subnet on each (AddrOn): a host reachable through
// several interfaces, as a machine on a data and a management network.
// Cut, Restore, Limit and Block act on all of a host's links.
//
// The interfaces are created directly in their namespaces, so nothing is
// ever added to the namespace of the calling process, and the short names
// (eth<k>, h<i>, br<k>) cannot collide with those of other Nets.
//
// Namespace names are
//
//	stnet-<pid>.<start>-<seq>-<name>-<role>
//
// where pid and start identify the creating process (its start time in
// clock ticks since boot, from /proc/<pid>/stat, so that a reused pid is not
// mistaken for the owner), seq counts the Nets of that process, name is the
// name given to New with every character outside [A-Za-z0-9_.] replaced by
// '_' (at most 32 of them), and role is h<i> for host i or sw for the
// switch. Names are unique among live processes.
//
// # Addressing
//
// Each network of a Net has a /24 in 10.0.0.0/8 and, with Options.IPv6, a
// /64 in the ULA prefix fd53:7463:6e65::/48; host i gets address i+1 in
// both (10.X.Y.(i+1)/24, fd53:7463:6e65:XXYY::(i+1)/64). The subnet is
// derived from the pid, seq and network, so it differs between the
// networks of a Net, between the Nets of one process and usually between
// processes; since every Net is a closed world (its namespaces reach
// nothing else) a collision between processes would be harmless anyway, it
// only keeps logs and captures unambiguous. The hosts have no default
// route.
//
// IPv6 addresses are added with nodad and duplicate address detection is
// off in the host namespaces (accept_dad=0, set before eth0 exists, so that
// the link-local address is not tentative either), so an address is usable
// as soon as New returns and again as soon as Restore returns. Host MACs
// are fixed (02:53:X:Y:k:i+1 on network k) and, unless Options.DynamicNeighbors is set,
// every host has permanent neighbour entries (ARP and NDP) for every other
// host: no neighbour resolution ever happens, so a cut link is a pure black
// hole, as a link cut somewhere beyond the first hop. With dynamic
// neighbours it behaves like a LAN instead: once the neighbour entry of a
// cut host expires (new connections: after about 3 s of failed ARP), the
// kernel reports "no route to host" (EHOSTUNREACH) to connections that try
// to send to it.
//
// New returns when every link is up, every bridge port forwards and no
// address is tentative; it polls for that with a deadline rather than
// sleeping. Sysctls in the namespaces are the kernel's defaults for a new
// namespace (not the values of the caller's namespace); Net.Sysctl sets
// one.
//
// # Names
//
// Every host has a hosts file of its own, HostsFile(i), kept in
// EtcDir/<namespace>/hosts, which "ip netns exec" (and so Command)
// bind-mounts over /etc/hosts of the process it starts; a copy of the
// system's nsswitch.conf beside it looks host names up in that file only.
// So a process on a host resolves exactly the names the Net gives it, at
// once, and a name it does not give is "no such host" (a *net.DNSError
// with IsNotFound, as a DNS server's NXDOMAIN), never a query to a DNS
// server it cannot reach. New writes localhost and, for each host with a
// name in Options.Names, that name with the host's network-0 addresses
// (IPv4, and IPv6 with Options.IPv6): every host reaches host i as
// Names[i]. AddName adds a name later, with any addresses (an AAAA-only
// name, a name for a second interface, or one that appears after its
// users started, as in a cluster whose DNS lags its pods): it appends to
// every hosts file in one write, so that the mounted files (the same
// inodes) show it to running processes at their next lookup. The calling
// process's own /etc/hosts is never touched, and Do, Listen and DialContext,
// which change only the network namespace of a thread, still see it.
//
// # Running things on a host
//
// Net.Command (and CommandContext, SelfCommand for the running test
// binary) builds an exec.Cmd that runs "ip netns exec <ns> prog args...";
// ip enters the namespace and execs the program, so the process's pid is
// the program's and signals reach it directly. Net.Listen, Net.DialContext
// and Net.Do create sockets in a host's namespace from the calling process
// itself (on a dedicated OS thread that enters the namespace and is then
// discarded): a socket stays in the namespace it was created in, so a test
// can hold both ends of a connection between two hosts.
//
// # Cutting, blocking and shaping
//
// Net.Cut(i) sets the bridge-side end h<i> down, like a cable pulled at the
// switch. Host i keeps its addresses and routes (eth0 loses carrier:
// NO-CARRIER, operstate DOWN; routes are flagged linkdown but still used);
// everything it sends is dropped by its own eth0 without an error to the
// sender, and what the other hosts send to it reaches the bridge and is
// dropped there. No endpoint receives an
// RST, a FIN or an ICMP error: established connections simply hear
// nothing (reads block until their deadline, writes are buffered and
// retransmitted), and new connections time out. Net.Restore(i) sets h<i>
// up again and returns once traffic flows; TCP then retransmits what was
// lost.
//
// Net.Block(i) cuts host i off with a firewall instead: iptables and
// ip6tables rules in its namespace DROP everything in and out of its
// interfaces (not loopback). The other hosts see the same silence as after
// a Cut, while host i's links stay up, as when a firewall rule or a
// security group fails rather than a cable. Net.Unblock(i) deletes the
// rules.
//
// Net.Limit(i, rate) installs a tc tbf qdisc of that rate on both ends of
// host i's link: on eth0 in host i (what host i sends) and on h<i> in the
// switch (what the bridge delivers to host i). Each direction of the link
// is therefore capped separately at rate (full duplex); traffic between two
// limited hosts is capped at the smaller of the two rates. The burst is
// 10 ms of traffic at rate (at least 16 KiB), and the queue holds 50 ms
// more (tbf latency 50ms), beyond which packets are dropped. Shaping is
// accurate: one TCP stream between two hosts limited at "1gbit" measured
// 0.96 Gbit/s on a 2-vCPU machine (unlimited: about 18 Gbit/s). Net.Unlimit
// removes both qdiscs.
//
// # Cleanup
//
// Net.Close deletes every interface of the Net (so that even a process
// still running in one of its namespaces loses its link), then every
// namespace and the hosts' files under EtcDir; it is idempotent. It does not kill processes: a namespace with
// a process still in it lives on, nameless and with only loopback, until
// that process exits. Namespaces left behind by a process that died before
// Close (its pid gone, or reused by a process started at another time) are
// deleted by Sweep, which New calls first, with their files under EtcDir.
//
// Sweep assumes it sees the same /proc (pid namespace) as the processes
// that created the namespaces, which is the case for test runs on one
// machine or in one container.
package netns
