package netns

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/starcomm/starcomm/internal/hostname"
)

// EtcDir is where "ip netns exec" finds the files it bind-mounts over
// those of /etc for a namespace: EtcDir/<namespace>/hosts becomes
// /etc/hosts of the processes it starts.
const EtcDir = "/etc/netns"

// nsswitchPath is the system's name service switch configuration, which
// each host gets a copy of with hosts looked up in files only.
const nsswitchPath = "/etc/nsswitch.conf"

// checkNames validates Options.Names for a Net of hosts hosts and returns
// one name per host ("" for none).
func checkNames(names []string, hosts int) ([]string, error) {
	if len(names) > hosts {
		return nil, fmt.Errorf("netns: %d names for %d hosts", len(names), hosts)
	}
	out := make([]string, hosts)
	seen := map[string]int{}
	for i, name := range names {
		if name == "" {
			continue
		}
		if err := checkName(name); err != nil {
			return nil, fmt.Errorf("netns: name of host %d: %w", i, err)
		}
		key := strings.ToLower(strings.TrimSuffix(name, "."))
		if j, dup := seen[key]; dup {
			return nil, fmt.Errorf("netns: hosts %d and %d are both named %q", j, i, name)
		}
		seen[key] = i
		out[i] = name
	}
	return out, nil
}

// checkName reports whether name is a host name a hosts file can hold
// (see hostname.Check).
func checkName(name string) error { return hostname.Check(name) }

// HostsFile is the path of host i's hosts file, EtcDir/<namespace>/hosts:
// what processes started with Command (through "ip netns exec") see as
// /etc/hosts. Its inode stays the same for the Net's life (AddName
// appends to it), so a process that has it open or mounted sees every
// change.
func (n *Net) HostsFile(i int) string {
	return filepath.Join(EtcDir, n.hosts[n.host(i)], "hosts")
}

// writeEtc writes each host's hosts file and nsswitch.conf.
func (n *Net) writeEtc() error {
	nss, err := nsswitch()
	if err != nil {
		return err
	}
	for i, ns := range n.hosts {
		dir := filepath.Join(EtcDir, ns)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("netns: host %d's files: %w", i, err)
		}
		if err := os.WriteFile(filepath.Join(dir, "hosts"), n.hosts0(i), 0o644); err != nil {
			return fmt.Errorf("netns: host %d's hosts file: %w", i, err)
		}
		if nss != nil {
			if err := os.WriteFile(filepath.Join(dir, "nsswitch.conf"), nss, 0o644); err != nil {
				return fmt.Errorf("netns: host %d's nsswitch.conf: %w", i, err)
			}
		}
	}
	return nil
}

// hosts0 is host i's hosts file as New writes it: loopback, then every
// named host's addresses on network 0.
func (n *Net) hosts0(i int) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# /etc/hosts of host %d (%s), written by netns.New\n", i, n.hosts[i])
	b.WriteString("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
	for j, name := range n.names {
		if name == "" {
			continue
		}
		fmt.Fprintf(&b, "%s\t%s\n", n.nets[0].v4[j], name)
		if n.opts.IPv6 {
			fmt.Fprintf(&b, "%s\t%s\n", n.nets[0].v6[j], name)
		}
	}
	return b.Bytes()
}

// nsswitch returns the system's nsswitch.conf with its hosts line replaced
// by "hosts: files", or nil when the system has none (ip netns exec can
// only mount over a file that exists).
func nsswitch() ([]byte, error) {
	data, err := os.ReadFile(nsswitchPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("netns: %w", err)
	}
	var b bytes.Buffer
	b.WriteString("# the system's nsswitch.conf with host names looked up in /etc/hosts only, written by netns.New\n")
	replaced := false
	for line := range strings.Lines(string(data)) {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], "hosts:") {
			if !replaced {
				b.WriteString("hosts: files\n")
			}
			replaced = true
			continue
		}
		b.WriteString(line)
		if !strings.HasSuffix(line, "\n") {
			b.WriteByte('\n')
		}
	}
	if !replaced {
		b.WriteString("hosts: files\n")
	}
	return b.Bytes(), nil
}

// AddName adds name, resolving to addrs (IPv4 or IPv6 addresses, without
// zones), to every host's hosts file: a line per address appended in one
// write, so that a process that reads the file at that moment sees the
// old content or the new, never half a line. Processes see it at their
// next lookup: glibc reads the file at every lookup, Go's resolver when
// the file's modification time has changed, at most every 5 s. A name
// that is already there keeps its old addresses too (resolvers return all
// of them).
func (n *Net) AddName(name string, addrs ...string) error {
	if err := checkName(name); err != nil {
		return fmt.Errorf("netns: AddName: %w", err)
	}
	if len(addrs) == 0 {
		return fmt.Errorf("netns: AddName %q: no address", name)
	}
	var b bytes.Buffer
	for _, a := range addrs {
		ip, err := netip.ParseAddr(a)
		if err != nil || ip.Zone() != "" {
			return fmt.Errorf("netns: AddName %q: %q is not an IP address without a zone", name, a)
		}
		fmt.Fprintf(&b, "%s\t%s\n", ip, name)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return ErrClosed
	}
	for i := range n.hosts {
		f, err := os.OpenFile(n.HostsFile(i), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return fmt.Errorf("netns: AddName %q: %w", name, err)
		}
		_, err = f.Write(b.Bytes())
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("netns: AddName %q: %w", name, err)
		}
	}
	return nil
}

// removeEtc deletes a namespace's files under EtcDir, if any.
func removeEtc(ns string) error {
	if err := os.RemoveAll(filepath.Join(EtcDir, ns)); err != nil {
		return fmt.Errorf("netns: deleting the files of %s: %w", ns, err)
	}
	return nil
}

// sweepEtc deletes the directories under EtcDir that Nets of dead
// processes left behind (their namespaces already gone).
func sweepEtc() error {
	ents, err := os.ReadDir(EtcDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("netns: %w", err)
	}
	var errs []error
	for _, e := range ents {
		pid, start, ok := parseOwner(e.Name())
		if !ok || !e.IsDir() || ownerAlive(pid, start) {
			continue
		}
		if err := removeEtc(e.Name()); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
