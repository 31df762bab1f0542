package netns

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Prefix starts the name of every namespace this package creates (see the
// package documentation for the whole name); Sweep deletes only names with
// it.
const Prefix = "stnet-"

// Polling of kernel state that settles asynchronously (carrier, bridge port
// state, tentative addresses).
const (
	settleTimeout = 20 * time.Second
	pollInterval  = 10 * time.Millisecond
)

// tools is what the probe found: where ip and tc are and where ip keeps its
// named namespaces.
type tools struct {
	ip  string
	tc  string // "" when tc is not installed
	dir string // NETNS_RUN_DIR of ip: /run/netns or /var/run/netns
}

// probe checks, once per process, that namespaces can be used here.
var probe = sync.OnceValues(probeTools)

// Available reports whether network namespaces can be used here: nil when
// the process runs on Linux as root, the ip command of iproute2 is
// installed, a namespace, a veth pair and a bridge can be created, a
// directory for its files made under EtcDir, and a command run in the
// namespace. Otherwise the error says what is missing,
// e.g. "netns: needs root (running as uid 1000)" or "netns: the ip command
// (iproute2) is not installed (...)", ready for t.Skip. The check runs once
// per process; later calls return its result. tc is not required (only
// Net.Limit needs it, and says so).
func Available() error {
	_, err := probe()
	return err
}

func probeTools() (*tools, error) {
	if runtime.GOOS != "linux" {
		return nil, fmt.Errorf("netns: network namespaces need Linux (this is %s)", runtime.GOOS)
	}
	if uid := os.Geteuid(); uid != 0 {
		return nil, fmt.Errorf("netns: needs root (running as uid %d)", uid)
	}
	t := &tools{ip: findTool("ip"), tc: findTool("tc")}
	if t.ip == "" {
		return nil, errors.New("netns: the ip command (iproute2) is not installed (not in PATH, /usr/sbin, /sbin, /usr/bin or /bin)")
	}
	owner, err := selfOwner()
	if err != nil {
		return nil, err
	}
	ns := nsName(owner, nextSeq(), "probe", "p")
	if _, err := run(t.ip, nil, "netns", "add", ns); err != nil {
		return nil, fmt.Errorf("netns: cannot create a network namespace: %w", err)
	}
	defer func() { _ = deleteNamespace(t, ns) }()
	for _, dir := range []string{"/run/netns", "/var/run/netns"} {
		if _, err := os.Stat(filepath.Join(dir, ns)); err == nil {
			t.dir = dir
			break
		}
	}
	if t.dir == "" {
		return nil, fmt.Errorf("netns: ip netns add %s succeeded but neither /run/netns/%[1]s nor /var/run/netns/%[1]s exists", ns)
	}
	if err := os.MkdirAll(filepath.Join(EtcDir, ns), 0o755); err != nil {
		return nil, fmt.Errorf("netns: cannot create the directory of a namespace's hosts file: %w", err)
	}
	if _, err := run(t.ip, nil, "netns", "exec", ns, t.ip, "link", "show", "lo"); err != nil {
		return nil, fmt.Errorf("netns: cannot run a command in a network namespace: %w", err)
	}
	if err := doInPath(filepath.Join(t.dir, ns), func() error { return nil }); err != nil {
		return nil, fmt.Errorf("netns: cannot enter a network namespace: %w", err)
	}
	if _, err := run(t.ip, nil, "-n", ns, "link", "add", "v0", "type", "veth", "peer", "name", "v1"); err != nil {
		return nil, fmt.Errorf("netns: cannot create a veth pair (is the veth kernel module available?): %w", err)
	}
	if _, err := run(t.ip, nil, "-n", ns, "link", "add", "b0", "type", "bridge"); err != nil {
		return nil, fmt.Errorf("netns: cannot create a bridge (is the bridge kernel module available?): %w", err)
	}
	return t, nil
}

// findTool looks for an iproute2 command in PATH and then in the sbin and
// bin directories, which are often not in a non-login PATH.
func findTool(name string) string {
	if p, err := exec.LookPath(name); err == nil {
		if abs, err := filepath.Abs(p); err == nil {
			return abs
		}
		return p
	}
	for _, dir := range []string{"/usr/sbin", "/sbin", "/usr/bin", "/bin"} {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// run runs a command (stdin from the given bytes, or nothing) and returns
// its standard output; a failure carries the command line and its output.
func run(path string, stdin []byte, args ...string) ([]byte, error) {
	cmd := exec.Command(path, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String() + stdout.String())
		cmdline := filepath.Base(path) + " " + strings.Join(args, " ")
		if stdin != nil {
			cmdline += " <<< " + strconv.Quote(strings.TrimSpace(string(stdin)))
		}
		if msg == "" {
			return nil, fmt.Errorf("%s: %w", cmdline, err)
		}
		return nil, fmt.Errorf("%s: %w: %s", cmdline, err, msg)
	}
	return stdout.Bytes(), nil
}

// batch runs ip commands, one a line, in namespace ns; it stops at the
// first that fails unless force is set.
func batch(t *tools, ns string, force bool, lines []string) error {
	args := []string{"-n", ns, "-batch", "-"}
	if force {
		args = append([]string{"-force"}, args...)
	}
	_, err := run(t.ip, []byte(strings.Join(lines, "\n")+"\n"), args...)
	return err
}

// ipLink is the part of ip -j link/addr output this package reads.
type ipLink struct {
	IfName    string   `json:"ifname"`
	Flags     []string `json:"flags"`
	OperState string   `json:"operstate"`
	LinkInfo  *struct {
		SlaveData *struct {
			State string `json:"state"`
		} `json:"info_slave_data"`
	} `json:"linkinfo"`
	AddrInfo []struct {
		Family    string `json:"family"`
		Local     string `json:"local"`
		Tentative bool   `json:"tentative"`
		DADFailed bool   `json:"dadfailed"`
	} `json:"addr_info"`
}

// portState is the bridge port state of a link (forwarding, disabled, ...).
func (l ipLink) portState() string {
	if l.LinkInfo == nil || l.LinkInfo.SlaveData == nil {
		return ""
	}
	return l.LinkInfo.SlaveData.State
}

// links runs ip -j with args in namespace ns and decodes the result.
func links(t *tools, ns string, args ...string) ([]ipLink, error) {
	out, err := run(t.ip, nil, append([]string{"-n", ns, "-j"}, args...)...)
	if err != nil {
		return nil, err
	}
	out = bytes.TrimSpace(out)
	if len(out) == 0 {
		return nil, nil
	}
	var ls []ipLink
	if err := json.Unmarshal(out, &ls); err != nil {
		return nil, fmt.Errorf("netns: ip -n %s -j %s: %w", ns, strings.Join(args, " "), err)
	}
	return ls, nil
}

// waitFor polls cond until it holds, fails or settleTimeout passes; state
// describes what cond saw last, for the timeout error.
func waitFor(what string, cond func() (ok bool, state string, err error)) error {
	deadline := time.Now().Add(settleTimeout)
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	for {
		ok, state, err := cond()
		if err != nil {
			return fmt.Errorf("netns: waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("netns: %s did not happen within %v (last state: %s)", what, settleTimeout, state)
		}
		<-ticker.C
	}
}

// Naming and ownership.

var seq atomic.Uint32

func nextSeq() uint32 { return seq.Add(1) }

// nsName is the name of a namespace: see the package documentation.
func nsName(owner string, seq uint32, name, role string) string {
	return Prefix + owner + "-" + strconv.FormatUint(uint64(seq), 10) + "-" + sanitize(name) + "-" + role
}

// sanitize keeps [A-Za-z0-9_.] of name, replaces everything else by '_',
// and cuts the result at 32 characters.
func sanitize(name string) string {
	var b strings.Builder
	for _, r := range name {
		if b.Len() == 32 {
			break
		}
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '.':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	if b.Len() == 0 {
		return "net"
	}
	return b.String()
}

// selfOwner is "<pid>.<start>" for this process.
func selfOwner() (string, error) {
	pid := os.Getpid()
	start, err := procStart(pid)
	if err != nil {
		return "", fmt.Errorf("netns: reading this process's start time: %w", err)
	}
	return strconv.Itoa(pid) + "." + strconv.FormatUint(start, 10), nil
}

// procStart is the start time of process pid in clock ticks after boot
// (field 22 of /proc/PID/stat).
func procStart(pid int) (uint64, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')') // the command name may hold spaces and parentheses
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(s[i+1:]) // fields 3, 4, ...
	if len(f) < 20 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	return strconv.ParseUint(f[22-3], 10, 64)
}

// parseOwner extracts the creator's pid and start time from a namespace
// name made by nsName.
func parseOwner(ns string) (pid int, start uint64, ok bool) {
	rest, found := strings.CutPrefix(ns, Prefix)
	if !found {
		return 0, 0, false
	}
	owner, _, found := strings.Cut(rest, "-")
	if !found {
		return 0, 0, false
	}
	p, s, found := strings.Cut(owner, ".")
	if !found {
		return 0, 0, false
	}
	pid, err := strconv.Atoi(p)
	if err != nil || pid <= 0 {
		return 0, 0, false
	}
	start, err = strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, 0, false
	}
	return pid, start, true
}

// ownerAlive reports whether the process that created a namespace still
// runs: a process with that pid exists and started at that time. When in
// doubt (an unreadable /proc entry) it says yes.
func ownerAlive(pid int, start uint64) bool {
	got, err := procStart(pid)
	if errors.Is(err, fs.ErrNotExist) {
		return false
	}
	if err != nil {
		return true
	}
	return got == start
}

// Sweep deletes the namespaces (and their interfaces and files under
// EtcDir) that Nets of dead processes left behind: those whose names start
// with Prefix and whose creator (the pid and start time in the name) no
// longer runs, as after a test binary was killed before its Close ran. It
// never touches the namespaces of a live process. It returns the names of
// the namespaces it deleted. New calls it, so a killed run is cleaned up by
// the next.
func Sweep() ([]string, error) {
	t, err := probe()
	if err != nil {
		return nil, err
	}
	out, err := run(t.ip, nil, "netns", "list")
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line) // "name (id: 3)" or "name"
		if len(f) == 0 || !strings.HasPrefix(f[0], Prefix) {
			continue
		}
		pid, start, ok := parseOwner(f[0])
		if !ok || ownerAlive(pid, start) {
			continue
		}
		if err := deleteNamespace(t, f[0]); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, f[0])
	}
	if err := sweepEtc(); err != nil {
		errs = append(errs, err)
	}
	return removed, errors.Join(errs...)
}

// deleteNamespace deletes every interface in ns but loopback (so that a
// process still in it loses its links: its namespace outlives the name),
// then the namespace. A namespace that is already gone is not an error.
func deleteNamespace(t *tools, ns string) error {
	path := filepath.Join(t.dir, ns)
	gone := func() bool {
		if t.dir == "" {
			return false
		}
		_, err := os.Stat(path)
		return errors.Is(err, fs.ErrNotExist)
	}
	ls, err := links(t, ns, "link", "show")
	if err != nil && !gone() {
		return fmt.Errorf("netns: listing the interfaces of %s: %w", ns, err)
	}
	var dels []string
	for _, l := range ls {
		if l.IfName != "lo" {
			dels = append(dels, "link del dev "+l.IfName)
		}
	}
	if len(dels) > 0 {
		// Forced: deleting one end of a veth pair deletes the other, which
		// may be listed here too.
		_ = batch(t, ns, true, dels)
		if ls, err := links(t, ns, "link", "show"); err == nil {
			for _, l := range ls {
				if l.IfName != "lo" {
					return fmt.Errorf("netns: interface %s in %s survived deletion", l.IfName, ns)
				}
			}
		}
	}
	if _, err := run(t.ip, nil, "netns", "del", ns); err != nil && !gone() {
		return fmt.Errorf("netns: deleting namespace %s: %w", ns, err)
	}
	return removeEtc(ns)
}
