package main

import (
	"os/exec"
	"regexp"
	"strconv"
	"testing"
)

// TestStarrunKeepsIgnoredSignals: started with SIGHUP and SIGINT ignored
// (nohup; a shell script's background job), starrun leaves them ignored,
// and so do its ranks: it does not stop the job when the terminal closes.
// Started without, it catches them (to forward them). Read from the SigIgn
// masks in /proc of starrun (the rank's parent) and of the rank. (Go's
// runtime keeps only these two ignored; it always handles SIGQUIT.)
func TestStarrunKeepsIgnoredSignals(t *testing.T) {
	bin := starrunBinary(t)
	const ignoredBits = 1<<(1-1) | 1<<(2-1) // SIGHUP, SIGINT
	mask := regexp.MustCompile(`\[0\] (starrun|rank) SigIgn:\s+([0-9a-f]+)`)
	for _, tc := range []struct {
		name, trap string
		want       uint64
	}{
		{"ignored", `trap "" HUP INT QUIT; `, ignoredBits},
		{"caught", ``, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rank := `sed -n "s/^SigIgn:/starrun SigIgn:/p" /proc/$PPID/status; sed -n "s/^SigIgn:/rank SigIgn:/p" /proc/$$/status`
			out, err := exec.Command("sh", "-c", tc.trap+`exec "$0" -n 1 -- sh -c "$1"`, bin, rank).CombinedOutput()
			if err != nil {
				t.Fatalf("starrun: %v\n%s", err, out)
			}
			found := mask.FindAllStringSubmatch(string(out), -1)
			if len(found) != 2 {
				t.Fatalf("no SigIgn lines for starrun and its rank in:\n%s", out)
			}
			for _, m := range found {
				v, err := strconv.ParseUint(m[2], 16, 64)
				if err != nil {
					t.Fatal(err)
				}
				if got := v & ignoredBits; got != tc.want {
					t.Errorf("%s ignores %#x of SIGHUP and SIGINT (%#x), want %#x:\n%s", m[1], got, ignoredBits, tc.want, out)
				}
			}
		})
	}
}
