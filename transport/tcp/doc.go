// Package tcp is the real-socket transport driver: a Listener for the
// coordinator and a Dialer for the workers, over TCP, with the socket
// options a long-lived collective-communication link wants. It implements
// the interfaces of package transport and imports nothing else of starcomm.
//
// # Settings
//
// Config holds every setting; start from DefaultConfig, change fields, and
// call Validate, which names each bad field in a *ConfigError. Listen and
// Dial validate the Config themselves. The defaults match starcomm's
// environment variables: BindAddr "0.0.0.0" (COBRE_TCP_BIND_ADDR), Timeout
// 60s (COBRE_TCP_TIMEOUT_SECS), ConnectTimeout 30s
// (COBRE_TCP_CONNECT_TIMEOUT_MS); and KeepAlive 15s, BufferSize 4 MiB,
// InitialBackoff 50ms, MaxBackoff 2s.
//
// # Listening
//
// Listen(cfg, port) binds cfg.BindAddr:port; port 0 picks a free port, which
// Listener.Port reports. An address that is already taken gives an
// *AddrInUseError naming the address and wrapping syscall.EADDRINUSE. After
// Listener.Close, Accept fails with an error satisfying
// errors.Is(err, net.ErrClosed).
//
// # Dialing
//
// Workers often start before the coordinator listens, so Dialer.Dial does
// not give up at the first refusal. It retries connection refused, reset or
// aborted, host or network unreachable or down, timed-out attempts, and
// host names that do not resolve, waiting InitialBackoff after the first
// failure and twice as long after each next one, up to MaxBackoff, each wait
// jittered to between half and all of its nominal length so that many
// workers do not retry in lockstep. Every failure to resolve the name
// ("no such host", a DNS server that times out or fails) is retried until
// ConnectTimeout: in a cluster a pod's name often appears in DNS some
// seconds after the pod starts (a headless Service lists a pod only once it
// is ready, and DNS caches keep a "no such host" answer for a while), and
// the worker must wait for it rather than fail. An address that no wait can fix fails at once
// with an error wrapping ErrInvalidAddress: one that is not host:port, a
// port that is not a number from 1 to 65535, or a host that is neither an
// IP address nor a well-formed host name (labels of letters, digits, '-'
// and '_'; "node 0", "node0!" and "999.1.1.1" are refused). Any other error
// fails at once.
//
// When Dial gives up it returns an *UnreachableError naming the address,
// the number of attempts, the time spent and the last attempt's error, which
// it wraps: errors.Is(err, syscall.ECONNREFUSED) holds when nobody listened.
// Its fields tell why it gave up: TimedOut when ConnectTimeout elapsed (then
// errors.Is(err, os.ErrDeadlineExceeded) holds too), Context when the
// caller's ctx ended first (then errors.Is(err, context.Canceled) or
// context.DeadlineExceeded holds), neither when the last error was not worth
// retrying. Unresolved is set when the name never resolved, and the message
// says so:
//
//	tcp: dial node0:29500: name node0 did not resolve within 30s (16 attempts; connect timeout elapsed): last error: lookup node0 on 10.96.0.10:53: no such host
//
// # Connections
//
// Accept and Dial return a *Conn, a *net.TCPConn with these options set:
//   - TCP_NODELAY, so small frames (headers, barriers, 32-byte allreduces)
//     leave at once instead of waiting for Nagle's algorithm;
//   - keep-alive probes after KeepAlive of idleness and every KeepAlive
//     after that (off when KeepAlive is negative), so an idle link to a
//     vanished host is noticed;
//   - TCP_USER_TIMEOUT of Timeout (Linux only), so data a dead peer never
//     acknowledges fails the connection with ETIMEDOUT after Timeout instead
//     of the kernel's default of about fifteen minutes (SetPeerTimeout
//     holds one connection to a shorter bound, keep-alive included);
//   - SO_SNDBUF and SO_RCVBUF of BufferSize, set before listen and connect
//     so the window scale agreed in the handshake fits them (accepted
//     sockets inherit the listener's). Setting them turns off Linux's buffer
//     autotuning for the socket, and Linux caps the request at
//     net.core.wmem_max / net.core.rmem_max (often 208 KiB), while
//     autotuning grows a buffer up to net.ipv4.tcp_wmem / tcp_rmem's
//     maximum (4 and 6 MiB by default), whatever those caps. So on Linux a
//     side whose cap (read once from /proc/sys/net/core) is below
//     BufferSize is left to autotuning: on a 2-core Intel Xeon with both
//     caps at 208 KiB, 4 ranks on loopback, a fixed 208 KiB buffer made
//     starbench's allgathervs and SDDP iteration take 1.21x to 1.57x
//     autotuning's time;
//   - on Linux, the congestion control OnHostCongestion ("cubic") when the
//     peer is on this host (a loopback address or one of the host's own):
//     set before connect on a dialed socket, and on the listening socket,
//     whose algorithm accepted sockets inherit; Accept gives a connection
//     from another host the system's algorithm back before it sends a
//     byte. With BBR as the system's choice and no fq qdisc, the kernel
//     paces every send of a connection with a timer of its own, and on
//     loopback that only slows it: 4 ranks on one 2-core AMD EPYC with
//     BBR took 0.67x to 0.72x the time for allgathervs of 2 and 16 MiB
//     per rank, and about 0.75x for 200 KB, with cubic on their links.
//     Setting the algorithm on a connection already open does not help:
//     BBR leaves the pacing on when it is replaced.
//
// Read and Write are the *net.TCPConn's, and so are their errors,
// unchanged; the deadline methods set the *net.TCPConn's deadlines and the
// Conn's own, which ReadNow and WriteNow check: a deadline gives one satisfying
// errors.Is(err, os.ErrDeadlineExceeded), a reset syscall.ECONNRESET, an
// orderly close by the peer io.EOF. A *Conn also implements
// transport.BuffersWriter (WriteBuffers sends a header and its payload in one
// writev, without allocating and without modifying the caller's slices),
// transport.CloseWriter (TCP half-close) and transport.Poller (ReadNow and
// WriteNow: one non-blocking read(2) or write(2) on the socket; Yield:
// sched_yield on Linux), transport.LowWaterReader (SetReadLowWater:
// SO_RCVLOWAT on Unix, nothing elsewhere) and, on Linux,
// transport.SpliceWriter (WriteSpliced: a frame's header written into a
// pipe of the Conn's, made on first use and closed by the Conn's Close,
// and moved into the socket with splice(2) and SPLICE_F_MORE), without
// allocating.
package tcp
