package starcomm_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm"
	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/testkit"
)

// TestConfigLaunchers: with COBRE_TCP_RANK unset, each launcher's variables
// give the rank and size, and Config.RankFrom names them.
func TestConfigLaunchers(t *testing.T) {
	cases := []struct {
		name       string
		env        map[string]string
		rank, size int
		from       string
	}{
		{"source=slurm", map[string]string{"SLURM_PROCID": "2", "SLURM_NTASKS": "4"}, 2, 4, "SLURM_PROCID, SLURM_NTASKS"},
		{"source=ompi", map[string]string{"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "5"}, 3, 5, "OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE"},
		{"source=kubernetes", map[string]string{"JOB_COMPLETION_INDEX": "1", "COBRE_TCP_SIZE": "4"}, 1, 4, "JOB_COMPLETION_INDEX, COBRE_TCP_SIZE"},
		{"source=slurm/size=equal", map[string]string{"SLURM_PROCID": "1", "SLURM_NTASKS": "4", "COBRE_TCP_SIZE": "4"}, 1, 4, "SLURM_PROCID, SLURM_NTASKS"},
		{"source=slurm/rank=0", map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "4"}, 0, 4, "SLURM_PROCID, SLURM_NTASKS"},
		{"source=none", map[string]string{"COBRE_TCP_RANK": "1", "COBRE_TCP_SIZE": "4"}, 1, 4, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.env["COBRE_TCP_COORDINATOR"] = "node0"
			cfg, err := starcomm.ConfigFromLookup(lookup(tc.env))
			require.NoError(t, err)
			assert.Equal(t, tc.rank, cfg.Rank)
			assert.Equal(t, tc.size, cfg.Size)
			assert.Equal(t, tc.from, cfg.RankFrom)
			assert.Equal(t, starcomm.BackendTCP, starcomm.Resolve(cfg))
		})
	}
	// A size-1 launcher job without a coordinator runs the local backend;
	// rank 0 of 4 without one is the tcp coordinator.
	cfg, err := starcomm.ConfigFromLookup(lookup(map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "1"}))
	require.NoError(t, err)
	assert.Equal(t, starcomm.BackendLocal, starcomm.Resolve(cfg))
	cfg, err = starcomm.ConfigFromLookup(lookup(map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "4"}))
	require.NoError(t, err)
	assert.Equal(t, starcomm.BackendTCP, starcomm.Resolve(cfg))
	// A worker without a coordinator: the usual missing variable.
	_, err = starcomm.ConfigFromLookup(lookup(map[string]string{"SLURM_PROCID": "1", "SLURM_NTASKS": "4"}))
	var m *comm.MissingConfigurationError
	require.ErrorAs(t, err, &m)
	assert.Equal(t, []string{"COBRE_TCP_COORDINATOR"}, m.MissingVars)
}

// TestConfigLauncherPrecedence: COBRE_TCP_RANK wins over every launcher,
// then Open MPI over Slurm over Kubernetes (the innermost launcher first).
func TestConfigLauncherPrecedence(t *testing.T) {
	all := func() map[string]string {
		return map[string]string{
			"COBRE_TCP_COORDINATOR": "node0",
			"OMPI_COMM_WORLD_RANK":  "1", "OMPI_COMM_WORLD_SIZE": "2",
			"SLURM_PROCID": "2", "SLURM_NTASKS": "3",
			"JOB_COMPLETION_INDEX": "3",
		}
	}
	cases := []struct {
		name       string
		edit       func(map[string]string)
		rank, size int
		from       string
	}{
		{"winner=cobre", func(e map[string]string) { e["COBRE_TCP_RANK"], e["COBRE_TCP_SIZE"] = "5", "6" }, 5, 6, ""},
		{"winner=ompi", func(map[string]string) {}, 1, 2, "OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE"},
		{"winner=slurm", func(e map[string]string) { delete(e, "OMPI_COMM_WORLD_RANK") }, 2, 3, "SLURM_PROCID, SLURM_NTASKS"},
		{"winner=slurm/ompi=blank", func(e map[string]string) { e["OMPI_COMM_WORLD_RANK"] = " " }, 2, 3, "SLURM_PROCID, SLURM_NTASKS"},
		{"winner=kubernetes", func(e map[string]string) {
			delete(e, "OMPI_COMM_WORLD_RANK")
			delete(e, "SLURM_PROCID")
			e["COBRE_TCP_SIZE"] = "4"
		}, 3, 4, "JOB_COMPLETION_INDEX, COBRE_TCP_SIZE"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := all()
			tc.edit(env)
			cfg, err := starcomm.ConfigFromLookup(lookup(env))
			require.NoError(t, err)
			assert.Equal(t, tc.rank, cfg.Rank)
			assert.Equal(t, tc.size, cfg.Size)
			assert.Equal(t, tc.from, cfg.RankFrom)
		})
	}
}

// TestConfigLauncherBadValues: a launcher's bad, incomplete or conflicting
// variables are an InvalidConfigurationError naming the variable at fault
// and saying where the rank came from.
func TestConfigLauncherBadValues(t *testing.T) {
	cases := []struct {
		name    string
		env     map[string]string
		varName string
		value   string
		says    []string
	}{
		{"slurm/rank=not-a-number", map[string]string{"SLURM_PROCID": "x", "SLURM_NTASKS": "4"}, "SLURM_PROCID", "x",
			[]string{"not an integer; must be an integer >= 0 and < SLURM_NTASKS", "rank x from SLURM_PROCID", "COBRE_TCP_RANK is unset"}},
		{"slurm/rank=negative", map[string]string{"SLURM_PROCID": "-1", "SLURM_NTASKS": "4"}, "SLURM_PROCID", "-1",
			[]string{": must be an integer >= 0 and < SLURM_NTASKS (rank -1"}},
		{"slurm/rank>=size", map[string]string{"SLURM_PROCID": "5", "SLURM_NTASKS": "4"}, "SLURM_PROCID", "5",
			[]string{"must be < SLURM_NTASKS (4)", "rank 5 from SLURM_PROCID, size 4 from SLURM_NTASKS"}},
		{"slurm/size=0", map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "0"}, "SLURM_NTASKS", "0",
			[]string{">= 1", "size 0 from SLURM_NTASKS"}},
		{"slurm/size=unset", map[string]string{"SLURM_PROCID": "1"}, "SLURM_PROCID", "1",
			[]string{"SLURM_NTASKS, the size, is unset"}},
		{"slurm/size=conflict", map[string]string{"SLURM_PROCID": "1", "SLURM_NTASKS": "8", "COBRE_TCP_SIZE": "4"}, "COBRE_TCP_SIZE", "4",
			[]string{"conflicts with SLURM_NTASKS=8", "the rank comes from SLURM_PROCID"}},
		{"ompi/rank=negative", map[string]string{"OMPI_COMM_WORLD_RANK": "-1", "OMPI_COMM_WORLD_SIZE": "4"}, "OMPI_COMM_WORLD_RANK", "-1",
			[]string{"from OMPI_COMM_WORLD_RANK"}},
		{"ompi/size=not-a-number", map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "four"}, "OMPI_COMM_WORLD_SIZE", "four",
			[]string{"not an integer", "size four from OMPI_COMM_WORLD_SIZE"}},
		{"kubernetes/size=unset", map[string]string{"JOB_COMPLETION_INDEX": "0"}, "JOB_COMPLETION_INDEX", "0",
			[]string{"gives the rank but not the size", "COBRE_TCP_SIZE"}},
		{"kubernetes/rank>=size", map[string]string{"JOB_COMPLETION_INDEX": "4", "COBRE_TCP_SIZE": "4"}, "JOB_COMPLETION_INDEX", "4",
			[]string{"must be < COBRE_TCP_SIZE (4)", "rank 4 from JOB_COMPLETION_INDEX, size 4 from COBRE_TCP_SIZE"}},
		{"kubernetes/rank=not-a-number", map[string]string{"JOB_COMPLETION_INDEX": "a", "COBRE_TCP_SIZE": "4"}, "JOB_COMPLETION_INDEX", "a",
			[]string{"not an integer"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.env["COBRE_TCP_COORDINATOR"] = "node0"
			_, err := starcomm.ConfigFromLookup(lookup(tc.env))
			var ic *starcomm.InvalidConfigurationError
			require.ErrorAs(t, err, &ic)
			assert.Equal(t, tc.varName, ic.Var)
			assert.Equal(t, tc.value, ic.Value)
			assert.Contains(t, err.Error(), fmt.Sprintf("invalid %s=%q", tc.varName, tc.value))
			for _, s := range tc.says {
				assert.Contains(t, err.Error(), s)
			}
		})
	}
}

// TestLauncherStartupErrorNamesSource: a start-up failure of a rank whose
// rank came from a launcher says so.
func TestLauncherStartupErrorNamesSource(t *testing.T) {
	testkit.CheckGoroutines(t)
	cfg, err := starcomm.ConfigFromLookup(lookup(map[string]string{
		"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "COBRE_TCP_COORDINATOR": "127.0.0.1",
		"COBRE_TCP_PORT": strconv.Itoa(freePort(t)), "COBRE_TCP_CONNECT_TIMEOUT_MS": "300",
	}))
	require.NoError(t, err)
	_, err = starcomm.New(context.Background(), cfg)
	var ife *comm.InitializationFailedError
	require.ErrorAs(t, err, &ife)
	assert.Contains(t, err.Error(), "rank 1 of 2 from SLURM_PROCID, SLURM_NTASKS: ")
}

// envLauncherChild makes the test binary one rank configured by a
// launcher's variables only (see launcherChild).
const envLauncherChild = "STARCOMM_TEST_LAUNCHER_CHILD"

// launcherChild builds its communicator with FromEnv, checks its rank and
// size against the launcher's, and prints the sum of the ranks.
func launcherChild() int {
	cfg, err := starcomm.ConfigFromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "config:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := starcomm.FromEnv(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "start:", err)
		return 1
	}
	defer c.Close()
	sum := []int64{0}
	if err := comm.Allreduce(ctx, c, []int64{int64(c.Rank())}, sum, comm.Sum); err != nil {
		fmt.Fprintln(os.Stderr, "allreduce:", err)
		return 1
	}
	fmt.Printf("rank=%d size=%d from=%q sum=%d\n", c.Rank(), c.Size(), cfg.RankFrom, sum[0])
	return 0
}

// TestLaunchersOverTCP: four separate processes, each given only a
// launcher's rank variables (and the coordinator), form one job over real
// TCP and agree on the sum of their ranks.
func TestLaunchersOverTCP(t *testing.T) {
	const size = 4
	cases := []struct {
		name string
		env  func(rank int) []string
		from string
	}{
		{"source=slurm", func(r int) []string {
			return []string{"SLURM_PROCID=" + strconv.Itoa(r), "SLURM_NTASKS=" + strconv.Itoa(size)}
		}, "SLURM_PROCID, SLURM_NTASKS"},
		{"source=ompi", func(r int) []string {
			return []string{"OMPI_COMM_WORLD_RANK=" + strconv.Itoa(r), "OMPI_COMM_WORLD_SIZE=" + strconv.Itoa(size)}
		}, "OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE"},
		{"source=kubernetes", func(r int) []string {
			return []string{"JOB_COMPLETION_INDEX=" + strconv.Itoa(r), "COBRE_TCP_SIZE=" + strconv.Itoa(size)}
		}, "JOB_COMPLETION_INDEX, COBRE_TCP_SIZE"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			port := strconv.Itoa(freePort(t))
			out := make([]string, size)
			errs := make([]error, size)
			var wg sync.WaitGroup
			for r := range size {
				cmd := exec.Command(os.Args[0], "-test.run=^$")
				cmd.Env = append(launcherFreeEnv(), envLauncherChild+"=1", "COBRE_COMM_BACKEND=tcp",
					"COBRE_TCP_COORDINATOR=127.0.0.1", "COBRE_TCP_BIND_ADDR=127.0.0.1", "COBRE_TCP_PORT="+port, "GOMAXPROCS=1")
				cmd.Env = append(cmd.Env, tc.env(r)...)
				var stderr strings.Builder
				cmd.Stderr = &stderr
				wg.Go(func() {
					b, err := cmd.Output()
					out[r] = string(b)
					if err != nil {
						errs[r] = fmt.Errorf("rank %d: %w: %s", r, err, stderr.String())
					}
				})
			}
			wg.Wait()
			for r := range size {
				require.NoError(t, errs[r])
				assert.Equal(t, fmt.Sprintf("rank=%d size=%d from=%q sum=6\n", r, size, tc.from), out[r])
			}
		})
	}
}

// launcherFreeEnv is this process's environment without any COBRE_* or
// launcher variable, so that a child sees only the ones a test gives it.
func launcherFreeEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "COBRE_") || strings.HasPrefix(name, "SLURM_") || strings.HasPrefix(name, "OMPI_") || name == "JOB_COMPLETION_INDEX" {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// TestLaunchersMpirun: four ranks started by Open MPI's own mpirun, which
// sets OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE, form one job over
// real TCP with no COBRE_TCP_RANK or COBRE_TCP_SIZE.
func TestLaunchersMpirun(t *testing.T) {
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		t.Skip("Open MPI's mpirun is not installed (Debian: openmpi-bin; .ci/run installs it):", err)
	}
	const size = 4
	cmd := exec.Command(mpirun, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-n", strconv.Itoa(size), os.Args[0], "-test.run=^$")
	cmd.Env = append(launcherFreeEnv(), envLauncherChild+"=1", "COBRE_COMM_BACKEND=tcp",
		"COBRE_TCP_COORDINATOR=127.0.0.1", "COBRE_TCP_BIND_ADDR=127.0.0.1", "COBRE_TCP_PORT="+strconv.Itoa(freePort(t)), "GOMAXPROCS=1")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "mpirun: %s", stderr.String())
	var lines []string
	for l := range strings.Lines(string(out)) {
		if strings.HasPrefix(l, "rank=") {
			lines = append(lines, l)
		}
	}
	slices.Sort(lines)
	var want []string
	for r := range size {
		want = append(want, fmt.Sprintf("rank=%d size=%d from=%q sum=6\n", r, size, "OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE"))
	}
	assert.Equal(t, want, lines, "mpirun's output:\n%s", out)
}
