//go:build linux

package starcomm_test

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm"
	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/testkit"
)

// TestShmIgnoresToken: the token is the tcp backend's; a shm job whose
// environment also has COBRE_TCP_TOKEN, or COBRE_TCP_TOKEN_FILE (even one
// that does not exist, as when a launcher sets it for every job), is
// configured without error, and the job runs as without them (the shm
// backend does not read them): every rank is on one
// host, in one shared-memory segment.
func TestShmIgnoresToken(t *testing.T) {
	for name, tok := range map[string]map[string]string{
		"token":             {"COBRE_TCP_TOKEN": testToken},
		"token-file=absent": {"COBRE_TCP_TOKEN_FILE": filepath.Join(t.TempDir(), "absent")},
	} {
		t.Run(name, func(t *testing.T) {
			testkit.CheckGoroutines(t)
			const size = 3
			name := testkit.ShmName(t)
			comms := make([]comm.Communicator, size)
			errs := make([]error, size)
			var wg sync.WaitGroup
			for r := range size {
				env := map[string]string{"COBRE_SHM_NAME": name, "COBRE_TCP_RANK": strconv.Itoa(r), "COBRE_TCP_SIZE": strconv.Itoa(size)}
				for k, v := range tok {
					env[k] = v
				}
				cfg, err := starcomm.ConfigFromLookup(lookup(env))
				require.NoError(t, err, "rank %d", r)
				wg.Go(func() { comms[r], errs[r] = starcomm.New(context.Background(), cfg) })
			}
			wg.Wait()
			require.NoError(t, errors.Join(errs...))
			errs = testkit.RunRanks(comms, func(c comm.Communicator) error {
				return testkit.MixedOps(context.Background(), c, 5, 10)
			})
			require.NoError(t, errors.Join(errs...))
			require.NoError(t, testkit.CloseAll(comms))
		})
	}
}
