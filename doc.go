// Package starcomm is an MPI-free collective-communication library for Go
// programs that run as several cooperating processes: allgatherv, allreduce
// (sum, min, max, bitwise or, reduced in rank order so results are
// deterministic), broadcast from any root, and barrier. FromEnv and New
// build one of three backends: tcp, a star of TCP connections in which
// rank 0 coordinates; shm, every rank a process of one host, through a
// POSIX shared-memory segment; and local, a single rank.
//
// The API lives in package comm; the protocol in package star; the
// transports in transport/tcp, transport/pipe and transport/faulty, and
// TLS with mutual authentication over any of them in transport/mtls (the
// tcp backend uses it when COBRE_TCP_TLS_CERT, COBRE_TCP_TLS_KEY and
// COBRE_TCP_TLS_CA are set). Package shm is the shm backend and the
// SharedMemoryProvider (POSIX shared memory, or the heap fallback).
package starcomm
