package validate

import (
	"bufio"
	"context"
	"debug/elf"
	"errors"
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

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/starcomm/starcomm"
)

const (
	kubeManifest = "../kubernetes/starbench-job.yaml"
	composeFile  = "../compose/compose.yaml"
	dockerfile   = "../docker/Dockerfile"
	repoRoot     = "../.."
)

// kubeObjects decodes a multi-document manifest strictly into the API's
// types: an unknown field, a wrong type or a duplicate key is an error
// naming it.
func kubeObjects(manifest []byte) (svcs []*corev1.Service, jobs []*batchv1.Job, err error) {
	for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(manifest), -1) {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var meta struct{ APIVersion, Kind string }
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			return nil, nil, fmt.Errorf("document %d: %w", i, err)
		}
		switch meta.APIVersion + " " + meta.Kind {
		case "v1 Service":
			s := &corev1.Service{}
			if err := yaml.UnmarshalStrict([]byte(doc), s); err != nil {
				return nil, nil, fmt.Errorf("document %d (Service): %w", i, err)
			}
			svcs = append(svcs, s)
		case "batch/v1 Job":
			j := &batchv1.Job{}
			if err := yaml.UnmarshalStrict([]byte(doc), j); err != nil {
				return nil, nil, fmt.Errorf("document %d (Job): %w", i, err)
			}
			jobs = append(jobs, j)
		default:
			return nil, nil, fmt.Errorf("document %d: unexpected %s %s", i, meta.APIVersion, meta.Kind)
		}
	}
	return svcs, jobs, nil
}

// cobreServiceLinks are the variables Kubernetes puts in a pod's
// environment for a Service named "cobre" (ClusterIP 10.96.0.12, port 8080)
// in its namespace, unless the pod sets enableServiceLinks: false.
var cobreServiceLinks = []string{
	"COBRE_SERVICE_HOST=10.96.0.12", "COBRE_SERVICE_PORT=8080", "COBRE_PORT=tcp://10.96.0.12:8080",
	"COBRE_PORT_8080_TCP=tcp://10.96.0.12:8080", "COBRE_PORT_8080_TCP_PROTO=tcp",
	"COBRE_PORT_8080_TCP_PORT=8080", "COBRE_PORT_8080_TCP_ADDR=10.96.0.12",
}

// checkKube checks the wiring of a starcomm job's Service and Indexed Job.
func checkKube(svc *corev1.Service, job *batchv1.Job) error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if svc.Spec.ClusterIP != corev1.ClusterIPNone {
		bad("Service %s: clusterIP %q, want None (headless: a DNS name per pod)", svc.Name, svc.Spec.ClusterIP)
	}
	if !svc.Spec.PublishNotReadyAddresses {
		bad("Service %s: publishNotReadyAddresses must be true so rank 0's name resolves before it is ready", svc.Name)
	}
	spec := job.Spec
	if spec.CompletionMode == nil || *spec.CompletionMode != batchv1.IndexedCompletion {
		bad("Job %s: completionMode must be Indexed (JOB_COMPLETION_INDEX is the rank)", job.Name)
	}
	if spec.Completions == nil || spec.Parallelism == nil || *spec.Completions != *spec.Parallelism {
		bad("Job %s: completions and parallelism must be set and equal (every rank at once)", job.Name)
	}
	pod := spec.Template
	if pod.Spec.Subdomain != svc.Name {
		bad("Job %s: subdomain %q, want the Service's name %q", job.Name, pod.Spec.Subdomain, svc.Name)
	}
	for k, v := range svc.Spec.Selector {
		if pod.Labels[k] != v {
			bad("Service %s selects %s=%s, which the Job's pods do not carry", svc.Name, k, v)
		}
	}
	if pod.Spec.RestartPolicy != corev1.RestartPolicyNever {
		bad("Job %s: restartPolicy %q, want Never (a restarted rank cannot rejoin)", job.Name, pod.Spec.RestartPolicy)
	}
	if len(pod.Spec.Containers) != 1 {
		bad("Job %s: %d containers, want 1", job.Name, len(pod.Spec.Containers))
		return errors.Join(errs...)
	}
	c := pod.Spec.Containers[0]
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	if want := job.Name + "-0." + svc.Name; env[starcomm.EnvCoordinator] != want {
		bad("Job %s: %s=%q, want %q (<job>-0.<service>)", job.Name, starcomm.EnvCoordinator, env[starcomm.EnvCoordinator], want)
	}
	if spec.Completions != nil && env[starcomm.EnvSize] != strconv.Itoa(int(*spec.Completions)) {
		bad("Job %s: %s=%q, want completions (%d)", job.Name, starcomm.EnvSize, env[starcomm.EnvSize], *spec.Completions)
	}
	if _, set := env[starcomm.EnvRank]; set {
		bad("Job %s: %s is set: the rank is JOB_COMPLETION_INDEX", job.Name, starcomm.EnvRank)
	}
	port := env[starcomm.EnvPort]
	if port == "" {
		port = "29500"
	}
	if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return strconv.Itoa(int(p.ContainerPort)) == port }) {
		bad("Job %s: no containerPort %s (COBRE_TCP_PORT)", job.Name, port)
	}
	if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return strconv.Itoa(int(p.Port)) == port }) {
		bad("Service %s: no port %s (COBRE_TCP_PORT)", svc.Name, port)
	}
	// Every pod's environment, as starcomm reads it.
	if spec.Completions != nil {
		var environ []string
		for k, v := range env {
			environ = append(environ, k+"="+v)
		}
		if pod.Spec.EnableServiceLinks == nil || *pod.Spec.EnableServiceLinks {
			// Kubernetes then adds variables for every Service of the
			// namespace; one named "cobre" gives COBRE_* variables, which
			// starcomm refuses as unknown.
			environ = append(environ, cobreServiceLinks...)
		}
		for i := range int(*spec.Completions) {
			cfg, err := starcomm.ConfigFromEnviron(append(slices.Clone(environ), "JOB_COMPLETION_INDEX="+strconv.Itoa(i)))
			switch {
			case err != nil:
				bad("pod %d: %v", i, err)
			case cfg.Rank != i || cfg.Size != int(*spec.Completions) || cfg.RankFrom != "JOB_COMPLETION_INDEX, COBRE_TCP_SIZE":
				bad("pod %d: rank %d of %d from %q", i, cfg.Rank, cfg.Size, cfg.RankFrom)
			}
		}
	}
	return errors.Join(errs...)
}

func TestKubernetesManifest(t *testing.T) {
	b, err := os.ReadFile(kubeManifest)
	require.NoError(t, err)
	svcs, jobs, err := kubeObjects(b)
	require.NoError(t, err)
	require.Len(t, svcs, 1)
	require.Len(t, jobs, 1)
	require.NoError(t, checkKube(svcs[0], jobs[0]))
	assert.Equal(t, int32(4), *jobs[0].Spec.Completions, "a 4-rank job")
}

// TestKubernetesValidatorRefuses: the checks catch a misspelt field, a
// wrong type, and each broken piece of wiring.
func TestKubernetesValidatorRefuses(t *testing.T) {
	good, err := os.ReadFile(kubeManifest)
	require.NoError(t, err)
	decodeCases := map[string][2]string{
		"field=misspelt": {"completionMode: Indexed", "completionsMode: Indexed"},
		"type=wrong":     {"completions: 4", "completions: four"},
		"key=duplicate":  {"  parallelism: 4", "  parallelism: 4\n  parallelism: 3"},
	}
	for name, edit := range decodeCases {
		t.Run(name, func(t *testing.T) {
			require.Contains(t, string(good), edit[0])
			_, _, err := kubeObjects([]byte(strings.Replace(string(good), edit[0], edit[1], 1)))
			assert.Error(t, err)
		})
	}
	wiring := map[string]struct {
		edit func(*corev1.Service, *batchv1.Job)
		says string
	}{
		"service=not-headless": {func(s *corev1.Service, _ *batchv1.Job) { s.Spec.ClusterIP = "" }, "headless"},
		"mode=non-indexed":     {func(_ *corev1.Service, j *batchv1.Job) { m := batchv1.NonIndexedCompletion; j.Spec.CompletionMode = &m }, "Indexed"},
		"subdomain=other":      {func(_ *corev1.Service, j *batchv1.Job) { j.Spec.Template.Spec.Subdomain = "x" }, "subdomain"},
		"coordinator=wrong":    {func(_ *corev1.Service, j *batchv1.Job) { j.Name = "other" }, "<job>-0.<service>"},
		"size=wrong": {func(_ *corev1.Service, j *batchv1.Job) {
			n := int32(3)
			j.Spec.Completions, j.Spec.Parallelism = &n, &n
		}, "want completions (3)"},
		"selector=not-matching": {func(s *corev1.Service, _ *batchv1.Job) { s.Spec.Selector = map[string]string{"app": "x"} }, "do not carry"},
		"service-links=on":      {func(_ *corev1.Service, j *batchv1.Job) { j.Spec.Template.Spec.EnableServiceLinks = nil }, "unknown variable COBRE_PORT"},
	}
	for name, tc := range wiring {
		t.Run(name, func(t *testing.T) {
			svcs, jobs, err := kubeObjects(good)
			require.NoError(t, err)
			tc.edit(svcs[0], jobs[0])
			assert.ErrorContains(t, checkKube(svcs[0], jobs[0]), tc.says)
		})
	}
}

// loadCompose loads a compose file with compose-go, which validates it
// against the Compose specification's schema.
func loadCompose(t *testing.T, path string) (*types.Project, error) {
	t.Helper()
	opts, err := cli.NewProjectOptions([]string{path}, cli.WithName("starbench"))
	require.NoError(t, err)
	return opts.LoadProject(context.Background())
}

func TestComposeFile(t *testing.T) {
	p, err := loadCompose(t, composeFile)
	require.NoError(t, err)
	require.Len(t, p.Services, 4, "a 4-rank job")
	ranks := map[int]string{}
	var coordinator string
	for name, s := range p.Services {
		var environ []string
		for k, v := range s.Environment {
			require.NotNil(t, v, "%s: %s has no value", name, k)
			environ = append(environ, k+"="+*v)
		}
		cfg, err := starcomm.ConfigFromEnviron(environ)
		require.NoError(t, err, "service %s", name)
		assert.Equal(t, 4, cfg.Size, name)
		assert.NotContains(t, ranks, cfg.Rank, "service %s repeats rank %d", name, cfg.Rank)
		ranks[cfg.Rank] = name
		coordinator = cfg.Coordinator
		require.NotNil(t, s.Build, name)
		assert.FileExists(t, filepath.Join(s.Build.Context, s.Build.Dockerfile), "service %s: its Dockerfile", name)
		assert.Equal(t, mustAbs(t, repoRoot), s.Build.Context, "service %s builds from the repository's root", name)
	}
	assert.Len(t, ranks, 4)
	assert.Equal(t, ranks[0], coordinator, "COBRE_TCP_COORDINATOR names rank 0's service")
}

// TestComposeValidatorRefuses: the schema check catches an unknown key and
// a wrong type.
func TestComposeValidatorRefuses(t *testing.T) {
	good, err := os.ReadFile(composeFile)
	require.NoError(t, err)
	for name, edit := range map[string][2]string{
		"key=unknown": {"  rank0:\n", "  rank0:\n    restart_polcy: never\n"},
		"type=wrong":  {"  rank0:\n", "  rank0:\n    ports: 29500\n"},
	} {
		t.Run(name, func(t *testing.T) {
			require.Contains(t, string(good), edit[0])
			path := filepath.Join(t.TempDir(), "compose.yaml")
			require.NoError(t, os.WriteFile(path, []byte(strings.Replace(string(good), edit[0], edit[1], 1)), 0o644))
			_, err := loadCompose(t, path)
			assert.Error(t, err)
		})
	}
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	require.NoError(t, err)
	return a
}

// dockerfileStages is what TestDockerfile and the runs read of the
// Dockerfile: its FROM, RUN and COPY arguments and its ENTRYPOINT.
type dockerfileStages struct {
	froms, runs, copies []string
	entrypoint          string
}

func readDockerfile(t *testing.T) dockerfileStages {
	t.Helper()
	f, err := os.Open(dockerfile)
	require.NoError(t, err)
	defer f.Close()
	var d dockerfileStages
	for sc := bufio.NewScanner(f); sc.Scan(); {
		l := strings.TrimSpace(sc.Text())
		instr, rest, _ := strings.Cut(l, " ")
		switch instr {
		case "FROM":
			d.froms = append(d.froms, rest)
		case "RUN":
			d.runs = append(d.runs, rest)
		case "COPY":
			d.copies = append(d.copies, rest)
		case "ENTRYPOINT":
			d.entrypoint = rest
		}
	}
	return d
}

// buildCommand is the build stage's go build.
func (d dockerfileStages) buildCommand(t *testing.T) string {
	t.Helper()
	i := slices.IndexFunc(d.runs, func(r string) bool { return strings.Contains(r, "go build") })
	require.GreaterOrEqual(t, i, 0, "no go build in the build stage")
	return d.runs[i]
}

// buildAsDockerfile runs the build stage's command as written, from the
// repository's root, with /out/ moved to dir, and returns the binary.
func buildAsDockerfile(t *testing.T, dir string) string {
	t.Helper()
	build := readDockerfile(t).buildCommand(t)
	require.Contains(t, build, "-o /out/starbench")
	cmd := exec.Command("sh", "-c", strings.ReplaceAll(build, "/out/", dir+"/"))
	cmd.Dir = repoRoot
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s: %s", build, b)
	return filepath.Join(dir, "starbench")
}

var (
	built     sync.Mutex
	starbench string // the binary buildAsDockerfile made, once built
)

// starbenchBinary returns the image's binary, built once per test run.
func starbenchBinary(t *testing.T) string {
	t.Helper()
	built.Lock()
	defer built.Unlock()
	if starbench == "" {
		dir, err := os.MkdirTemp("", "starbench-image-")
		require.NoError(t, err)
		starbench = buildAsDockerfile(t, dir)
	}
	return starbench
}

func TestMain(m *testing.M) {
	code := m.Run()
	if starbench != "" {
		_ = os.RemoveAll(filepath.Dir(starbench))
	}
	os.Exit(code)
}

// TestDockerfile: the final stage is distroless static or scratch and runs
// the binary the build stage makes; the build stage's go build, run as
// written, makes a static binary.
func TestDockerfile(t *testing.T) {
	d := readDockerfile(t)
	require.Len(t, d.froms, 2, "a build stage and the image")
	base, _, _ := strings.Cut(d.froms[1], " ")
	assert.True(t, base == "scratch" || strings.HasPrefix(base, "gcr.io/distroless/static"), "final base %q: distroless static or scratch", base)
	assert.Equal(t, `["/starbench"]`, d.entrypoint)
	assert.Contains(t, d.copies, "--from=build /out/starbench /starbench")
	require.Contains(t, d.buildCommand(t), "CGO_ENABLED=0")
	exe, err := elf.Open(starbenchBinary(t))
	require.NoError(t, err)
	defer exe.Close()
	for _, p := range exe.Progs {
		assert.NotEqual(t, elf.PT_INTERP, p.Type, "the binary asks for a dynamic loader: not static")
	}
	libs, err := exe.ImportedLibraries()
	require.NoError(t, err)
	assert.Empty(t, libs, "the binary needs shared libraries: not static")
}
