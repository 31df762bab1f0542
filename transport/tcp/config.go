package tcp

import (
	"errors"
	"fmt"
	"math"
	"net"
	"time"
)

// Config holds the settings of a Listener and a Dialer. Start from
// DefaultConfig and change what you need: Validate rejects zero durations,
// so a forgotten field is an error rather than a silent surprise.
type Config struct {
	// BindAddr is the host or IP address Listen binds to, without a port.
	// "0.0.0.0" listens on every IPv4 interface, "::" on every interface
	// (IPv4 and IPv6). The Dialer ignores it. Default "0.0.0.0"
	// (COBRE_TCP_BIND_ADDR).
	BindAddr string
	// Timeout is how long sent data may stay unacknowledged before the
	// kernel drops the connection (TCP_USER_TIMEOUT, Linux only; other
	// systems ignore it). With keep-alive on, it also bounds how long an
	// idle connection to a vanished peer survives. At least 1ms.
	// Default 60s (COBRE_TCP_TIMEOUT_SECS).
	Timeout time.Duration
	// ConnectTimeout is the total time Dial keeps retrying before it gives
	// up with an *UnreachableError whose TimedOut is true.
	// Default 30s (COBRE_TCP_CONNECT_TIMEOUT_MS).
	ConnectTimeout time.Duration
	// KeepAlive is the idle time before the first keep-alive probe and the
	// interval between probes. A negative value turns keep-alive off.
	// Default 15s.
	KeepAlive time.Duration
	// BufferSize is the size in bytes requested for each socket's send and
	// receive buffers (SO_SNDBUF, SO_RCVBUF), set before the connection is
	// made so the TCP window scale fits it. Zero leaves the operating
	// system's default and, on Linux, its buffer autotuning. Linux caps the
	// request at net.core.wmem_max and net.core.rmem_max and reports twice
	// the granted size back; where a cap is below BufferSize, that side is
	// left to autotuning instead, which the cap does not bound and which is
	// faster than a buffer held at a low cap. Default 4 MiB.
	BufferSize int
	// InitialBackoff is the wait after the first failed connection attempt;
	// each later wait doubles, up to MaxBackoff, and is jittered to between
	// half and all of its nominal value. Default 50ms.
	InitialBackoff time.Duration
	// MaxBackoff caps the wait between connection attempts. It must be at
	// least InitialBackoff. Default 2s.
	MaxBackoff time.Duration
	// OnHostCongestion is the TCP congestion control (Linux's
	// TCP_CONGESTION) of a connection whose peer is on this host: one to
	// a loopback address or to one of this host's own addresses. The
	// connections to other hosts keep the system's choice
	// (net.ipv4.tcp_congestion_control). Linux paces the sends of a
	// connection under BBR from the kernel itself when no fq qdisc does
	// it, and on a loopback link that pacing is all it does: with BBR as
	// the system's choice, 4 ranks on a 2-core AMD EPYC took 0.67x to
	// 0.72x the time for allgathervs of 2 and 16 MiB per rank with
	// "cubic" here. An algorithm the kernel does not have, or does not
	// let this process choose, leaves the system's. "" leaves the
	// system's on every connection. Letters, digits and '_', at most 15
	// characters. Default "cubic". Other systems than Linux ignore it.
	OnHostCongestion string
}

// DefaultConfig returns the default settings, the ones starcomm uses when
// the environment sets nothing.
func DefaultConfig() Config {
	return Config{
		BindAddr:         "0.0.0.0",
		Timeout:          60 * time.Second,
		ConnectTimeout:   30 * time.Second,
		KeepAlive:        15 * time.Second,
		BufferSize:       4 << 20,
		InitialBackoff:   50 * time.Millisecond,
		MaxBackoff:       2 * time.Second,
		OnHostCongestion: "cubic",
	}
}

// ConfigError is a field of Config that Validate rejects. Validate joins
// one ConfigError per bad field with errors.Join; errors.As finds the first.
type ConfigError struct {
	// Field is the name of the Config field, such as "Timeout".
	Field string
	// Value is the rejected value.
	Value any
	// Reason says what is allowed, in plain words.
	Reason string
}

// Error names the field, its value and what it must be.
func (e *ConfigError) Error() string {
	return fmt.Sprintf("tcp: invalid Config.%s %v: %s", e.Field, e.Value, e.Reason)
}

// MaxUserTimeout is the largest Timeout TCP_USER_TIMEOUT can hold (a C
// int of milliseconds, about 24.8 days).
const MaxUserTimeout = math.MaxInt32 * time.Millisecond

// Validate reports every invalid field of c, each as a *ConfigError naming
// the field, joined with errors.Join; it returns nil for a valid Config.
func (c Config) Validate() error {
	var errs []error
	bad := func(field string, value any, reason string) {
		errs = append(errs, &ConfigError{Field: field, Value: value, Reason: reason})
	}
	switch {
	case c.BindAddr == "":
		bad("BindAddr", `""`, `must name a host or IP address; use "0.0.0.0" for every IPv4 interface, "::" for every interface`)
	case hasPort(c.BindAddr):
		bad("BindAddr", fmt.Sprintf("%q", c.BindAddr), "must be a host or IP address without a port; the port is Listen's argument")
	}
	if c.Timeout < time.Millisecond || c.Timeout > MaxUserTimeout {
		bad("Timeout", c.Timeout, fmt.Sprintf("must be between 1ms and %v", MaxUserTimeout))
	}
	if c.ConnectTimeout <= 0 {
		bad("ConnectTimeout", c.ConnectTimeout, "must be positive")
	}
	if c.KeepAlive == 0 {
		bad("KeepAlive", c.KeepAlive, "must be positive, or negative to turn keep-alive off")
	}
	if c.BufferSize < 0 || c.BufferSize > math.MaxInt32 {
		bad("BufferSize", c.BufferSize, fmt.Sprintf("must be between 0 (the system default) and %d bytes", math.MaxInt32))
	}
	if c.InitialBackoff <= 0 {
		bad("InitialBackoff", c.InitialBackoff, "must be positive")
	}
	if c.MaxBackoff < c.InitialBackoff || c.MaxBackoff <= 0 {
		bad("MaxBackoff", c.MaxBackoff, fmt.Sprintf("must be positive and at least InitialBackoff (%v)", c.InitialBackoff))
	}
	if !validCongestion(c.OnHostCongestion) {
		bad("OnHostCongestion", fmt.Sprintf("%q", c.OnHostCongestion), `must be "" (the system's) or the name of a congestion control such as "cubic": letters, digits and '_', at most 15 characters`)
	}
	return errors.Join(errs...)
}

// validCongestion reports whether name is "" or could name a congestion
// control: at most 15 (TCP_CA_NAME_MAX - 1) letters, digits and '_'.
func validCongestion(name string) bool {
	if len(name) > 15 {
		return false
	}
	for _, r := range name {
		if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '_') {
			return false
		}
	}
	return true
}

// hasPort reports whether addr looks like host:port rather than a host.
func hasPort(addr string) bool {
	_, _, err := net.SplitHostPort(addr)
	return err == nil
}
