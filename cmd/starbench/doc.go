// Command starbench benchmarks starcomm's collectives on the standard
// standard workloads (listed below) and prints one table (or JSON document)
// of the slowest rank's median time and the algorithm bandwidth per
// workload.
//
// Usage:
//
//	starbench -n N [--backend tcp|shm] [--workloads NAME,...] [--repeats-scale F] [--json] [--timeout S] [--raw] [--profile DIR] [--trace DIR]
//	starrun -n N [--backend shm] -- starbench [--workloads NAME,...] [--repeats-scale F] [--raw]
//
// With -n, starbench starts N ranks of its own executable as child
// processes through the launcher starrun uses (internal/launch), wired over
// TCP on 127.0.0.1 to a free port through the COBRE_* variables
// (COBRE_COMM_BACKEND=tcp, COBRE_TCP_COORDINATOR=127.0.0.1,
// COBRE_TCP_BIND_ADDR=127.0.0.1, COBRE_TCP_PORT, COBRE_TCP_RANK,
// COBRE_TCP_SIZE, COBRE_TCP_TIMEOUT_SECS with --timeout, and
// COBRE_ERROR_FILE, the file in a private directory of the job where
// starcomm records the rank's first failure), and, unless starbench's
// environment sets it, GOMAXPROCS=max(1, CPUs/N) as starrun does. Rank 0's
// standard output (the results) is printed as is; every other line the
// ranks write goes to standard error prefixed with "[r] ". Each rank runs in
// its own process group and, on Linux, dies with starbench (parent-death
// signal). When a rank fails, starbench says so ("starbench: rank 1 (pid
// 4321) exited with code 3; stopping the other ranks"), gives the other
// ranks 1 s to end on their own, then sends every other rank's process
// group SIGTERM (and SIGCONT, for a stopped one), then SIGKILL after 5 s;
// SIGINT, SIGTERM, SIGHUP and SIGQUIT are forwarded at once, the same way
// (those starbench was started with ignored, as under nohup, stay
// ignored). Once all ranks have exited it names
// the root cause on its last line, as starrun does: following the error
// records' accusations from the earliest record, or, without records, the
// first rank that failed on its own, passing over ranks that exited 3
// (below), e.g.
//
//	starbench: rank 2 (pid 1234) exited with code 2: root cause (blamed by ranks 0, 1, 3: "allgatherv failed (rank 2): ..."); rank 1 failed first
//
// -n 1 runs a size-1 communicator (no socket).
//
// With --backend shm the ranks share a segment instead of a socket, with
// the variables starrun --backend shm sets (COBRE_COMM_BACKEND=shm,
// COBRE_SHM_NAME unique to the job, COBRE_TCP_RANK, COBRE_TCP_SIZE,
// COBRE_SHM_TIMEOUT_SECS with --timeout, COBRE_ERROR_FILE); the table and
// the JSON document are the same, with backend shm.
//
// Without -n, starbench is one rank of a job someone else started (starrun,
// or processes started by hand with the COBRE_* variables): it calls
// starcomm.ConfigFromEnv and starcomm.New (starcomm.FromEnv, with --timeout
// overriding COBRE_TCP_TIMEOUT_SECS and COBRE_SHM_TIMEOUT_SECS), runs the workloads, and rank 0 prints
// the results. With no COBRE_* variables at all that is the single-rank
// local backend.
//
// Flags (one dash or two, -flag value or -flag=value):
//
//	-n N               start N ranks (at least 1)
//	--backend B        with -n: tcp (the default) or shm
//	--workloads LIST   comma-separated workload names, run in that order (default: all)
//	--repeats-scale F  multiply every workload's repeats by F (0 < F <= 1000), rounding,
//	                   at least 1 timed repetition (e.g. 0.25 for a quick run)
//	--json             print one JSON document instead of the table
//	--timeout S        collective timeout in seconds (0.001..31536000; default 60)
//	--raw              run over the raw relay instead of starcomm (see below)
//	--profile DIR      write each rank's CPU profile of the timed workloads to
//	                   DIR/cpu-rank<R>.pprof (go tool pprof); DIR must exist
//	--trace DIR        write each rank's execution trace of the timed workloads to
//	                   DIR/trace-rank<R>.out (go tool trace); DIR must exist
//
// Under starrun, leave --json out: starrun prefixes every line of every
// rank with "[r] ", the JSON document included.
//
// With --raw the same workloads run, verified the same way, over a minimal
// relay instead of starcomm: the same TCP sockets (the tcp driver, the same
// options), the same bytes through rank 0, with a goroutine per worker link
// on rank 0, and no frame headers, checks, timeouts or polling. It is the
// lower bound of a star on the host, the baseline bench/compare-mpi.sh
// prints beside starcomm and MPI; it is not a communicator to use (a
// failure hangs it).
//
// Exit status: 0 on success; 1 when a rank failed (collective error,
// verification failure) or could not start, whatever the root cause's own
// code; 2 for a usage error, with a message naming the flag; 128+n after
// signal n. A rank itself exits 1 for its own failure and 3 when its
// collective failed because another rank failed first.
//
// # Workloads
//
// All float64 unless noted; R is the number of ranks:
//
//	name              per rank                                              repeats
//	allgatherv-cuts   25,000 values (200 KB)                                 50
//	allgatherv-2MiB   262,144 values (2 MiB)                                 20
//	allgatherv-16MiB  2,097,152 values (16 MiB)                               8
//	allreduce-32B     4 values, sum                                         200
//	barrier           -                                                     200
//	broadcast-10KB    10,240 bytes (uint8) from root R-1                    200
//	sddp-iteration    1 allgatherv of 2 MiB + 119 allgathervs of 200 KB       3
//	                  + allreduce min (1 value) + allreduce sum (3 values)
//
// allreduce-64MiB (8,388,608 values, sum; 5 repeats) runs only when
// --workloads names it: rank 0 streams it (at R >= 2 its ·n is over
// 64 MiB), and the peak RSS that starbench prints shows what that costs.
//
// Three more run only when --workloads names them, and measure what
// waiting costs: late-1ms (50 repeats), late-10ms (30) and late-1s (5), a
// barrier that the last rank enters 1 ms, 10 ms or 1 s late (it sleeps
// first) while the others wait in it. Their result adds the CPU time,
// user and system, that a waiting rank's whole process burns per
// collective (the most of any waiting rank, median over the repetitions).
//
// The allgathervs use equal counts and packed displacements. In
// sddp-iteration each of the 119 cut allgathervs has its own send and
// receive buffers, as a solver keeps one cut pool per stage, so every
// result can be verified; a rank then holds about (R+1) × 25.9 MB for it.
// allgatherv-16MiB needs (R+1) × 16 MiB per rank.
//
// # Timing
//
// Every workload first runs one untimed warm-up repetition, then its
// repeats (times --repeats-scale) timed ones. Each repetition, on every
// rank: fill the send buffers with values derived from rank and repetition
// (untimed); Barrier; time the operation with the monotonic clock; an
// untimed Allreduce(Max) of the ranks' times in seconds, so every rank
// knows the slowest rank's time; check every received element (untimed).
// The reported time is the median over the timed repetitions of the
// slowest rank's time (the JSON also has the minimum and maximum). A
// verification failure ends the rank with a message naming the workload,
// rank, repetition, buffer index, and the value received and expected.
//
// # Algorithm bandwidth
//
// algbw is the bytes an operation delivers divided by its median time, in
// decimal units (1 MB/s = 10^6 bytes per second):
//
//   - allgatherv: the total gathered bytes, R × bytes per rank;
//   - allreduce and broadcast: the buffer's bytes;
//   - barrier: none ("-" in the table, null in the JSON);
//   - sddp-iteration: the bytes gathered by its 120 allgathervs,
//     R × (2 MiB + 119 × 200 KB), plus the 32 bytes of its two allreduce
//     buffers.
//
// It is not the bytes on the wire: in the star every allgatherv byte
// crosses the coordinator about twice.
//
// # Output
//
// The table starts with a header line: the date (UTC, RFC 3339), Go
// version, GOOS/GOARCH, CPUs, backend, ranks and repeats scale; then, on
// Linux, a line naming rank 0's processor with its family and model
// numbers ("# processor: Intel(R) Xeon(R) Processor (family 6, model
// 207)"), since figures from different processors are not comparable. Then one row
// per workload: name, ranks, bytes per rank (200 KB = 200,000 bytes; 2 MiB
// = 2,097,152 bytes), timed repeats, median time and algbw. Then, for each
// late workload, a line "# late-1ms: a waiting rank's process burns 150µs
// of CPU per collective (median)", and, where the system reports it, "#
// rank 0 (coordinator) peak RSS: 137160 KiB". With --json:
//
//	{"date": ..., "go": ..., "goos": ..., "goarch": ..., "ranks": N, "backend": ...,
//	 "cpus": ..., "cpu_model": ..., "repeats_scale": ..., "coordinator_peak_rss_bytes": ...,
//	 "results": [{"workload": ..., "ranks": ..., "bytes_per_rank": ...,
//	 "repeats": ..., "median_ns": ..., "min_ns": ..., "max_ns": ...,
//	 "alg_bytes": ..., "algbw_bytes_per_sec": ..., "wait_cpu_ns": ...}, ...]}
//
// (cpu_model, coordinator_peak_rss_bytes and wait_cpu_ns only where there is one.)
package main
