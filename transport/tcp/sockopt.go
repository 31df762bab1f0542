package tcp

import (
	"net"
	"os"
	"syscall"
)

// control returns the net.ListenConfig / net.Dialer Control hook that sets
// the buffer sizes on the socket before it listens or connects, so the TCP
// window scale negotiated in the handshake fits them, and runs congestion
// (the congestion control of a listening socket or of one about to
// connect to address; see OnHostCongestion) when not nil. Accepted
// sockets inherit the listener's sizes and algorithm. It returns nil when
// there is nothing to set.
func control(cfg Config, congestion func(address string, rc syscall.RawConn)) func(network, address string, rc syscall.RawConn) error {
	recv, send := bufferSizes(cfg.BufferSize)
	if recv == 0 && send == 0 && congestion == nil {
		return nil
	}
	return func(_, address string, rc syscall.RawConn) error {
		if congestion != nil {
			congestion(address, rc)
		}
		return setBufferSizes(rc, recv, send)
	}
}

// bufferSizes returns the receive and send buffer sizes to ask for when
// the configuration asks for n bytes (0: leave that side to the system):
// n, except on a side whose system cap (Linux: net.core.rmem_max,
// net.core.wmem_max) is below n. Linux would cap the request there, and a
// fixed buffer at a low cap (208 KiB is common) is slower than the
// system's own autotuning, which the cap does not bound (up to
// net.ipv4.tcp_rmem and tcp_wmem's maximum, 6 and 4 MiB by default);
// setting a buffer turns autotuning off for the socket.
func bufferSizes(n int) (recv, send int) {
	if n <= 0 {
		return 0, 0
	}
	rmax, wmax := systemBufferCaps()
	recv, send = n, n
	if rmax > 0 && rmax < n {
		recv = 0
	}
	if wmax > 0 && wmax < n {
		send = 0
	}
	return recv, send
}

// configure applies cfg's options to an established connection: no Nagle
// delay, keep-alive, buffer sizes (again, for systems without a pre-connect
// hook) and TCP_USER_TIMEOUT where the system has it.
func configure(tc *net.TCPConn, cfg Config) error {
	if err := tc.SetNoDelay(true); err != nil {
		return err
	}
	if cfg.KeepAlive > 0 {
		if err := tc.SetKeepAliveConfig(net.KeepAliveConfig{
			Enable:   true,
			Idle:     cfg.KeepAlive,
			Interval: cfg.KeepAlive,
		}); err != nil {
			return err
		}
	} else if err := tc.SetKeepAlive(false); err != nil {
		return err
	}
	recv, send := bufferSizes(cfg.BufferSize)
	if recv > 0 {
		if err := tc.SetReadBuffer(recv); err != nil {
			return err
		}
	}
	if send > 0 {
		if err := tc.SetWriteBuffer(send); err != nil {
			return err
		}
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return err
	}
	return setUserTimeout(rc, cfg.Timeout)
}

// rawSetsockopt runs set on the socket's descriptor and returns the error of
// either step, naming the option.
func rawSetsockopt(rc syscall.RawConn, name string, set func(fd uintptr) error) error {
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = set(fd) }); err != nil {
		return err
	}
	if serr != nil {
		return &net.OpError{Op: "set", Net: "tcp", Err: os.NewSyscallError("setsockopt "+name, serr)}
	}
	return nil
}
