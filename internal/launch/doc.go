// Package launch starts and supervises the ranks of a local starcomm job:
// N processes of one command on this host, wired to a TCP coordinator
// (rank 0) on 127.0.0.1 through COBRE_* variables. It is the one launcher
// behind cmd/starrun and starbench -n, which differ only in flags and in
// how they present the ranks' output (Output) and their exit code.
//
// # Environment
//
// Rank r (0 ≤ r < N) runs the command with Config.Env (the launcher's own
// environment by default) plus
//
//	COBRE_COMM_BACKEND=tcp
//	COBRE_TCP_COORDINATOR=127.0.0.1
//	COBRE_TCP_PORT=P            (the same for every rank; a free port unless Config.Port is set)
//	COBRE_TCP_RANK=r
//	COBRE_TCP_SIZE=N
//	COBRE_TCP_TIMEOUT_SECS=S    (only when Config.Timeout is set)
//	COBRE_TCP_BIND_ADDR=ADDR    (only when Config.Bind is set)
//	COBRE_ERROR_FILE=DIR/rank-r.json
//	GOMAXPROCS=max(1, CPUs/N)   (only when the environment has no GOMAXPROCS)
//
// With Config.Backend "shm" the ranks share a segment instead, and rank r
// gets
//
//	COBRE_COMM_BACKEND=shm
//	COBRE_SHM_NAME=NAME         (Config.ShmName, or job-PID-RANDOM: unique to the job)
//	COBRE_TCP_RANK=r
//	COBRE_TCP_SIZE=N
//	COBRE_SHM_TIMEOUT_SECS=S    (only when Config.Timeout is set)
//	COBRE_ERROR_FILE=DIR/rank-r.json
//	GOMAXPROCS=max(1, CPUs/N)   (only when the environment has no GOMAXPROCS)
//
// and the launcher removes the segment's file, if any is left, when the job
// ends (the ranks remove it themselves unless every one of them was killed).
//
// These replace any inherited value of the same variable; every other
// variable passes through. A free port is found by listening on port 0 of
// the bind address (127.0.0.1 by default) and closing the socket before the
// ranks start; another program could in principle take it in between. A
// port set in Config.Port is checked free the same way before any rank
// starts (a launch error naming it otherwise). DIR
// is a directory private to the job (mode 0700, under os.TempDir), created
// before the ranks start and removed with everything in it when the job
// ends. Ranks read their standard input from /dev/null.
//
// # Error records
//
// COBRE_ERROR_FILE names the file where the library writes a rank's first
// failure (see internal/errfile: when, which rank it blames, the message),
// before the failing call returns. A rank that panics, exits by itself or is
// killed writes nothing.
//
// # Stopping
//
// Each rank runs in its own process group and is always signalled as a
// group, so processes it started die with it; when a rank exits, whatever
// it left in its group is killed; on Linux each rank also gets SIGKILL if
// the launcher dies. The first rank to fail (exit non-zero or be killed by
// a signal) stops the job: the launcher prints
//
//	NAME: rank 1 (pid 4321) exited with code 1; stopping the other ranks
//
// (after that rank's own last lines), sends SIGTERM to every other rank
// (with SIGCONT, so that a stopped rank gets it now), and SIGKILL to those
// still running once the grace period is over. A forwarded signal
// (StopSignals: SIGINT, SIGTERM, SIGHUP, SIGQUIT; NotifyStops leaves out
// those the launcher was started with ignored) stops the ranks the same
// way (with that signal); a second one kills them at once. SIGPIPE, the
// launcher's output closed, stops them with SIGTERM. The launcher's own
// messages are written from a goroutine of their own, so output that
// nobody reads never holds up a stop.
// A rank still running Config.WaitNotice after another exited 0, none
// having failed, is named once ("still waiting for rank 0 (pid 4242)").
// The launcher returns only when every rank has been reaped and its output
// copied. Outside Unix there are no process groups or signals to forward:
// stopping a rank kills it.
//
// # Blame
//
// The rank that fails first is often not the one at fault: when rank 2
// panics, ranks 0, 1 and 3 see their collectives fail and may exit before
// rank 2 is reaped. So once every rank has exited, the launcher reads the
// error records and names the root cause (Blame):
//
//   - records a rank wrote after the launcher signalled it are set aside
//     (they may be the stop's consequence, a cancelled collective);
//   - start at the earliest record; while it blames another rank, move to
//     that rank and its record (a cycle stops the walk); the rank reached
//     that blames itself, blames nobody (-1) or has no record is the root
//     cause;
//   - with no record, the root cause is the first rank that failed on its
//     own (exited non-zero, or died of a signal the launcher did not send);
//     Config.PeerFailedCode, when set, marks exit codes to pass over here.
//
// The last line names it, how it ended, who blamed it and the first line
// of the message, and the rank that failed first if that is another:
//
//	NAME: rank 2 (pid 1234) exited with code 2: root cause (blamed by ranks 0, 1, 3: "comm: allreduce failed (rank 2): ..."); rank 1 failed first
//
// # Exit code
//
// Result.Code is the root cause's code when it failed on its own (its exit
// code, or 128+n for signal n), and the code of the first rank to fail when
// the launcher had to stop the root cause (a hung rank); 0 when every rank
// exits 0; after a forwarded signal, the first non-zero result of a rank
// (130 or 143 when it died of the signal); ExitNotFound (127),
// ExitCannotExec (126) or ExitLaunchError (1) when a rank could not be
// started or the job could not be set up.
package launch
