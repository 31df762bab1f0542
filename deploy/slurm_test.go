// Package deploy_test runs the recipes of deploy/ that this machine can
// run: the Slurm batch script, under a stand-in srun that starts its tasks
// on this host or on network-namespace hosts (internal/netns). The
// manifests are validated by the separate module deploy/validate.
package deploy_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm/internal/netns"
)

const sbatchScript = "slurm/starbench.sbatch"

// fakeSrun stands in for srun: it starts SLURM_NTASKS copies of its
// command (after srun's options), task i with SLURM_PROCID=i, in the
// network namespace FAKE_NS_i when that is set, and fails when any task
// fails. It refuses to run when COBRE_TCP_RANK or COBRE_TCP_SIZE is set:
// the recipe must leave the rank and size to SLURM_PROCID and SLURM_NTASKS.
const fakeSrun = `#!/bin/bash
set -u
if [ -n "${COBRE_TCP_RANK:-}" ] || [ -n "${COBRE_TCP_SIZE:-}" ]; then
	echo "fake srun: COBRE_TCP_RANK or COBRE_TCP_SIZE is set" >&2; exit 90
fi
while [ $# -gt 0 ] && [[ $1 == --* ]]; do echo "srun option $1" >> "$FAKE_LOG"; shift; done
pids=()
for ((i = 0; i < SLURM_NTASKS; i++)); do
	ns=FAKE_NS_$i
	if [ -n "${!ns:-}" ]; then
		SLURM_PROCID=$i ip netns exec "${!ns}" "$@" &
	else
		SLURM_PROCID=$i "$@" &
	fi
	pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
exit $rc
`

// fakeScontrol stands in for "scontrol show hostnames LIST": it checks the
// list is SLURM_JOB_NODELIST and prints FAKE_NODES, one a line.
const fakeScontrol = `#!/bin/bash
if [ "$1 $2" != "show hostnames" ] || [ "$3" != "$SLURM_JOB_NODELIST" ]; then
	echo "fake scontrol: unexpected arguments: $*" >&2; exit 91
fi
for n in $FAKE_NODES; do echo "$n"; done
`

// sbatchOptions reads the #SBATCH lines of the script: option -> value.
// Only options sbatch has, written --name=value, are accepted.
func sbatchOptions(t *testing.T, path string) map[string]string {
	t.Helper()
	known := []string{"job-name", "ntasks", "ntasks-per-node", "cpus-per-task", "mem-per-cpu", "time", "output", "nodes", "partition", "account"}
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	opts := map[string]string{}
	line := regexp.MustCompile(`^#SBATCH --([a-z-]+)=(\S+)$`)
	inHeader := true
	for sc := bufio.NewScanner(f); sc.Scan(); {
		l := sc.Text()
		if !strings.HasPrefix(l, "#") {
			inHeader = false // sbatch stops reading #SBATCH at the first command
		}
		if !strings.HasPrefix(l, "#SBATCH") {
			continue
		}
		require.True(t, inHeader, "%s: %q comes after the first command: sbatch ignores it", path, l)
		m := line.FindStringSubmatch(l)
		require.NotNil(t, m, "%s: %q is not #SBATCH --option=value", path, l)
		require.True(t, slices.Contains(known, m[1]), "%s: unknown sbatch option --%s", path, m[1])
		opts[m[1]] = m[2]
	}
	return opts
}

func TestSlurmScriptOptions(t *testing.T) {
	opts := sbatchOptions(t, sbatchScript)
	assert.Equal(t, "4", opts["ntasks"], "a 4-rank job")
	assert.Regexp(t, `^\d+:\d\d:\d\d$`, opts["time"])
	out, err := exec.Command("bash", "-n", sbatchScript).CombinedOutput()
	require.NoError(t, err, "bash -n: %s", out)
	b, err := os.ReadFile(sbatchScript)
	require.NoError(t, err)
	for _, v := range []string{"COBRE_TCP_RANK=", "COBRE_TCP_SIZE="} {
		assert.NotContains(t, string(b), v, "the rank and size come from SLURM_PROCID and SLURM_NTASKS alone")
	}
}

var (
	built     sync.Mutex
	starbench string // the binary buildStarbench made, once built
)

// buildStarbench builds the static starbench the recipes run, once per
// test run.
func buildStarbench(t *testing.T) string {
	t.Helper()
	built.Lock()
	defer built.Unlock()
	if starbench != "" {
		return starbench
	}
	dir, err := os.MkdirTemp("", "starbench-slurm-")
	require.NoError(t, err)
	exe := filepath.Join(dir, "starbench")
	cmd := exec.Command("go", "build", "-trimpath", "-o", exe, "../cmd/starbench")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	starbench = exe
	return exe
}

func TestMain(m *testing.M) {
	code := m.Run()
	if starbench != "" {
		_ = os.RemoveAll(filepath.Dir(starbench))
	}
	os.Exit(code)
}

// runSbatch runs the batch script as Slurm would run it on the job's first
// node (SLURM_PROCID=0, the job's SLURM_NTASKS from #SBATCH --ntasks), with
// srun and scontrol stood in for, and returns its output.
func runSbatch(t *testing.T, dir, starbench, nodelist string, nodes []string, namespaces []string) string {
	t.Helper()
	ntasks, err := strconv.Atoi(sbatchOptions(t, sbatchScript)["ntasks"])
	require.NoError(t, err)
	bin := filepath.Join(dir, "bin")
	require.NoError(t, os.MkdirAll(bin, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(bin, "srun"), []byte(fakeSrun), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(bin, "scontrol"), []byte(fakeScontrol), 0o755))
	log := filepath.Join(dir, "srun.log")
	cmd := exec.Command("bash", sbatchScript, "--workloads", "allreduce-32B,barrier,allgatherv-cuts", "--repeats-scale", "0.1")
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "COBRE_") && !strings.HasPrefix(name, "SLURM_") && name != "PATH" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env,
		"PATH="+bin+":"+os.Getenv("PATH"),
		"STARBENCH="+starbench,
		"SLURM_JOB_ID=4242",
		"SLURM_PROCID=0",
		"SLURM_NTASKS="+strconv.Itoa(ntasks),
		"SLURM_JOB_NODELIST="+nodelist,
		"FAKE_NODES="+strings.Join(nodes, " "),
		"FAKE_LOG="+log,
		// Stray variables of the submitting shell, which sbatch passes on:
		// the script must not let them give every task rank 0, or bind
		// rank 0 to the loopback.
		"COBRE_TCP_RANK=0", "COBRE_TCP_SIZE="+strconv.Itoa(ntasks), "COBRE_TCP_BIND_ADDR=127.0.0.1",
	)
	for i, ns := range namespaces {
		cmd.Env = append(cmd.Env, fmt.Sprintf("FAKE_NS_%d=%s", i, ns))
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "the batch script failed: %s", stderr.String())
	opts, err := os.ReadFile(log)
	require.NoError(t, err)
	assert.Contains(t, string(opts), "srun option --kill-on-bad-exit=1")
	return string(out)
}

// checkResults asserts that rank 0 printed every workload's result, for a
// job of 4 ranks.
func checkResults(t *testing.T, out string) {
	t.Helper()
	for _, w := range []string{"allreduce-32B", "barrier", "allgatherv-cuts"} {
		assert.Regexp(t, regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(w)+`\s`), out, "results of %s", w)
	}
	assert.Contains(t, out, "ranks=4")
}

// TestSlurmScriptLocal runs the batch script with its four tasks on this
// host: the nodelist names this host alone.
func TestSlurmScriptLocal(t *testing.T) {
	dir := t.TempDir()
	out := runSbatch(t, dir, buildStarbench(t), "localhost", []string{"localhost"}, nil)
	checkResults(t, out)
}

// TestSlurmScriptHosts runs the batch script with each task on a host of
// its own (a network namespace whose /etc/hosts names the four nodes), as
// on a cluster of four nodes: rank 0 is reached by its node's name.
func TestSlurmScriptHosts(t *testing.T) {
	if err := netns.Available(); err != nil {
		t.Skip(err)
	}
	n, err := netns.New("slurm", 4, netns.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = n.Close() })
	nodes := []string{"node0", "node1", "node2", "node3"}
	var hosts strings.Builder
	hosts.WriteString("127.0.0.1 localhost\n")
	for i, name := range nodes {
		fmt.Fprintf(&hosts, "%s %s\n", n.Addr(i), name)
	}
	var namespaces []string
	for i := range nodes {
		ns := n.Namespace(i)
		namespaces = append(namespaces, ns)
		// ip netns exec bind-mounts /etc/netns/<ns>/hosts over /etc/hosts.
		etc := filepath.Join("/etc/netns", ns)
		require.NoError(t, os.MkdirAll(etc, 0o755))
		t.Cleanup(func() { _ = os.RemoveAll(etc) })
		require.NoError(t, os.WriteFile(filepath.Join(etc, "hosts"), []byte(hosts.String()), 0o644))
	}
	dir := t.TempDir()
	out := runSbatch(t, dir, buildStarbench(t), "node[0-3]", nodes, namespaces)
	checkResults(t, out)
}
