// Command starrun launches a local starcomm job: N copies of a program, one
// per rank, wired to a TCP coordinator on 127.0.0.1 (or, with --backend
// shm, to one shared-memory segment) through the COBRE_* environment
// variables (like mpirun or torchrun, for one machine).
//
// Usage:
//
//	starrun -n N [--backend tcp|shm] [--port P] [--timeout S] [--bind ADDR] [--grace D] [--settle D] -- CMD [ARGS...]
//
// Flags:
//
//	-n N          number of ranks to start (required, at least 1; at most 1048576, or 32768 with shm)
//	--backend B   tcp (the default: a coordinator on 127.0.0.1) or shm (a shared-memory segment)
//	--port P      coordinator port, 0..65535; 0 (the default) picks a free port
//	--timeout S   collective timeout in seconds, decimals allowed (1.5, 0.25), 0.001..31536000
//	              (1 ms to a year, as the variable), passed as COBRE_TCP_TIMEOUT_SECS
//	              (COBRE_SHM_TIMEOUT_SECS with --backend shm)
//	--bind ADDR   address the coordinator listens on, passed as COBRE_TCP_BIND_ADDR, which workers
//	              dial (for 0.0.0.0: 127.0.0.1; for ::, ::1); default: an inherited
//	              COBRE_TCP_BIND_ADDR, else 127.0.0.1 (only this host can connect)
//	--grace D     time between SIGTERM and SIGKILL when a job is stopped, e.g. 200ms (default 5s)
//	--settle D    time the other ranks get to end on their own after the first failure, before
//	              they are stopped (default 1s)
//
// Each flag may be written with one dash or two, and as -flag value or -flag=value.
//
// # Environment
//
// Rank r (0 ≤ r < N) runs CMD ARGS with starrun's own environment plus
//
//	COBRE_COMM_BACKEND=tcp
//	COBRE_TCP_BIND_ADDR=ADDR   (--bind, else the inherited value, else 127.0.0.1)
//	COBRE_TCP_COORDINATOR=H    (ADDR without brackets; 127.0.0.1 for 0.0.0.0, ::1 for ::)
//	COBRE_TCP_PORT=P           (the same for every rank)
//	COBRE_TCP_RANK=r
//	COBRE_TCP_SIZE=N
//	COBRE_TCP_TIMEOUT_SECS=S   (only with --timeout)
//	COBRE_ERROR_FILE=DIR/rank-r.json
//	GOMAXPROCS=max(1, CPUs/N)  (only when starrun's environment has no GOMAXPROCS)
//
// With --backend shm (--port and --bind do not apply) it is instead
//
//	COBRE_COMM_BACKEND=shm
//	COBRE_SHM_NAME=job-PID-RANDOM  (starrun's process id and 16 random hex digits: unique to the job)
//	COBRE_TCP_RANK=r
//	COBRE_TCP_SIZE=N
//	COBRE_SHM_TIMEOUT_SECS=S   (only with --timeout)
//	COBRE_ERROR_FILE=DIR/rank-r.json
//	GOMAXPROCS=max(1, CPUs/N)  (only when starrun's environment has no GOMAXPROCS)
//
// and starrun removes the segment's file, if one is left (every rank was
// killed), when the job ends.
//
// GOMAXPROCS shares the host's CPUs among the ranks, as torchrun's
// OMP_NUM_THREADS=1 does: with more Go threads than cores, the ranks'
// schedulers fight over the cores while a collective waits (measured at 4
// ranks on 2 cores: barrier 18-21 µs with GOMAXPROCS=1, 71-84 µs with 2).
// Set GOMAXPROCS yourself to choose otherwise; it then reaches every rank
// unchanged. These replace any value of the same variable starrun inherited. Variables
// starrun does not set (COBRE_TCP_TIMEOUT_SECS without --timeout,
// COBRE_TCP_CONNECT_TIMEOUT_MS, ...) pass through unchanged. With --port 0
// starrun listens on port 0 of the bind address (127.0.0.1 by default),
// reads the port the kernel chose and closes the socket before starting the
// ranks; another program could in principle take the port in between.
// A port given with --port is checked the same way: if something listens
// on it at the bind address (another job's rank 0 still waiting for its
// workers: it closes its listener once they have joined), starrun exits
// 1 before starting any rank, naming the port, instead of letting this
// job's workers join that job. Two jobs started at the same instant with
// the same --port can still pass the check together.
// Ranks read their standard input from /dev/null.
//
// DIR is a directory private to the job (mode 0700, in the system's
// temporary directory) that starrun creates before starting the ranks and
// removes, with everything in it, when the job ends. starcomm writes a
// rank's first failure there (when, the rank it blames, the message: one
// JSON record, described under Config.ErrorFile in package starcomm)
// before the failing call returns; a rank that panics,
// exits by itself or is killed writes nothing.
//
// # Output
//
// Every line a rank writes is copied to starrun's standard output or standard
// error (whichever the rank wrote it to), prefixed with "[r] ". Lines of
// different ranks never interleave mid-line, nor do lines of standard
// output and standard error when both go to one file (2>&1). A final line without a newline
// is printed with one added; a line longer than 1 MiB is split into 1 MiB
// lines, each with the prefix.
//
// # Failure and signals
//
// starrun waits for every rank. When a rank is still running 10 s after
// another exited 0, and none has failed, it says once which it waits for:
//
//	starrun: ranks 1, 2, 3 exited 0 (the first 10s ago); still waiting for rank 0 (pid 4242) to exit (Ctrl-C stops the job)
//
// The first rank to exit with a non-zero code
// or to be killed by a signal stops the job: starrun reports it on standard
// error,
//
//	starrun: rank 1 (pid 4321) exited with code 1; stopping the other ranks
//
// gives the other ranks the settle period (--settle, 1 s) to end on their
// own (starcomm tells every rank of a failure within milliseconds, and a
// rank that panics gets to finish printing its stack trace, keeping its
// own exit code), then sends SIGTERM to every rank still running (and
// SIGCONT, so that a stopped rank gets it now), and SIGKILL to those
// still running once the grace period is over. The "stopping" line comes
// after the failed rank's own last lines. SIGINT, SIGTERM, SIGHUP (the
// terminal or ssh session closed) and SIGQUIT (Ctrl-\, on which Go ranks
// print their goroutines' stacks) sent to starrun are forwarded to every
// rank the same way, naming the ranks still running when some have ended;
// a second one kills all ranks at once. SIGHUP or SIGINT that starrun was
// started with ignored (nohup starrun ..., or a script's background job)
// stay ignored, by starrun and its ranks. When starrun's own output is a
// closed pipe (starrun ... | head), it stops the ranks with SIGTERM, as a
// forwarded signal, rather than dying of SIGPIPE and leaving the job's
// files behind. When its output is not being read (a pager not scrolling,
// a terminal paused with Ctrl-S), failures and signals still stop the job
// at once; after a forwarded signal starrun exits 2 s after the last rank,
// read or not.
//
// The first rank to fail is often not the one at fault (rank 2 panics, rank
// 1's collective fails and rank 1 exits first), so once every rank has
// exited starrun reads the ranks' error records and names the root cause on
// its last line:
//
//	starrun: rank 2 (pid 1234) exited with code 2: root cause (blamed by ranks 0, 1, 3: "comm: allreduce failed (rank 2): ..."); rank 1 failed first
//
// The rule: records a rank wrote after starrun signalled it are set aside
// (the stop may have caused them). Starting from the earliest record,
// starrun follows the rank each record blames to that rank's record, and
// so on; the rank reached that has no record, blames itself or blames
// nobody (-1) is the root cause (a cycle of accusations stops where it
// would close). Without records, the root cause is the first rank that
// failed on its own (exited non-zero, or was killed by a signal starrun did
// not send). The line says how the root cause ended ("was stopped
// by starrun" when starrun had to kill it, as it does a hung rank), which
// ranks blamed it, the first line of the message (its own record's, or the
// earliest accusation's), and the rank that failed first when that is
// another one. After a forwarded signal no root cause is named; a job of
// one rank that left no record gets no such line (the first says it all).
//
// Each rank runs in its own process group and is always signalled as a group,
// so processes it started die with it. When a rank exits, whatever it left
// running in its process group is killed. On Linux each rank also receives
// SIGKILL if starrun itself dies.
//
// # Exit status
//
//   - 0 when every rank exits 0;
//   - the root cause's exit code, or 128+signal number if it was killed by a
//     signal (137 for SIGKILL); when starrun had to stop the root cause (it
//     hung), the code of the first rank to fail;
//   - after a forwarded signal (or a closed output pipe), the result of the
//     first rank to end with a non-zero status: 130, 143 or 129 when it died
//     from SIGINT, SIGTERM or SIGHUP, its own code when it handled the signal
//     and exited (0 if every rank exited 0);
//   - 2 for a usage error, 126 or 127 when the command cannot be started (127:
//     not found), 1 for other launcher errors.
//
// The launcher itself is internal/launch, shared with starbench -n.
// starrun is meant for Unix-like systems: elsewhere it builds, but there
// are no process groups or signals to forward, and stopping a rank kills
// it outright.
//
// # Platforms
//
// starrun (like the whole module) builds on every platform Go supports but
// plan9, with no build tags fencing it: the Unix parts of the launcher are
// in files built for unix, the rest in files built for !unix
// (internal/launch). .ci/crossvet runs go vet, which type-checks every
// package and its tests, for every platform go tool dist list names but
// plan9 and the ports the go command refuses without cgo (ios, and
// android but arm64). plan9 is left out: its syscall package has no
// errno values (ECONNRESET, EPIPE, ...), which the transports' error
// classes are built on.
package main
