package tcp

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/starcomm/starcomm/transport"
)

var _ transport.AckReporter = (*Conn)(nil)

// Acks implements transport.AckReporter with getsockopt(TCP_INFO):
// SinceSent is tcpi_last_data_sent, SinceAcked tcpi_last_ack_recv,
// SinceReceived tcpi_last_data_recv (each in milliseconds, counted in the
// kernel's jiffies), and Open is tcpi_snd_wnd > 0; on a kernel older than
// 6.2, whose tcp_info has no tcpi_snd_wnd, Open is false (unknown). It
// allocates; it is called only when a deadline has passed.
func (c *Conn) Acks() (transport.Acks, error) {
	var info *unix.TCPInfo
	var serr error
	err := c.rc.Control(func(fd uintptr) {
		info, serr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	})
	switch {
	case err != nil:
		return transport.Acks{}, err
	case serr != nil:
		return transport.Acks{}, fmt.Errorf("tcp: getsockopt TCP_INFO: %w", serr)
	}
	return transport.Acks{
		SinceSent:     time.Duration(info.Last_data_sent) * time.Millisecond,
		SinceAcked:    time.Duration(info.Last_ack_recv) * time.Millisecond,
		SinceReceived: time.Duration(info.Last_data_recv) * time.Millisecond,
		Open:          hasSndWnd() && info.Snd_wnd > 0,
	}, nil
}

// hasSndWnd reports whether the running kernel fills tcpi_snd_wnd: Linux
// 6.2 and later (the field's place in an older kernel's shorter tcp_info
// stays zero, which would read as a closed window).
var hasSndWnd = sync.OnceValue(func() bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	return releaseAtLeast(unix.ByteSliceToString(u.Release[:]), 6, 2)
})

// releaseAtLeast reports whether a kernel release ("6.18.5-cloud", say)
// is major.minor or later; false for one it cannot read.
func releaseAtLeast(release string, major, minor int) bool {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return false
	}
	minorDigits := parts[1]
	if i := strings.IndexFunc(minorDigits, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		minorDigits = minorDigits[:i] // "2-rc1"
	}
	ma, err1 := strconv.Atoi(parts[0])
	mi, err2 := strconv.Atoi(minorDigits)
	if err1 != nil || err2 != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}
