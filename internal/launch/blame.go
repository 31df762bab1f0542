package launch

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/internal/errfile"
)

// End is how one rank's process ended, as the blame rule sees it.
type End struct {
	// PID is the rank's process id.
	PID int
	// Code is the launcher's exit code for the rank's end: its exit code,
	// or 128+n when signal n killed it. 0 is success.
	Code int
	// How describes the end for messages: "exited with code 2", "was
	// killed by signal SIGSEGV".
	How string
	// Stopped is true when a signal the launcher sent the rank (to stop
	// the job, a forwarded signal, the SIGKILL after the grace period)
	// killed it: it did not end on its own.
	Stopped bool
	// Signalled is when the launcher first sent the rank a signal; zero if
	// it never did.
	Signalled time.Time
	// Order is the rank's place among the ends as the launcher saw them,
	// 0 for the first.
	Order int
}

// failedOnItsOwn reports whether the rank failed without the launcher
// killing it: it exited non-zero (even after being told to stop: its own
// code path chose the code) or died of a signal the launcher did not send.
func (e End) failedOnItsOwn() bool { return e.Code != 0 && !e.Stopped }

// Verdict is what the blame rule concludes about a failed job.
type Verdict struct {
	// Root is the root-cause rank, -1 when no rank failed on its own.
	Root int
	// Code is the job's exit code: Root's own code when it failed on its
	// own, else the code of First.
	Code int
	// First is the first rank, in the order the launcher saw the ends, that
	// failed on its own (what stopped the job); -1 when none did.
	First int
	// ByRecord is true when error records led to Root, false when Root is
	// the fallback (no usable record).
	ByRecord bool
	// Own is Root's own record when it has one written before the launcher
	// signalled it; nil otherwise.
	Own *errfile.Record
	// BlamedBy lists, in increasing order, the other ranks whose records
	// blame Root (records written after the launcher signalled their rank
	// count here too).
	BlamedBy []int
	// Accusation is the earliest of those records; nil when there is none.
	Accusation *errfile.Record
	// Records is how many ranks left a record at all.
	Records int
}

// Blame applies the blame rule to a job whose ranks ended as ends (indexed
// by rank) after leaving the error records recs (indexed by rank, nil for a
// rank without one). peerFailedCode, when not 0, is an exit code by which
// ranks say that another rank failed first; it only matters when no record
// decides.
//
// The rule:
//
//  1. A record a rank wrote after the launcher first signalled it may be a
//     consequence of being stopped (a cancelled collective), not a cause:
//     it is set aside, except for the list of ranks blaming the root cause.
//  2. Start at the earliest remaining record (by Time; ties by rank). While
//     the current rank's record blames another rank b (0 <= Blamed < size,
//     Blamed != its own rank), move to b, unless b was visited already (a
//     cycle: stop where we are). Stop at a rank whose record blames itself,
//     blames -1 (unknown) or is missing. That rank is the root cause.
//  3. Without any such record, the root cause is the first rank (in the
//     order of ends) that failed on its own, preferring one whose exit code
//     is not peerFailedCode.
//  4. The exit code is the root cause's own when it failed on its own,
//     otherwise (the launcher had to stop it, or it exited 0) the code of
//     the first rank that failed on its own.
func Blame(ends []End, recs []*errfile.Record, peerFailedCode int) Verdict {
	n := len(ends)
	rec := func(r int) *errfile.Record {
		if r < 0 || r >= len(recs) {
			return nil
		}
		return recs[r]
	}
	// usable is rank r's record unless it was written after the launcher
	// signalled r.
	usable := func(r int) *errfile.Record {
		x := rec(r)
		if x == nil || (!ends[r].Signalled.IsZero() && x.Time.After(ends[r].Signalled)) {
			return nil
		}
		return x
	}

	v := Verdict{Root: -1, First: -1}
	hinted := -1 // the first own failure not marked with peerFailedCode
	for r, e := range ends {
		if rec(r) != nil {
			v.Records++
		}
		if !e.failedOnItsOwn() {
			continue
		}
		if v.First < 0 || e.Order < ends[v.First].Order {
			v.First = r
		}
		if (peerFailedCode == 0 || e.Code != peerFailedCode) && (hinted < 0 || e.Order < ends[hinted].Order) {
			hinted = r
		}
	}

	start := -1
	for r := range n {
		if x := usable(r); x != nil && (start < 0 || x.Time.Before(usable(start).Time)) {
			start = r
		}
	}
	switch {
	case start >= 0:
		v.ByRecord = true
		cur := start
		visited := map[int]bool{cur: true}
		for {
			x := usable(cur)
			if x == nil {
				break
			}
			b := x.Blamed
			if b < 0 || b >= n || b == cur || visited[b] {
				break
			}
			visited[b] = true
			cur = b
		}
		v.Root = cur
	case hinted >= 0:
		v.Root = hinted
	default:
		v.Root = v.First
	}
	if v.Root < 0 {
		v.Code = 1
		return v
	}

	v.Own = usable(v.Root)
	for r := range n {
		if x := rec(r); x != nil && r != v.Root && x.Blamed == v.Root {
			v.BlamedBy = append(v.BlamedBy, r)
			if v.Accusation == nil || x.Time.Before(v.Accusation.Time) {
				v.Accusation = x
			}
		}
	}

	switch {
	case ends[v.Root].failedOnItsOwn():
		v.Code = ends[v.Root].Code
	case v.First >= 0:
		v.Code = ends[v.First].Code
	default:
		v.Code = 1
	}
	return v
}

// maxMessageBytes bounds the part of a record's message a summary quotes.
const maxMessageBytes = 300

// Summary is the launcher's last line for a failed job, without the
// command's name: the root cause, how it ended, what accuses it, and the
// rank that failed first when that is another one. For example:
//
//	rank 2 (pid 1234) exited with code 2: root cause (blamed by ranks 0, 1, 3: "comm: allreduce failed (rank 2): ...")
//
// name is the launcher's name ("starrun"), used to say that it stopped a
// rank.
func (v Verdict) Summary(name string, ends []End) string {
	if v.Root < 0 {
		return "no rank failed"
	}
	root := ends[v.Root]
	var b strings.Builder
	b.WriteString("rank " + strconv.Itoa(v.Root) + " (pid " + strconv.Itoa(root.PID) + ") ")
	if root.Stopped {
		b.WriteString("was stopped by " + name + " (" + strings.TrimPrefix(root.How, "was ") + ")")
	} else {
		b.WriteString(root.How)
	}
	b.WriteString(": root cause (")
	switch {
	case v.Own != nil:
		b.WriteString("its error: " + quoteFirstLine(v.Own.Message))
		if len(v.BlamedBy) > 0 {
			b.WriteString("; blamed by " + rankList(v.BlamedBy))
		}
	case len(v.BlamedBy) > 0:
		b.WriteString("blamed by " + rankList(v.BlamedBy) + ": " + quoteFirstLine(v.Accusation.Message))
	case v.Records == 0:
		b.WriteString("the first rank to fail; no rank left an error record")
	default:
		b.WriteString("the first rank to fail; no error record written before the ranks were stopped names it")
	}
	b.WriteString(")")
	if v.First >= 0 && v.First != v.Root {
		b.WriteString("; rank " + strconv.Itoa(v.First) + " failed first")
		if !root.failedOnItsOwn() {
			b.WriteString("; exit code " + strconv.Itoa(v.Code) + " is rank " + strconv.Itoa(v.First) + "'s")
		}
	}
	return b.String()
}

// rankList names ranks: "rank 3" or "ranks 0, 1, 3"; more than
// comm.MaxRanksItems as comm.FormatRanks writes them ("ranks 1-63").
func rankList(ranks []int) string {
	ranks = slices.Clone(ranks)
	slices.SortFunc(ranks, cmp.Compare)
	if len(ranks) > comm.MaxRanksItems {
		return "ranks " + strings.Trim(comm.FormatRanks(ranks), "[]")
	}
	ids := make([]string, len(ranks))
	for i, r := range ranks {
		ids[i] = strconv.Itoa(r)
	}
	if len(ids) == 1 {
		return "rank " + ids[0]
	}
	return "ranks " + strings.Join(ids, ", ")
}

// quoteFirstLine quotes the first line of msg, cut to maxMessageBytes
// (at a rune boundary) with "..." added when it was longer.
func quoteFirstLine(msg string) string {
	line, _, more := strings.Cut(msg, "\n")
	line = strings.TrimRight(line, "\r")
	if len(line) > maxMessageBytes {
		cut := maxMessageBytes
		for cut > 0 && !utf8.RuneStart(line[cut]) {
			cut--
		}
		line, more = line[:cut], true
	}
	if more {
		line += " ..."
	}
	return strconv.Quote(line)
}
