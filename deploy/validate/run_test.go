package validate

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// quickArgs are the starbench arguments the runs add to the recipe's own,
// so that a run takes seconds.
var quickArgs = []string{"--workloads", "allreduce-32B,barrier,allgatherv-cuts", "--repeats-scale", "0.1"}

// rank is one process of a recipe's job: its environment and arguments.
type rank struct {
	env  map[string]string
	args []string
}

// canIsolate says why a job cannot run in a network namespace of its own
// here, or "".
func canIsolate() string {
	if os.Geteuid() != 0 {
		return "needs root (unshare --net --mount)"
	}
	for _, tool := range []string{"unshare", "ip", "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			return "needs " + tool + ": " + err.Error()
		}
	}
	return ""
}

// runIsolated runs the ranks of a job, each a starbench process, together
// in a new network namespace (its own loopback: the recipe's port is free)
// and mount namespace in which /etc/hosts maps every name in names to
// 127.0.0.1, as the cluster's DNS would map them to the pods or
// containers. It returns rank 0's standard output.
func runIsolated(t *testing.T, starbench string, ranks []rank, names []string) string {
	t.Helper()
	dir := t.TempDir()
	hosts := "127.0.0.1 localhost " + strings.Join(names, " ") + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "hosts"), []byte(hosts), 0o644))
	var script strings.Builder
	fmt.Fprintf(&script, "set -u\nip link set lo up\nmount --bind %q /etc/hosts\npids=()\n", filepath.Join(dir, "hosts"))
	for i, r := range ranks {
		script.WriteString("env -i")
		keys := make([]string, 0, len(r.env))
		for k := range r.env {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(&script, " %q", k+"="+r.env[k])
		}
		fmt.Fprintf(&script, " %q", starbench)
		for _, a := range r.args {
			fmt.Fprintf(&script, " %q", a)
		}
		fmt.Fprintf(&script, " > %q 2> %q &\npids+=($!)\n", filepath.Join(dir, fmt.Sprintf("out%d", i)), filepath.Join(dir, fmt.Sprintf("err%d", i)))
	}
	script.WriteString("rc=0\nfor p in \"${pids[@]}\"; do wait \"$p\" || rc=1; done\nexit $rc\n")
	cmd := exec.Command("unshare", "--net", "--mount", "--propagation", "private", "bash", "-c", script.String())
	out, err := cmd.CombinedOutput()
	if err != nil {
		var logs strings.Builder
		for i := range ranks {
			b, _ := os.ReadFile(filepath.Join(dir, fmt.Sprintf("err%d", i)))
			fmt.Fprintf(&logs, "rank %d: %s\n", i, b)
		}
		t.Fatalf("job failed: %v: %s\n%s", err, out, logs.String())
	}
	b, err := os.ReadFile(filepath.Join(dir, "out0"))
	require.NoError(t, err)
	return string(b)
}

// checkResults asserts that rank 0 printed every workload's result for a
// job of size ranks.
func checkResults(t *testing.T, out string, size int) {
	t.Helper()
	for _, w := range []string{"allreduce-32B", "barrier", "allgatherv-cuts"} {
		assert.Regexp(t, regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(w)+`\s`), out, "results of %s", w)
	}
	assert.Contains(t, out, "ranks="+strconv.Itoa(size))
}

// TestKubernetesJobRuns runs the Indexed Job's four pods as processes with
// the manifest's environment and arguments plus what Kubernetes adds
// (JOB_COMPLETION_INDEX), rank 0 reachable as starbench-0.starbench.
func TestKubernetesJobRuns(t *testing.T) {
	if why := canIsolate(); why != "" {
		t.Skip(why)
	}
	b, err := os.ReadFile(kubeManifest)
	require.NoError(t, err)
	svcs, jobs, err := kubeObjects(b)
	require.NoError(t, err)
	job, svc := jobs[0], svcs[0]
	c := job.Spec.Template.Spec.Containers[0]
	var ranks []rank
	for i := range int(*job.Spec.Completions) {
		env := map[string]string{"JOB_COMPLETION_INDEX": strconv.Itoa(i)}
		for _, e := range c.Env {
			env[e.Name] = e.Value
		}
		ranks = append(ranks, rank{env: env, args: append(slices.Clone(c.Args), quickArgs...)})
	}
	out := runIsolated(t, starbenchBinary(t), ranks, []string{job.Name + "-0." + svc.Name})
	checkResults(t, out, len(ranks))
}

// TestComposeJobRuns runs compose.yaml's services as processes with their
// environment and command, rank 0 reachable by its service's name.
func TestComposeJobRuns(t *testing.T) {
	if why := canIsolate(); why != "" {
		t.Skip(why)
	}
	p, err := loadCompose(t, composeFile)
	require.NoError(t, err)
	var ranks []rank
	var names []string
	for _, name := range slices.Sorted(maps.Keys(p.Services)) {
		s := p.Services[name]
		env := map[string]string{}
		for k, v := range s.Environment {
			env[k] = *v
		}
		ranks = append(ranks, rank{env: env, args: append(slices.Clone([]string(s.Command)), quickArgs...)})
		names = append(names, name)
	}
	// rank0 sorts first: it is rank 0 (TestComposeFile checks the ranks).
	out := runIsolated(t, starbenchBinary(t), ranks, names)
	checkResults(t, out, len(ranks))
}
