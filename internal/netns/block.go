package netns

import (
	"errors"
	"fmt"
	"sync"
)

// firewall is what the Block probe found: the iptables and ip6tables
// commands.
type firewall struct {
	iptables, ip6tables string
}

// probeBlock checks, once per process, that Block can work here.
var probeBlock = sync.OnceValues(probeFirewall)

// BlockAvailable reports whether Net.Block can be used here: nil when
// Available holds, the iptables and ip6tables commands are installed, and
// a DROP rule can be added in a network namespace (the kernel has
// netfilter). Otherwise the error says what is missing, e.g. "netns: Block
// needs the iptables command (Debian: apt-get install iptables), which is
// not installed", ready for t.Skip. The check runs once per process.
func BlockAvailable() error {
	_, err := probeBlock()
	return err
}

func probeFirewall() (*firewall, error) {
	t, err := probe()
	if err != nil {
		return nil, err
	}
	fw := &firewall{iptables: findTool("iptables"), ip6tables: findTool("ip6tables")}
	for _, c := range []struct{ name, path string }{{"iptables", fw.iptables}, {"ip6tables", fw.ip6tables}} {
		if c.path == "" {
			return nil, fmt.Errorf("netns: Block needs the %s command (Debian: apt-get install iptables), which is not installed (not in PATH, /usr/sbin, /sbin, /usr/bin or /bin)", c.name)
		}
	}
	owner, err := selfOwner()
	if err != nil {
		return nil, err
	}
	ns := nsName(owner, nextSeq(), "probe", "fw")
	if _, err := run(t.ip, nil, "netns", "add", ns); err != nil {
		return nil, fmt.Errorf("netns: cannot create a network namespace: %w", err)
	}
	defer func() { _ = deleteNamespace(t, ns) }()
	for _, tool := range []string{fw.iptables, fw.ip6tables} {
		if _, err := run(t.ip, nil, "netns", "exec", ns, tool, "-w", "10", "-A", "INPUT", "-i", "eth+", "-j", "DROP"); err != nil {
			return nil, fmt.Errorf("netns: cannot add a firewall rule in a network namespace (does the kernel have netfilter?): %w", err)
		}
	}
	return fw, nil
}

// blockRules are the rules Block adds in a host's namespace, for iptables
// and ip6tables alike: everything in and out of the host's interfaces
// (eth0, eth1, ...; not loopback) is dropped.
var blockRules = [][]string{
	{"INPUT", "-i", "eth+", "-j", "DROP"},
	{"OUTPUT", "-o", "eth+", "-j", "DROP"},
}

// Block cuts host i off with a firewall instead of a cable: iptables and
// ip6tables DROP rules in host i's namespace drop every packet it receives
// on, or sends through, any of its interfaces (loopback is spared). As
// with Cut, the other hosts see nothing at all (no RST, no FIN, no ICMP):
// their connections to host i go silent and new ones time out. Unlike
// Cut, host i's links stay up (carrier, operstate UP), as when a firewall
// rule or a security group, not a cable, is what fails; host i's own
// packets are dropped inside its kernel. Blocking a blocked host does nothing. It needs iptables and ip6tables
// (BlockAvailable).
func (n *Net) Block(i int) error {
	fw, err := probeBlock()
	if err != nil {
		return err
	}
	if err := n.lock(i); err != nil {
		return err
	}
	defer n.mu.Unlock()
	if n.blocked[i] {
		return nil
	}
	for _, tool := range []string{fw.iptables, fw.ip6tables} {
		for _, rule := range blockRules {
			args := append([]string{"netns", "exec", n.hosts[i], tool, "-w", "10", "-I"}, rule...)
			if _, err := run(n.t.ip, nil, args...); err != nil {
				return fmt.Errorf("netns: blocking host %d: %w", i, err)
			}
		}
	}
	n.blocked[i] = true
	return nil
}

// Unblock removes the rules of Block from host i's namespace; TCP then
// retransmits what was dropped. Unblocking a host that is not blocked
// does nothing.
func (n *Net) Unblock(i int) error {
	if err := n.lock(i); err != nil {
		return err
	}
	defer n.mu.Unlock()
	if !n.blocked[i] {
		return nil
	}
	fw, err := probeBlock()
	if err != nil {
		return err
	}
	var errs []error
	for _, tool := range []string{fw.iptables, fw.ip6tables} {
		for _, rule := range blockRules {
			args := append([]string{"netns", "exec", n.hosts[i], tool, "-w", "10", "-D"}, rule...)
			if _, err := run(n.t.ip, nil, args...); err != nil {
				errs = append(errs, fmt.Errorf("netns: unblocking host %d: %w", i, err))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	delete(n.blocked, i)
	return nil
}
