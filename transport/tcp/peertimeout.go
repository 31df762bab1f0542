package tcp

import (
	"net"
	"time"

	"github.com/starcomm/starcomm/transport"
)

var _ transport.PeerTimeoutSetter = (*Conn)(nil)

// SetPeerTimeout implements transport.PeerTimeoutSetter: TCP_USER_TIMEOUT
// of d (Linux only; elsewhere keep-alive alone, which gives up after the
// system's probe count), and keep-alive probes after d/2 of silence, then
// every d/10 (in whole seconds, from 1 to 32767: the system's units and
// bounds); a d above MaxUserTimeout is capped there.
// d <= 0 restores the Config's Timeout and KeepAlive.
func (c *Conn) SetPeerTimeout(d time.Duration) error {
	timeout, ka := c.timeout, net.KeepAliveConfig{Enable: c.keepAlive > 0, Idle: c.keepAlive, Interval: c.keepAlive}
	if d > 0 {
		timeout = min(d, MaxUserTimeout)
		ka = net.KeepAliveConfig{Enable: true, Idle: probeWait(d / 2), Interval: probeWait(d / 10)}
	}
	if err := c.SetKeepAliveConfig(ka); err != nil {
		return err
	}
	return setUserTimeout(c.rc, timeout)
}

// maxProbeWait is the largest keep-alive idle time or interval Linux takes
// (MAX_TCP_KEEPIDLE, MAX_TCP_KEEPINTVL: 32767 s).
const maxProbeWait = 32767 * time.Second

// probeWait is d as a keep-alive wait: whole seconds from 1 to
// maxProbeWait.
func probeWait(d time.Duration) time.Duration {
	return min(max(d, time.Second), maxProbeWait).Truncate(time.Second)
}
