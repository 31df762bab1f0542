package star

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// bufConn is a Conn over a bytes.Buffer, for encoding tests.
type bufConn struct{ bytes.Buffer }

func (*bufConn) Close() error                     { return nil }
func (*bufConn) SetDeadline(time.Time) error      { return nil }
func (*bufConn) SetReadDeadline(time.Time) error  { return nil }
func (*bufConn) SetWriteDeadline(time.Time) error { return nil }

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	require.NoError(t, err)
	return b
}

// TestWireConstants pins the tag values of docs/protocol.md ("Frames") and the
// ReduceOp bytes (see the package doc).
func TestWireConstants(t *testing.T) {
	require.Equal(t, []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, []byte{
		TagAllgathervSend, TagAllgathervRecv, TagAllreduceSend, TagAllreduceRecv, TagBroadcast,
		TagBarrierReady, TagBarrierGo, TagHandshake, TagAck, TagShutdown, TagAbort})
	require.Equal(t, 5, HeaderSize)
	require.Equal(t, uint64(1<<32-1), uint64(MaxFrameLen))
}

// TestGoldenFrames pins the bytes of one frame of every tag.
func TestGoldenFrames(t *testing.T) {
	f64 := []byte{0, 0, 0, 0, 0, 0, 0xF0, 0x3F} // float64 1.0, little-endian
	cases := []struct {
		name  string
		tag   byte
		extra []byte
		parts [][]byte
		want  string
	}{
		{"AllgathervSend", TagAllgathervSend, nil, [][]byte{f64}, "00000009 01 000000000000F03F"},
		{"AllgathervSend/empty", TagAllgathervSend, nil, nil, "00000001 01"},
		{"AllgathervRecv/two regions", TagAllgathervRecv, nil, [][]byte{{0xAA}, {0xBB, 0xCC}}, "00000004 02 AABBCC"},
		{"AllreduceSend/sum", TagAllreduceSend, []byte{0}, [][]byte{f64}, "0000000A 03 00 000000000000F03F"},
		{"AllreduceSend/max", TagAllreduceSend, []byte{2}, [][]byte{{7}}, "00000003 03 02 07"},
		{"AllreduceRecv", TagAllreduceRecv, nil, [][]byte{f64}, "00000009 04 000000000000F03F"},
		{"Broadcast", TagBroadcast, nil, [][]byte{{1, 2, 3}}, "00000004 05 010203"},
		{"BarrierReady", TagBarrierReady, nil, nil, "00000001 06"},
		{"BarrierGo", TagBarrierGo, nil, nil, "00000001 07"},
		{"Shutdown", TagShutdown, nil, nil, "00000001 0A"},
		{"Abort", TagAbort, nil, [][]byte{[]byte("no")}, "00000003 0B 6E6F"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var c bufConn
			l := newLink(0, &c, time.Second)
			require.NoError(t, l.writeFrame(tc.tag, tc.extra, tc.parts...))
			require.Equal(t, unhex(t, tc.want), c.Bytes())
		})
	}
	t.Run("Handshake/rank=3/size=4", func(t *testing.T) {
		require.Equal(t, unhex(t, "00000009 08 00000003 00000004"), EncodeHandshake(3, 4))
	})
	t.Run("Ack/size=4", func(t *testing.T) {
		require.Equal(t, unhex(t, "00000005 09 00000004"), EncodeAck(4))
	})
	t.Run("Abort/encoded", func(t *testing.T) {
		require.Equal(t, unhex(t, "00000007 0B 7261 6E6B 2032"), EncodeAbort("rank 2"))
	})
}

// TestReadFrameRefusesWithoutReading checks that a frame with the wrong
// tag or length is refused from its header alone: the payload (here a
// claimed 4 GiB) is neither read nor allocated.
func TestReadFrameRefusesWithoutReading(t *testing.T) {
	cases := []struct {
		name   string
		header string
		want   string
	}{
		{"len too large", "FFFFFFFF 01", "carries 4294967294 payload bytes, expected 8"},
		{"len too small", "00000002 01", "carries 1 payload bytes, expected 8"},
		{"wrong tag", "00000009 02", "received AllgathervRecv frame, expected AllgathervSend"},
		{"another collective", "00000001 06", "received BarrierReady frame, expected AllgathervSend (the ranks called different collectives, or a rank went on after its call was refused for its arguments; COBRE_DEBUG=detail names the rank that differs)"},
		{"zero len", "00000000 01", "frame with LEN 0 (no room for its tag) where a AllgathervSend frame of 8 payload bytes was expected"},
		{"huge abort", "FFFFFFFF 0B", "received Abort frame"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var c bufConn
			c.Write(unhex(t, tc.header))
			c.Write([]byte("trailing bytes that must stay unread"))
			l := newLink(1, &c, time.Second)
			dst := make([]byte, 8)
			err := l.readFrame(TagAllgathervSend, dst)
			require.ErrorContains(t, err, tc.want)
			require.Equal(t, tc.name == "zero len", errors.Is(err, ErrZeroLength), "matches ErrZeroLength")
			require.Equal(t, "trailing bytes that must stay unread", c.String(), "payload must not be consumed")
			require.Equal(t, make([]byte, 8), dst, "destination must not be written")
		})
	}
}

// TestReadFrameEOF maps a clean close between frames to io.EOF and a close
// inside a frame to io.ErrUnexpectedEOF.
func TestReadFrameEOF(t *testing.T) {
	var c bufConn
	l := newLink(1, &c, time.Second)
	require.ErrorIs(t, l.readFrame(TagBarrierGo), io.EOF)
	c.Write(unhex(t, "000000"))
	require.ErrorIs(t, l.readFrame(TagBarrierGo), io.ErrUnexpectedEOF)
	c.Reset()
	c.Write(unhex(t, "00000009 04 0102"))
	require.ErrorIs(t, l.readFrame(TagAllreduceRecv, make([]byte, 8)), io.ErrUnexpectedEOF)
}

// TestAbortFrameParsed turns an Abort frame into an AbortError that names
// the blamed rank.
func TestAbortFrameParsed(t *testing.T) {
	var c bufConn
	c.Write(EncodeAbort("rank 3 failed during allgatherv: connection reset"))
	l := newLink(0, &c, time.Second)
	err := l.readFrame(TagAllgathervRecv, make([]byte, 4))
	var ab *AbortError
	require.ErrorAs(t, err, &ab)
	require.Equal(t, 3, ab.Rank)
	require.Equal(t, 0, ab.From)
	require.Equal(t, -1, leadingRank("garbage"))
	require.Equal(t, -1, leadingRank("rank x"))
}

// TestAbortStructured pins the structured Abort payload: the reason for
// people, then one line of fields, and reads it back, errors.Is finding
// the cause class on the receiving rank.
func TestAbortStructured(t *testing.T) {
	p := abortPayload(3, "allgatherv", os.ErrDeadlineExceeded, "rank 3 failed during allgatherv (seen by rank 0): hung")
	require.Equal(t, "rank 3 failed during allgatherv (seen by rank 0): hung\nstarcomm-abort/1 rank=3 op=allgatherv cause=timeout", string(p))
	var c bufConn
	c.Write(frameBytes(TagAbort, p))
	err := newLink(0, &c, time.Second).readFrame(TagBarrierGo)
	var ab *AbortError
	require.ErrorAs(t, err, &ab)
	require.Equal(t, AbortError{From: 0, Rank: 3, Op: "allgatherv", Reason: "rank 3 failed during allgatherv (seen by rank 0): hung", Cause: remoteTimeout{}}, *ab)
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	require.NotErrorIs(t, err, context.DeadlineExceeded)

	// A reason longer than the frame allows is cut; the fields survive.
	long := abortPayload(-1, "start-up", errRefusedRemote, strings.Repeat("x", 2*MaxAbortReason))
	require.LessOrEqual(t, len(long), MaxAbortReason)
	got := parseAbort(0, long)
	require.Equal(t, -1, got.Rank)
	require.Equal(t, "start-up", got.Op)
	require.ErrorIs(t, got, errRefusedRemote)
}

// TestSystemTimeoutIsDeadline: a connection the system gave up on
// (TCP_USER_TIMEOUT, keep-alive: ETIMEDOUT) is a no-progress failure like
// a passed deadline: errors.Is finds os.ErrDeadlineExceeded, and the system
// error too.
func TestSystemTimeoutIsDeadline(t *testing.T) {
	sys := &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ETIMEDOUT)}
	err := edgeErr(sys, false)
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	require.ErrorIs(t, err, syscall.ETIMEDOUT)
	require.True(t, isTimeout(err))
	require.Equal(t, "timeout", causeName(err))
	require.Contains(t, describe(err, time.Minute), "the system gave up on the connection: the peer's host acknowledged nothing, or kept its receive window closed, for the timeout")
	require.Contains(t, describe(edgeErr(os.ErrDeadlineExceeded, false), time.Minute), "no progress within the 1m0s timeout")
	require.NotErrorIs(t, edgeErr(io.EOF, false), os.ErrDeadlineExceeded)
}

// TestOnlyTheSystemSaysETIMEDOUT: the timeouts starcomm finds itself (a
// deadline of its own, a silent control session, another rank's timeout
// relayed in an Abort) match os.ErrDeadlineExceeded but not
// syscall.ETIMEDOUT, whose Timeout method is true too: that one means the
// system gave up on the connection, and only an error it gave matches it.
func TestOnlyTheSystemSaysETIMEDOUT(t *testing.T) {
	ours := map[string]error{
		"deadline":             edgeErr(os.ErrDeadlineExceeded, false),
		"unresponsive":         &UnresponsiveError{Rank: 2, Silence: time.Second},
		"relayed":              parseAbort(0, abortPayload(2, "barrier", os.ErrDeadlineExceeded, "rank 2 timed out")),
		"relayed/unresponsive": parseAbort(0, abortPayload(2, "barrier", &UnresponsiveError{Rank: 2}, "rank 2 unresponsive")),
	}
	for name, err := range ours {
		require.ErrorIs(t, err, os.ErrDeadlineExceeded, name)
		require.NotErrorIs(t, err, syscall.ETIMEDOUT, name)
		require.NotErrorIs(t, err, syscall.EAGAIN, name)
		require.NotErrorIs(t, err, context.DeadlineExceeded, name)
	}
	sys := edgeErr(&net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ETIMEDOUT)}, false)
	require.ErrorIs(t, sys, syscall.ETIMEDOUT)
}

// TestWriteChunks checks that a payload larger than one chunk arrives
// whole and in order.
func TestWriteChunks(t *testing.T) {
	var c bufConn
	l := newLink(0, &c, time.Second)
	big := make([]byte, chunk+chunk/2+3)
	for i := range big {
		big[i] = byte(i * 7)
	}
	require.NoError(t, l.writeFrame(TagBroadcast, nil, big[:10], big[10:]))
	got := c.Bytes()
	require.Equal(t, HeaderSize+len(big), len(got))
	require.Equal(t, big, got[HeaderSize:])
	r := newLink(0, &c, time.Second)
	dst := make([]byte, len(big))
	c.Reset()
	c.Write(got)
	require.NoError(t, r.readFrame(TagBroadcast, dst))
	require.Equal(t, big, dst)
}
