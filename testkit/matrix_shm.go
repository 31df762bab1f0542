//go:build linux

package testkit

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/shm"
)

// The failure matrix of the shm backend: real processes (StartShmJob), one
// row per fault. It is separate from the star matrix (matrix.go) because
// its faults are those of processes sharing memory on one host: a process
// killed outright (its pidfd fires), a process stopped (no progress), a
// segment left by a job that was killed whole, a segment another user
// owns, a rank that never starts, a second job under the same name, and
// ranks arriving in any order.

// Faults of the shm matrix.
const (
	ShmCrash        = "crash"         // SIGKILL one rank mid-loop
	ShmHang         = "hang"          // SIGSTOP one rank mid-loop, then SIGCONT
	ShmStale        = "stale"         // a job killed whole leaves its segment; the next one replaces it
	ShmPermissions  = "permissions"   // the segment belongs to another user
	ShmNeverArrives = "never-arrives" // one rank never starts
	ShmSecondJob    = "second-job"    // a second live job with the same name
	ShmLate         = "late"          // ranks arrive in reverse order, 300 ms apart
	ShmLongWait     = "long-wait"     // a rank waits 10 s for a late peer: its CPU time
)

// ShmCell is one row of the shm failure matrix.
type ShmCell struct {
	Fault  string
	Op     string // the collective the ranks loop (crash, hang)
	Victim int    // the rank the fault hits
	Size   int
}

// Name is the subtest's name.
func (c ShmCell) Name() string {
	switch c.Fault {
	case ShmCrash, ShmHang:
		return fmt.Sprintf("fault=%s/op=%s/victim=%d", c.Fault, c.Op, c.Victim)
	}
	return "fault=" + c.Fault
}

// ShmMatrix returns the rows: SIGKILL of each rank in turn in each
// collective, SIGSTOP of a worker and of rank 0, and one row for each
// other fault, at 4 ranks.
func ShmMatrix() []ShmCell {
	const size = 4
	var cells []ShmCell
	for _, op := range []string{comm.OpAllgatherv, comm.OpAllreduce, comm.OpBroadcast, comm.OpBarrier} {
		for v := range size {
			cells = append(cells, ShmCell{Fault: ShmCrash, Op: op, Victim: v, Size: size})
		}
	}
	cells = append(cells,
		ShmCell{Fault: ShmHang, Op: comm.OpBarrier, Victim: 3, Size: size},
		ShmCell{Fault: ShmHang, Op: comm.OpAllgatherv, Victim: 0, Size: size},
		ShmCell{Fault: ShmStale, Size: size},
		ShmCell{Fault: ShmPermissions, Size: size},
		ShmCell{Fault: ShmNeverArrives, Victim: 3, Size: size},
		ShmCell{Fault: ShmSecondJob, Size: size},
		ShmCell{Fault: ShmLate, Size: size},
		ShmCell{Fault: ShmLongWait, Victim: 1, Size: 2},
	)
	return cells
}

// RunShmMatrix runs cells as subtests. The test binary's TestMain must
// call ShmChild when ShmChildEnv is set.
func RunShmMatrix(t *testing.T, cells []ShmCell) {
	for _, c := range cells {
		t.Run(c.Name(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			name := ShmName(t)
			t.Cleanup(func() { _ = os.Remove(shm.SegmentPath("", name)) })
			switch c.Fault {
			case ShmCrash:
				shmCrash(t, ctx, name, c)
			case ShmHang:
				shmHang(t, ctx, name, c)
			case ShmStale:
				shmStale(t, ctx, name, c)
			case ShmPermissions:
				shmPermissions(t, ctx, name, c)
			case ShmNeverArrives:
				shmNeverArrives(t, ctx, name, c)
			case ShmSecondJob:
				shmSecondJob(t, ctx, name, c)
			case ShmLate:
				shmLate(t, ctx, name, c)
			case ShmLongWait:
				shmLongWait(t, ctx, name, c)
			default:
				t.Fatalf("unknown fault %q", c.Fault)
			}
		})
	}
}

// readyAfter is how many iterations every rank completes before a fault.
func readyAfter(op string) string {
	if op == comm.OpAllgatherv {
		return "3"
	}
	return "200"
}

// AssertShmFailed checks a survivor's RESULT: CollectiveFailed, code 0,
// naming blamed, of failure class cause.
func AssertShmFailed(t testing.TB, p *ShmProc, res ShmResult, blamed int, cause string) {
	t.Helper()
	assert.Equal(t, "CollectiveFailed", res.Fields["type"], "rank %d: %s", p.Rank, res.Msg)
	assert.Equal(t, 0, res.Int(t, "code"), "rank %d code", p.Rank)
	assert.Equal(t, blamed, res.Int(t, "rank"), "rank %d names the wrong rank: %s", p.Rank, res.Msg)
	assert.Equal(t, cause, res.Fields["cause"], "rank %d's cause: %s", p.Rank, res.Msg)
}

// shmCrash: SIGKILL the victim mid-loop with the default 60 s timeout:
// every survivor fails naming it (its pidfd fired: the timeout plays no
// part), exits at once without closing, and the last one removes the
// segment.
func shmCrash(t *testing.T, ctx context.Context, name string, c ShmCell) {
	procs := StartShmJob(t, ctx, name, Repeat(c.Op, c.Size), nil, "COBRE_SHM_TIMEOUT_SECS=60", ShmReadyEnv+"="+readyAfter(c.Op))
	for _, p := range procs {
		p.Await(t, ctx, "READY ")
	}
	killed := procs[c.Victim].Signal(t, os.Kill)
	for _, p := range procs {
		if p.Rank == c.Victim {
			continue
		}
		res := ParseShmResult(t, p.Await(t, ctx, "RESULT "))
		detect := res.At.Sub(killed)
		t.Logf("detection rank=%d ms=%.2f named=%s cause=%s msg=%q", p.Rank, float64(detect)/1e6, res.Fields["rank"], res.Fields["cause"], res.Msg)
		AssertShmFailed(t, p, res, c.Victim, "exited")
		assert.Less(t, detect, 5*time.Second, "rank %d detected the kill late", p.Rank)
	}
	for _, p := range procs {
		code := p.Wait(t, ctx)
		if p.Rank == c.Victim {
			assert.Equal(t, -1, code, "the killed rank")
			continue
		}
		assert.Equal(t, ShmExitExpected, code, "rank %d exit\n%s", p.Rank, p.Dump())
	}
	assert.True(t, SegmentGone(name), "segment %s left after the job ended", shm.SegmentPath("", name))
}

// shmHang: SIGSTOP the victim with a 1 s timeout: every other rank fails
// naming it after about the timeout; resumed, the victim fails too; the
// segment is removed.
func shmHang(t *testing.T, ctx context.Context, name string, c ShmCell) {
	const timeout = time.Second
	procs := StartShmJob(t, ctx, name, Repeat(c.Op, c.Size), nil, "COBRE_SHM_TIMEOUT_SECS=1", ShmReadyEnv+"="+readyAfter(c.Op))
	for _, p := range procs {
		p.Await(t, ctx, "READY ")
	}
	stopped := procs[c.Victim].Signal(t, syscall.SIGSTOP)
	for _, p := range procs {
		if p.Rank == c.Victim {
			continue
		}
		res := ParseShmResult(t, p.Await(t, ctx, "RESULT "))
		detect := res.At.Sub(stopped)
		t.Logf("detection rank=%d ms=%.1f named=%s cause=%s msg=%q", p.Rank, float64(detect)/1e6, res.Fields["rank"], res.Fields["cause"], res.Msg)
		AssertShmFailed(t, p, res, c.Victim, "deadline")
		assert.GreaterOrEqual(t, detect, timeout*3/4, "rank %d failed before the timeout", p.Rank)
		assert.LessOrEqual(t, detect, timeout+1500*time.Millisecond, "rank %d detected the hang late", p.Rank)
	}
	procs[c.Victim].Signal(t, syscall.SIGCONT)
	res := ParseShmResult(t, procs[c.Victim].Await(t, ctx, "RESULT "))
	assert.Equal(t, "CollectiveFailed", res.Fields["type"], "resumed rank %d: %s", c.Victim, res.Msg)
	assert.Equal(t, c.Victim, res.Int(t, "rank"), "the resumed rank learns it was blamed: %s", res.Msg)
	for _, p := range procs {
		assert.Equal(t, ShmExitExpected, p.Wait(t, ctx), "rank %d exit\n%s", p.Rank, p.Dump())
	}
	assert.True(t, SegmentGone(name), "segment left after the job ended")
}

// shmStale: a job killed whole (every rank SIGKILLed) leaves its segment;
// the next job with the name finds it unused, replaces it, and runs.
func shmStale(t *testing.T, ctx context.Context, name string, c ShmCell) {
	procs := StartShmJob(t, ctx, name, Repeat(comm.OpAllreduce, c.Size), nil, ShmReadyEnv+"=50")
	for _, p := range procs {
		p.Await(t, ctx, "READY ")
	}
	// Stop every rank before killing any: a rank that sees a peer die
	// (its pidfd fires) fails at once and exits, before its own SIGKILL
	// could reach it, and a stopped peer is noticed only at the timeout.
	for _, p := range procs {
		p.Signal(t, syscall.SIGSTOP)
	}
	for _, p := range procs {
		p.Signal(t, os.Kill)
	}
	for _, p := range procs {
		assert.Equal(t, -1, p.Wait(t, ctx), "rank %d: a signal must end it\n%s", p.Rank, p.Dump())
	}
	require.False(t, SegmentGone(name), "the killed job must leave its segment for this cell to mean anything")
	procs = StartShmJob(t, ctx, name, Repeat(comm.OpAllgatherv, c.Size), nil, ShmItersEnv+"=5")
	replaced := 0
	for _, p := range procs {
		start := p.Await(t, ctx, "START ")
		if strings.Contains(start.Text, "replaced=true") {
			replaced++
		}
		p.Await(t, ctx, "DONE ")
	}
	assert.Equal(t, 1, replaced, "exactly one rank (the first to arrive) replaces the stale segment")
	for _, p := range procs {
		assert.Equal(t, ShmExitOK, p.Wait(t, ctx), "rank %d exit\n%s", p.Rank, p.Dump())
	}
	assert.True(t, SegmentGone(name), "segment left after the job ended")
}

// shmPermissions: the segment's file belongs to another user (mode 0600):
// every rank fails start-up at once with a permission error, and the file
// is left exactly as it was. As root, the ranks switch to user 65534; as
// another user, the file's mode is 0.
func shmPermissions(t *testing.T, ctx context.Context, name string, c ShmCell) {
	path := shm.SegmentPath("", name)
	content := []byte("another user's segment\n")
	require.NoError(t, os.WriteFile(path, content, 0o600))
	env := []string{"COBRE_TCP_CONNECT_TIMEOUT_MS=5000"}
	if os.Geteuid() == 0 {
		env = append(env, ShmUIDEnv+"=65534")
	} else {
		require.NoError(t, os.Chmod(path, 0))
	}
	before, err := os.Stat(path)
	require.NoError(t, err)
	began := time.Now()
	procs := StartShmJob(t, ctx, name, Repeat(comm.OpBarrier, c.Size), nil, env...)
	for _, p := range procs {
		res := ParseShmResult(t, p.Await(t, ctx, "RESULT "))
		t.Logf("rank=%d after_ms=%d msg=%q", p.Rank, res.At.Sub(began).Milliseconds(), res.Msg)
		assert.Equal(t, OpStart, res.Fields["op"], "rank %d", p.Rank)
		assert.Equal(t, "InitializationFailed", res.Fields["type"], "rank %d: %s", p.Rank, res.Msg)
		assert.Equal(t, "permission", res.Fields["cause"], "rank %d: %s", p.Rank, res.Msg)
		assert.Less(t, res.At.Sub(began), 4*time.Second, "rank %d waited for the connect timeout", p.Rank)
		assert.Equal(t, ShmExitExpected, p.Wait(t, ctx), "rank %d exit\n%s", p.Rank, p.Dump())
	}
	after, err := os.Stat(path)
	require.NoError(t, err, "the other user's segment must stay")
	assert.Equal(t, before.ModTime(), after.ModTime())
	assert.Equal(t, before.Mode(), after.Mode())
	require.NoError(t, os.Chmod(path, 0o600))
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, content, got, "the other user's segment was modified")
}

// shmNeverArrives: the victim never starts: every rank that joined fails
// start-up naming it once the connect timeout (1 s) has passed, and the
// segment is removed.
func shmNeverArrives(t *testing.T, ctx context.Context, name string, c ShmCell) {
	const connect = time.Second
	var ranks []int
	for r := range c.Size {
		if r != c.Victim {
			ranks = append(ranks, r)
		}
	}
	procs := StartShmJob(t, ctx, name, Repeat(comm.OpBarrier, c.Size), ranks, "COBRE_TCP_CONNECT_TIMEOUT_MS=1000")
	for _, r := range ranks {
		p := procs[r]
		res := ParseShmResult(t, p.Await(t, ctx, "RESULT "))
		took := time.Duration(res.Int(t, "call_ms")) * time.Millisecond
		t.Logf("rank=%d call_ms=%d msg=%q", p.Rank, took.Milliseconds(), res.Msg)
		assert.Equal(t, "InitializationFailed", res.Fields["type"], "rank %d: %s", p.Rank, res.Msg)
		assert.Equal(t, c.Victim, res.Int(t, "rank"), "rank %d names the wrong rank: %s", p.Rank, res.Msg)
		assert.Equal(t, "missing", res.Fields["cause"], "rank %d: %s", p.Rank, res.Msg)
		assert.Contains(t, res.Msg, fmt.Sprintf("missing ranks [%d]", c.Victim))
		assert.GreaterOrEqual(t, took, connect*3/4, "rank %d gave up before the connect timeout", p.Rank)
		assert.Less(t, took, connect+time.Second, "rank %d gave up late", p.Rank)
	}
	for _, r := range ranks {
		assert.Equal(t, ShmExitExpected, procs[r].Wait(t, ctx), "rank %d exit\n%s", r, procs[r].Dump())
	}
	assert.True(t, SegmentGone(name), "segment left after the start-up failed")
}

// shmSecondJob: while a job runs, a second job with the same name starts:
// every one of its ranks is refused at once, well within the connect
// timeout, and the first job runs on untouched and ends cleanly.
func shmSecondJob(t *testing.T, ctx context.Context, name string, c ShmCell) {
	first := StartShmJob(t, ctx, name, Repeat(comm.OpAllreduce, c.Size), nil, ShmReadyEnv+"=100", ShmStoppableEnv+"=1")
	for _, p := range first {
		p.Await(t, ctx, "READY ")
	}
	began := time.Now()
	second := StartShmJob(t, ctx, name, Repeat(comm.OpAllreduce, c.Size), nil, "COBRE_TCP_CONNECT_TIMEOUT_MS=5000")
	for _, p := range second {
		res := ParseShmResult(t, p.Await(t, ctx, "RESULT "))
		t.Logf("second job rank=%d after_ms=%d msg=%q", p.Rank, res.At.Sub(began).Milliseconds(), res.Msg)
		assert.Equal(t, "InitializationFailed", res.Fields["type"], "rank %d: %s", p.Rank, res.Msg)
		assert.Equal(t, "inuse", res.Fields["cause"], "rank %d: %s", p.Rank, res.Msg)
		assert.Less(t, res.At.Sub(began), 5*time.Second, "rank %d was refused after the connect timeout", p.Rank)
		assert.Equal(t, ShmExitExpected, p.Wait(t, ctx), "second job's rank %d exit\n%s", p.Rank, p.Dump())
	}
	for _, p := range first {
		p.Stop(t)
	}
	for _, p := range first {
		done := p.Await(t, ctx, "DONE ")
		assert.Contains(t, done.Text, "close=<nil>", "first job's rank %d", p.Rank)
		assert.Equal(t, ShmExitOK, p.Wait(t, ctx), "first job's rank %d exit\n%s", p.Rank, p.Dump())
	}
	assert.True(t, SegmentGone(name), "segment left after the first job ended")
}

// shmLate: ranks start in reverse order, 300 ms apart: start-up waits for
// all of them and the job runs.
func shmLate(t *testing.T, ctx context.Context, name string, c ShmCell) {
	procs := make([]*ShmProc, c.Size)
	for r := c.Size - 1; r >= 0; r-- {
		delay := time.Duration(c.Size-1-r) * 300 * time.Millisecond
		p := StartShmJob(t, ctx, name, Repeat(comm.OpAllreduce, c.Size), []int{r},
			ShmItersEnv+"=20", ShmDelayEnv+"="+delay.String(), "COBRE_TCP_CONNECT_TIMEOUT_MS=10000")
		procs[r] = p[r]
	}
	for _, p := range procs {
		start := p.Await(t, ctx, "START ")
		t.Logf("rank=%d %s", p.Rank, start.Text)
		p.Await(t, ctx, "DONE ")
		assert.Equal(t, ShmExitOK, p.Wait(t, ctx), "rank %d exit\n%s", p.Rank, p.Dump())
	}
	assert.True(t, SegmentGone(name), "segment left after the job ended")
}

// shmLongWait: rank 0 waits 10 s in its first barrier for a peer that
// computes for 10 s after start-up. The cell reports rank 0's CPU time
// (the whole process, start-up included) and fails only if it used more
// than a quarter of a core over the wait (the target is 5%: see the
// README).
func shmLongWait(t *testing.T, ctx context.Context, name string, c ShmCell) {
	const wait = 10 * time.Second
	procs := make([]*ShmProc, c.Size)
	for r := range c.Size {
		env := []string{ShmItersEnv + "=1", "COBRE_SHM_TIMEOUT_SECS=60"}
		if r == c.Victim {
			env = append(env, ShmPauseEnv+"="+wait.String())
		}
		procs[r] = StartShmJob(t, ctx, name, Repeat(comm.OpBarrier, c.Size), []int{r}, env...)[r]
	}
	for _, p := range procs {
		p.Await(t, ctx, "DONE ")
		assert.Equal(t, ShmExitOK, p.Wait(t, ctx), "rank %d exit\n%s", p.Rank, p.Dump())
	}
	ru := procs[0].Rusage()
	require.NotNil(t, ru)
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	share := float64(cpu) / float64(wait)
	t.Logf("waiting rank's CPU time (whole process): %v (user %v, system %v) over a %v wait: %.2f%% of a core",
		cpu, time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano()), wait, 100*share)
	assert.Less(t, share, 0.25, "the waiting rank burned %.0f%% of a core", 100*share)
	assert.True(t, SegmentGone(name), "segment left after the job ended")
}
