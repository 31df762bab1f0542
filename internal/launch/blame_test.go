package launch

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/starcomm/starcomm/internal/errfile"
)

// t0 is the time the synthetic jobs below start at.
var t0 = time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)

// at returns t0 + ms milliseconds.
func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// Synthetic ends (exited with a code, killed by a signal). order is the
// place among the ends, and the pid is 100+order; signalled is when the
// launcher signalled the rank, in ms after t0 (< 0: never).
func exited(code, order, signalled int) End {
	e := End{PID: 100 + order, Code: code, How: "exited with code " + strconv.Itoa(code), Order: order}
	if signalled >= 0 {
		e.Signalled = at(signalled)
	}
	return e
}

func killed(sig string, code, order, signalled int, byLauncher bool) End {
	e := End{PID: 100 + order, Code: code, How: "was killed by signal " + sig, Order: order, Stopped: byLauncher}
	if signalled >= 0 {
		e.Signalled = at(signalled)
	}
	return e
}

// rec is a record of rank r at ms after t0 blaming b.
func rec(r, ms, b int) *errfile.Record {
	return &errfile.Record{Time: at(ms), Rank: r, Size: 4, Blamed: b, Op: "allreduce", Message: "msg of rank " + strconv.Itoa(r) + "\nsecond line"}
}

func TestBlame(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		ends     []End
		recs     []*errfile.Record
		peer     int
		wantRoot int
		wantCode int
		wantBy   []int
		wantFrom bool // ByRecord
		wantOwn  bool
		first    int
	}{
		{
			// The issue: rank 2 panics (no record), rank 1 is reaped first.
			name:     "panic/rank1-first",
			ends:     []End{exited(1, 2, 5), exited(1, 0, -1), exited(2, 1, 5), killed("SIGTERM", 143, 3, 5, true)},
			recs:     []*errfile.Record{rec(0, 2, 2), rec(1, 3, 2), nil, rec(3, 4, 2)},
			wantRoot: 2, wantCode: 2, wantBy: []int{0, 1, 3}, wantFrom: true, first: 1,
		},
		{
			name:     "chain",
			ends:     []End{exited(1, 0, -1), exited(1, 1, 5), killed("SIGTERM", 143, 2, 5, true), exited(3, 3, 5)},
			recs:     []*errfile.Record{rec(0, 1, 1), rec(1, 2, 3), nil, nil},
			wantRoot: 3, wantCode: 3, wantBy: []int{1}, wantFrom: true, first: 0,
		},
		{
			name:     "chain-to-self-blame",
			ends:     []End{exited(1, 0, -1), exited(1, 1, 5), exited(0, 2, 5)},
			recs:     []*errfile.Record{rec(0, 1, 1), rec(1, 2, 1), nil},
			wantRoot: 1, wantCode: 1, wantBy: []int{0}, wantFrom: true, wantOwn: true, first: 0,
		},
		{
			name:     "unknown-blame",
			ends:     []End{exited(1, 1, 5), exited(5, 0, -1)},
			recs:     []*errfile.Record{rec(0, 3, 1), rec(1, 1, -1)},
			wantRoot: 1, wantCode: 5, wantBy: []int{0}, wantFrom: true, wantOwn: true, first: 1,
		},
		{
			name:     "blame-out-of-range",
			ends:     []End{exited(4, 0, -1), exited(1, 1, 5)},
			recs:     []*errfile.Record{rec(0, 1, 7), nil},
			wantRoot: 0, wantCode: 4, wantFrom: true, wantOwn: true, first: 0,
		},
		{
			// 0 blames 1, 1 blames 0: the walk stops before closing the cycle.
			name:     "cycle-of-two",
			ends:     []End{exited(1, 0, -1), exited(6, 1, 5)},
			recs:     []*errfile.Record{rec(0, 1, 1), rec(1, 2, 0)},
			wantRoot: 1, wantCode: 6, wantBy: []int{0}, wantFrom: true, wantOwn: true, first: 0,
		},
		{
			name:     "cycle-of-three",
			ends:     []End{exited(1, 1, 5), exited(1, 0, -1), exited(7, 2, 5)},
			recs:     []*errfile.Record{rec(0, 2, 1), rec(1, 1, 2), rec(2, 3, 0)},
			wantRoot: 0, wantCode: 1, wantBy: []int{2}, wantFrom: true, wantOwn: true, first: 1,
		},
		{
			name:     "no-records",
			ends:     []End{killed("SIGTERM", 143, 1, 5, true), exited(3, 0, -1), exited(1, 2, 5)},
			recs:     make([]*errfile.Record, 3),
			wantRoot: 1, wantCode: 3, first: 1,
		},
		{
			name:     "no-records/nil-slice",
			ends:     []End{exited(9, 0, -1)},
			wantRoot: 0, wantCode: 9, first: 0,
		},
		{
			// starbench's exit code 3: "another rank failed first".
			name:     "no-records/peer-failed-hint",
			ends:     []End{exited(3, 0, -1), exited(1, 1, 5), killed("SIGTERM", 143, 2, 5, true)},
			peer:     3,
			wantRoot: 1, wantCode: 1, first: 0,
		},
		{
			name:     "no-records/only-peer-failed",
			ends:     []End{exited(3, 0, -1), exited(3, 1, 5)},
			peer:     3,
			wantRoot: 0, wantCode: 3, first: 0,
		},
		{
			// Rank 2 hung: rank 0 timed out and blamed it, the launcher
			// stopped rank 2. The exit code is the first failure's.
			name:     "hung-root-stopped",
			ends:     []End{exited(1, 0, -1), killed("SIGTERM", 143, 1, 5, true), killed("SIGKILL", 137, 3, 5, true), killed("SIGTERM", 143, 2, 5, true)},
			recs:     []*errfile.Record{rec(0, 1, 2), nil, nil, nil},
			wantRoot: 2, wantCode: 1, wantBy: []int{0}, wantFrom: true, first: 0,
		},
		{
			name:     "signal-killed-root",
			ends:     []End{exited(1, 1, 5), killed("SIGSEGV", 139, 0, -1, false), exited(1, 2, 5)},
			recs:     []*errfile.Record{rec(0, 1, 1), nil, rec(2, 2, 1)},
			wantRoot: 1, wantCode: 139, wantBy: []int{0, 2}, wantFrom: true, first: 1,
		},
		{
			// A SIGKILL the launcher did not send (the OOM killer) is the
			// rank's own failure even after the launcher's SIGTERM.
			name:     "foreign-sigkill-after-stop",
			ends:     []End{exited(1, 0, -1), killed("SIGKILL", 137, 1, 5, false)},
			recs:     []*errfile.Record{rec(0, 1, 1), nil},
			wantRoot: 1, wantCode: 137, wantBy: []int{0}, wantFrom: true, first: 0,
		},
		{
			// Records written after the launcher signalled their rank (a
			// collective cancelled by the stop) decide nothing, but a
			// post-stop accusation of the root cause is still listed.
			name:     "post-stop-records-set-aside",
			ends:     []End{exited(1, 1, 10), exited(1, 2, 10), exited(4, 0, -1), exited(1, 3, 10)},
			recs:     []*errfile.Record{rec(0, 11, 0), rec(1, 12, -1), nil, rec(3, 13, 2)},
			wantRoot: 2, wantCode: 4, wantBy: []int{3}, first: 2,
		},
		{
			// Earliest record wins: rank 3's accusation of 1 is older than
			// rank 0's of 2.
			name:     "earliest-record-wins",
			ends:     []End{exited(1, 0, -1), exited(5, 2, 9), exited(6, 1, 9), exited(1, 3, 9)},
			recs:     []*errfile.Record{rec(0, 5, 2), nil, nil, rec(3, 4, 1)},
			wantRoot: 1, wantCode: 5, wantBy: []int{3}, wantFrom: true, first: 0,
		},
		{
			// The accused rank exited 0 (it left the job early): it is the
			// root cause, the exit code is the first failure's.
			name:     "root-exited-zero",
			ends:     []End{exited(1, 1, -1), exited(0, 0, -1)},
			recs:     []*errfile.Record{rec(0, 1, 1), nil},
			wantRoot: 1, wantCode: 1, wantBy: []int{0}, wantFrom: true, first: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v := Blame(tt.ends, tt.recs, tt.peer)
			if v.Root != tt.wantRoot || v.Code != tt.wantCode || v.First != tt.first || v.ByRecord != tt.wantFrom || (v.Own != nil) != tt.wantOwn {
				t.Errorf("Blame: root %d, code %d, first %d, by record %v, own %v; want %d, %d, %d, %v, %v",
					v.Root, v.Code, v.First, v.ByRecord, v.Own != nil, tt.wantRoot, tt.wantCode, tt.first, tt.wantFrom, tt.wantOwn)
			}
			if !slices.Equal(v.BlamedBy, tt.wantBy) {
				t.Errorf("blamed by %v, want %v", v.BlamedBy, tt.wantBy)
			}
			if (v.Accusation != nil) != (len(v.BlamedBy) > 0) {
				t.Errorf("accusation %v with blamed by %v", v.Accusation, v.BlamedBy)
			}
		})
	}
}

func TestBlameNoFailure(t *testing.T) {
	t.Parallel()
	v := Blame([]End{exited(0, 0, -1), exited(0, 1, -1)}, nil, 0)
	if v.Root != -1 || v.First != -1 || v.Code == 0 {
		t.Errorf("Blame of a job without failures = root %d, first %d, code %d; want -1, -1, non-zero", v.Root, v.First, v.Code)
	}
}

func TestSummary(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 200) // 400 bytes
	tests := []struct {
		name string
		ends []End
		recs []*errfile.Record
		want string
	}{
		{
			name: "accused/first-differs",
			ends: []End{exited(1, 2, 5), exited(1, 0, -1), exited(2, 1, 5), exited(1, 3, 5)},
			recs: []*errfile.Record{rec(0, 2, 2), rec(1, 3, 2), nil, rec(3, 4, 2)},
			want: `rank 2 (pid 101) exited with code 2: root cause (blamed by ranks 0, 1, 3: "msg of rank 0 ..."); rank 1 failed first`,
		},
		{
			name: "own-record/blamed-by-one",
			ends: []End{exited(3, 0, -1), exited(1, 1, 5)},
			recs: []*errfile.Record{rec(0, 1, 0), rec(1, 2, 0)},
			want: `rank 0 (pid 100) exited with code 3: root cause (its error: "msg of rank 0 ..."; blamed by rank 1)`,
		},
		{
			name: "stopped-root",
			ends: []End{exited(1, 0, -1), killed("SIGKILL", 137, 1, 5, true)},
			recs: []*errfile.Record{rec(0, 1, 1), nil},
			want: `rank 1 (pid 101) was stopped by starrun (killed by signal SIGKILL): root cause (blamed by rank 0: "msg of rank 0 ..."); rank 0 failed first; exit code 1 is rank 0's`,
		},
		{
			name: "no-records",
			ends: []End{exited(3, 0, -1), killed("SIGTERM", 143, 1, 5, true)},
			want: `rank 0 (pid 100) exited with code 3: root cause (the first rank to fail; no rank left an error record)`,
		},
		{
			name: "only-post-stop-records",
			ends: []End{exited(3, 0, -1), exited(1, 1, 5)},
			recs: []*errfile.Record{nil, rec(1, 6, 1)},
			want: `rank 0 (pid 100) exited with code 3: root cause (the first rank to fail; no error record written before the ranks were stopped names it)`,
		},
		{
			name: "long-message",
			ends: []End{exited(3, 0, -1)},
			recs: []*errfile.Record{{Time: at(1), Blamed: 0, Message: long}},
			want: `rank 0 (pid 100) exited with code 3: root cause (its error: "` + long[:300] + ` ...")`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := Blame(tt.ends, tt.recs, 0).Summary("starrun", tt.ends); got != tt.want {
				t.Errorf("summary\n got %s\nwant %s", got, tt.want)
			}
		})
	}
}

// TestRankList: a few ranks are listed, sorted; many are written as ranges.
func TestRankList(t *testing.T) {
	t.Parallel()
	many := make([]int, 0, 63)
	for r := 63; r >= 1; r-- {
		many = append(many, r)
	}
	for _, tc := range []struct {
		ranks []int
		want  string
	}{
		{[]int{3}, "rank 3"},
		{[]int{3, 0, 1}, "ranks 0, 1, 3"},
		{many, "ranks 1-63"},
	} {
		if got := rankList(tc.ranks); got != tc.want {
			t.Errorf("rankList(%v) = %q, want %q", tc.ranks, got, tc.want)
		}
	}
}
