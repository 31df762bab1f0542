package launch

import (
	"os"
	"strings"
	"testing"
)

// TestRunPassesToken: the job's token variables (COBRE_TCP_TOKEN,
// COBRE_TCP_TOKEN_FILE) in the launcher's environment reach every rank
// unchanged, for the tcp and the shm backend, and the launcher's own
// messages never show the token.
func TestRunPassesToken(t *testing.T) {
	t.Parallel()
	const tok = "tok-LAUNCH-51c0e9"
	const script = `echo "token=$COBRE_TCP_TOKEN file=$COBRE_TCP_TOKEN_FILE"`
	for _, backend := range []string{BackendTCP, BackendShm} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			cfg := Config{Backend: backend, Env: append(os.Environ(), "COBRE_TCP_TOKEN="+tok, "COBRE_TCP_TOKEN_FILE=/run/secrets/tok")}
			if backend == BackendShm {
				cfg.ShmName = "launch-token-test"
			}
			res, stdout, stderr := shJob(t, cfg, 2, script)
			if res.Code != 0 {
				t.Fatalf("result %+v; stderr:\n%s", res, stderr)
			}
			for _, want := range []string{"[0] token=" + tok + " file=/run/secrets/tok\n", "[1] token=" + tok + " file=/run/secrets/tok\n"} {
				if !strings.Contains(stdout, want) {
					t.Errorf("stdout lacks %q:\n%s", want, stdout)
				}
			}
			if strings.Contains(stderr, tok) {
				t.Errorf("the launcher's messages show the token:\n%s", stderr)
			}
		})
	}
}
