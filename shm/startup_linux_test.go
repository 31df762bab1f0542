package shm_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm/shm"
	"github.com/starcomm/starcomm/testkit"
)

// envStartChild makes the test binary one rank of a start-up test, doing
// what its value says: "hang" (join, say "joined" on standard output once
// registered, and wait for the others) or "close" (join, then Close at
// once and exit).
const envStartChild = "STARCOMM_SHM_TEST_START_CHILD"

func startChild(mode string) int {
	cfg, err := configFromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if mode == "hang" {
		var once sync.Once
		shm.SetStartHook(func() { once.Do(func() { fmt.Println("joined") }) })
	}
	c, err := shm.New(context.Background(), cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := c.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// startChildRank starts rank r of size in a child process doing mode.
func startChildRank(t *testing.T, mode, name string, r, size int) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), envStartChild+"="+mode, "COBRE_SHM_NAME="+name,
		"COBRE_TCP_RANK="+strconv.Itoa(r), "COBRE_TCP_SIZE="+strconv.Itoa(size),
		"COBRE_TCP_CONNECT_TIMEOUT_MS=60000", "GORACE=atexit_sleep_ms=0")
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, bufio.NewScanner(out)
}

// TestStartupPeerDies: a rank that joined and is killed while the job
// still forms (a rank has not come yet) fails the others' start-up within
// a fraction of a second, naming it, not after the connect timeout (60 s
// here); a rank that comes afterwards is told why the start-up failed, not
// that another job uses the name.
func TestStartupPeerDies(t *testing.T) {
	name := testkit.ShmName(t)
	child, out := startChildRank(t, "hang", name, 2, 3)
	coord := testkit.Async(func() error {
		_, err := shm.New(context.Background(), shm.CommConfig{Name: name, Rank: 0, Size: 3, ConnectTimeout: time.Minute})
		return err
	})
	require.True(t, out.Scan(), "the child never joined")
	require.Equal(t, "joined", out.Text())
	killed := time.Now()
	require.NoError(t, child.Process.Kill())
	err := <-coord
	took := time.Since(killed)
	var mr *shm.MissingRanksError
	require.ErrorAs(t, err, &mr)
	assert.Equal(t, []int{1}, mr.Ranks)
	var ae *shm.AbortError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, 2, ae.Rank)
	assert.ErrorIs(t, err, shm.ErrPeerExited)
	assert.Contains(t, err.Error(), fmt.Sprintf("rank 2 (pid %d) exited before start-up completed", child.Process.Pid))
	assert.Less(t, took, 10*time.Second, "named %v after the kill", took)
	t.Logf("rank 0 named the killed rank %v after the kill", took)
}

// TestStartupContextEnds: a rank whose context ends while it waits for the
// others tells them: the rank waiting with a long connect timeout fails
// at once naming it, and a rank that comes afterwards is told that the
// start-up failed, naming that rank, rather than to rename its job.
func TestStartupContextEnds(t *testing.T) {
	name := testkit.ShmName(t)
	coord := testkit.Async(func() error {
		_, err := shm.New(context.Background(), shm.CommConfig{Name: name, Rank: 0, Size: 3, ConnectTimeout: time.Minute})
		return err
	})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := shm.New(ctx, shm.CommConfig{Name: name, Rank: 1, Size: 3, ConnectTimeout: time.Minute})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	err = <-coord
	var ae *shm.AbortError
	require.ErrorAs(t, err, &ae, "%v", err)
	assert.Equal(t, 1, ae.Rank)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "rank 1 gave up waiting for ranks [2] to join")
	// Rank 2 comes while the others leave (or after): either the failed
	// start-up, named, or a fresh segment it waits on alone.
	_, err = shm.New(context.Background(), shm.CommConfig{Name: name, Rank: 2, Size: 3, ConnectTimeout: 300 * time.Millisecond})
	require.Error(t, err)
	var inUse *shm.InUseError
	assert.False(t, errors.As(err, &inUse), "not 'another live job': %v", err)
}

// TestStartupPeerClosedAndGone: a rank whose peers joined, closed and
// exited before it looked at their processes starts fine: a peer that
// closed is not a peer that crashed.
func TestStartupPeerClosedAndGone(t *testing.T) {
	name := testkit.ShmName(t)
	var children []*exec.Cmd
	for r := 1; r < 3; r++ {
		cmd, _ := startChildRank(t, "close", name, r, 3)
		children = append(children, cmd)
	}
	restore := shm.SetWatchHook(func() {
		for _, cmd := range children {
			assert.NoError(t, cmd.Wait(), "a child's start-up or Close failed")
		}
	})
	defer restore()
	c, err := shm.New(context.Background(), shm.CommConfig{Name: name, Rank: 0, Size: 3, ConnectTimeout: time.Minute})
	require.NoError(t, err)
	require.NoError(t, c.Close())
}

// TestCloseWaitsForClose: a second Close, from another goroutine, returns
// only once the first is done: the rank is then marked closed, so a
// process that exits right after it is not taken for a crash.
func TestCloseWaitsForClose(t *testing.T) {
	name := testkit.ShmName(t)
	comms := make([]*shm.Comm, 2)
	var wg sync.WaitGroup
	for r := range comms {
		wg.Go(func() {
			c, err := shm.New(context.Background(), shm.CommConfig{Name: name, Rank: r, Size: 2, ConnectTimeout: time.Minute})
			assert.NoError(t, err)
			comms[r] = c
		})
	}
	wg.Wait()
	require.NotNil(t, comms[0])
	require.NotNil(t, comms[1])
	defer comms[1].Close()
	// The first Close waits in its hook until the second is about to wait
	// for it: the second cannot return before the first has done its work.
	inHook, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	releaseFirst := func() { once.Do(func() { close(release) }) }
	defer releaseFirst()
	restore := shm.SetCloseHooks(func() { close(inHook); <-release }, releaseFirst)
	defer restore()
	first := testkit.Async(func() error { return comms[0].Close() })
	<-inHook
	second := testkit.Async(func() error { return comms[0].Close() })
	require.NoError(t, <-second)
	// Seen from rank 1, which still maps the segment.
	assert.True(t, shm.ClosedSlot(comms[1], 0), "the second Close returned before the first marked the rank closed")
	require.NoError(t, <-first)
}

// TestLeftRegionsRemoved: region files a job killed inside CreateRegion
// left next to its segment are removed by RemoveFiles (the launchers'
// cleanup), by the next job of that name replacing the stale segment, and
// by the last rank leaving.
func TestLeftRegionsRemoved(t *testing.T) {
	leave := func(name string, ks ...int) []string {
		var files []string
		for _, k := range ks {
			f := fmt.Sprintf("%s.region-%d", shm.SegmentPath("", name), k)
			require.NoError(t, os.WriteFile(f, []byte("x"), 0o600))
			files = append(files, f)
		}
		return files
	}
	gone := func(files []string) {
		t.Helper()
		for _, f := range files {
			_, err := os.Stat(f)
			assert.True(t, errors.Is(err, os.ErrNotExist), "%s left: %v", f, err)
		}
	}
	t.Run("RemoveFiles", func(t *testing.T) {
		name := testkit.ShmName(t)
		require.NoError(t, os.WriteFile(shm.SegmentPath("", name), []byte("stale"), 0o600))
		files := leave(name, 0, 7)
		other := leave(name+"x", 1) // another job's name that starts alike
		shm.RemoveFiles("", name)
		gone(append(files, shm.SegmentPath("", name)))
		_, err := os.Stat(other[0])
		assert.NoError(t, err, "another job's region was removed")
		_ = os.Remove(other[0])
	})
	t.Run("stale-and-last", func(t *testing.T) {
		name := testkit.ShmName(t)
		// A stale segment: no live process holds it.
		require.NoError(t, os.WriteFile(shm.SegmentPath("", name), make([]byte, 8192), 0o600))
		files := leave(name, 3)
		c, err := shm.New(context.Background(), shm.CommConfig{Name: name, Rank: 0, Size: 1})
		require.NoError(t, err)
		assert.True(t, c.ReplacedStale())
		gone(files)
		files = leave(name, 4) // as if left while the job ran
		require.NoError(t, c.Close())
		gone(append(files, shm.SegmentPath("", name)))
	})
}
