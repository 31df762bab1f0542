package launchtest

// panicOrders are the orders in which the four ranks of PanicScenario end;
// half of them start with rank 1, the rank a naive launcher would blame.
var panicOrders = [][]int{
	{1, 2, 0, 3}, {1, 0, 3, 2}, {1, 3, 0, 2}, {2, 1, 0, 3}, {0, 1, 3, 2},
	{3, 2, 1, 0}, {1, 2, 3, 0}, {0, 2, 3, 1}, {1, 0, 2, 3}, {2, 3, 0, 1},
}

// PanicScenario returns script i (any i >= 0) of a 4-rank job in which
// rank 2 panics (exit code 2, no record) and ranks 0, 1 and 3 each write a
// record blaming rank 2 and exit 1, in varying orders:
//
//   - the ranks end in panicOrders[i % 10] (so rank 1 often ends first);
//     a rank ending after the first failure waits for the launcher's
//     SIGTERM first, so the launcher sees that failure first;
//   - for even i every record is written before any rank ends, in a
//     rotating order; for odd i each rank writes its record just before it
//     ends (so some may be written after the launcher signalled their rank);
//   - when i % 4 == 3, rank 3 does not exit: it waits for the launcher's
//     SIGTERM and dies of it.
//
// Whatever the order, the launcher must name rank 2 and exit 2.
func PanicScenario(i int) []Step {
	order := panicOrders[i%len(panicOrders)]
	accusers := []int{0, 1, 3}
	var script []Step
	if i%2 == 0 {
		for k := range accusers {
			script = append(script, Step{Rank: accusers[(k+i/2)%3], Do: "record 2"})
		}
	}
	failed := false // a rank has ended on its own: the launcher stops the others
	end := func(r int, do string) {
		if failed {
			// Be stopped first, so that the launcher sees the first
			// failure before this end, as the order says.
			script = append(script, Step{Rank: r, Do: "stopped"})
		}
		script = append(script, Step{Rank: r, Do: do})
		failed = failed || do != "hang"
	}
	for _, r := range order {
		switch {
		case r == 2:
			end(2, "panic")
			continue
		case i%2 == 1:
			script = append(script, Step{Rank: r, Do: "record 2"})
		}
		if r == 3 && i%4 == 3 {
			end(r, "hang")
		} else {
			end(r, "exit 1")
		}
	}
	return script
}

// FirstEnd returns the rank whose step is the script's first "exit",
// "panic" or "killself": the first rank to fail when that step's exit code
// is not 0, and -1 when there is none.
func FirstEnd(script []Step) int {
	for _, s := range script {
		if endsRank(s.Do) {
			return s.Rank
		}
	}
	return -1
}
