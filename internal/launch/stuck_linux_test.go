package launch

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/starcomm/starcomm/internal/launch/launchtest"
)

// TestRunStuckStdoutOnly: with standard output not read and standard
// error a file of its own, the launcher's messages still reach standard
// error (the two share a lock only when they may be one file).
func TestRunStuckStdoutOnly(t *testing.T) {
	t.Parallel()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh to run fake ranks with")
	}
	dir := t.TempDir()
	outR, outW, err := os.Pipe() // never read
	if err != nil {
		t.Fatal(err)
	}
	defer outR.Close()
	defer outW.Close()
	errf, err := os.Create(dir + "/stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer errf.Close()
	// A one-page pipe, full before the signal: the copier of standard
	// output then blocks in its write.
	size, err := unix.FcntlInt(outW.Fd(), unix.F_SETPIPE_SZ, 4096)
	if err != nil {
		t.Fatal(err)
	}
	sigs := make(chan os.Signal, 1)
	cfg := Config{
		Name: "test", Command: []string{sh, "-c", `touch "$0/started-$COBRE_TCP_RANK"; while :; do echo "rank $COBRE_TCP_RANK says a lot"; done`, dir},
		Ranks: 2, Grace: time.Minute, Stdout: outW, Stderr: errf, Signals: sigs,
	}
	done := make(chan Result, 1)
	go func() { done <- Run(cfg) }()
	for r := range 2 {
		if _, err := launchtest.WaitFile(fmt.Sprintf("%s/started-%d", dir, r)); err != nil {
			t.Fatal(err)
		}
	}
	for {
		n, err := unix.IoctlGetInt(int(outR.Fd()), unix.TIOCINQ) // FIONREAD
		if err != nil {
			t.Fatal(err)
		}
		// Full but for less than a line: a line the copier writes then
		// waits for room (a pipe's page takes short writes one after
		// another, so it seldom fills to the last byte).
		if n > size-256 {
			break
		}
		time.Sleep(time.Millisecond) // polling the condition, as WaitFile does
	}
	sigs <- syscall.SIGINT
	select {
	case res := <-done:
		if res.Code != 130 {
			t.Errorf("result %+v, want 130 after the forwarded SIGINT", res)
		}
	case <-time.After(jobTimeout):
		t.Fatalf("the job did not end within %v with its standard output stuck", jobTimeout)
	}
	b, err := os.ReadFile(dir + "/stderr")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "test: received SIGINT; forwarding it to all ranks\n") {
		t.Errorf("standard error lacks the launcher's message:\n%s", b)
	}
}
