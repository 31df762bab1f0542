package star

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// pollConn is a Conn and transport.Poller over a fixed byte stream whose
// bytes "arrive" up to avail: ReadNow returns at most what has arrived (0
// when nothing has), Read what remains, then io.EOF. WriteNow takes at most
// room bytes into written. It lets a test stop a poller at any byte.
type pollConn struct {
	stream  []byte
	off     int
	avail   int
	yields  int
	written bytes.Buffer
	room    int
}

func (c *pollConn) ReadNow(p []byte) (int, error) {
	if c.off == len(c.stream) && c.avail >= len(c.stream) {
		return 0, io.EOF
	}
	n := copy(p, c.stream[c.off:min(c.avail, len(c.stream))])
	c.off += n
	return n, nil
}

func (c *pollConn) Read(p []byte) (int, error) {
	if c.off == len(c.stream) {
		return 0, io.EOF
	}
	n := copy(p, c.stream[c.off:])
	c.off += n
	c.avail = max(c.avail, c.off)
	return n, nil
}

func (c *pollConn) WriteNow(p []byte) (int, error) {
	n := min(len(p), c.room)
	c.room -= n
	c.written.Write(p[:n])
	return n, nil
}

func (c *pollConn) Write(p []byte) (int, error)    { return c.written.Write(p) }
func (c *pollConn) Yield()                         { c.yields++ }
func (*pollConn) Close() error                     { return nil }
func (*pollConn) SetDeadline(time.Time) error      { return nil }
func (*pollConn) SetReadDeadline(time.Time) error  { return nil }
func (*pollConn) SetWriteDeadline(time.Time) error { return nil }
func frameBytes(tag byte, payload ...[]byte) []byte {
	var b bufConn
	l := newLink(0, &b, time.Second)
	if err := l.writeFrame(tag, nil, payload...); err != nil {
		panic(err)
	}
	return b.Bytes()
}

// TestPollThenFinish: a frame that is polled for up to any byte and then
// read with waiting arrives whole and exact, into parts of any layout;
// polling alone completes it once every byte has arrived.
func TestPollThenFinish(t *testing.T) {
	payload := []byte("0123456789abcdefghij")
	stream := frameBytes(TagAllgathervRecv, payload)
	layouts := [][]int{{20}, {0, 20}, {3, 0, 17}, {1, 1, 18}, {19, 1}, {20, 0}}
	for _, layout := range layouts {
		for arrived := 0; arrived <= len(stream); arrived++ {
			t.Run(fmt.Sprintf("layout=%v/arrived=%d", layout, arrived), func(t *testing.T) {
				c := &pollConn{stream: stream, avail: arrived}
				l := newLink(1, c, time.Second)
				require.NotNil(t, l.poller, "a Poller conn is polled")
				dst := make([]byte, len(payload))
				var parts [][]byte
				at := 0
				for _, n := range layout {
					parts = append(parts, dst[at:at+n])
					at += n
				}
				l.beginRead(TagAllgathervRecv, parts)
				done, got, err := l.pollRead()
				require.NoError(t, err)
				require.Equal(t, arrived, got, "pollRead takes every byte that has arrived")
				require.Equal(t, arrived == len(stream), done)
				if !done {
					// Nothing more arrives while polling.
					done, got, err = l.pollRead()
					require.NoError(t, err)
					require.False(t, done)
					require.Zero(t, got)
					require.NoError(t, l.finishRead())
				}
				require.Equal(t, payload, dst)
				require.Equal(t, len(stream), c.off, "the frame is consumed, nothing more")
			})
		}
	}
}

// TestPollErrors: what pollRead reports for a bad or cut frame is what
// readFrame reports for it.
func TestPollErrors(t *testing.T) {
	good := frameBytes(TagAllreduceRecv, make([]byte, 8))
	cases := []struct {
		name   string
		stream []byte
		want   error
		kind   string
	}{
		{"eof-before-frame", nil, io.EOF, ""},
		{"eof-in-header", good[:3], io.ErrUnexpectedEOF, ""},
		{"eof-in-payload", good[:9], io.ErrUnexpectedEOF, ""},
		{"wrong-tag", frameBytes(TagBroadcast, make([]byte, 8)), ErrUnexpectedTag, "tag"},
		{"long", frameBytes(TagAllreduceRecv, make([]byte, 9)), nil, "length"},
		{"short", frameBytes(TagAllreduceRecv, make([]byte, 7)), nil, "length"},
		{"len-0", []byte{0, 0, 0, 0, TagAllreduceRecv}, nil, "length"},
		{"shutdown", frameBytes(TagShutdown), ErrShutdown, ""},
	}
	for _, tc := range cases {
		t.Run("case="+tc.name, func(t *testing.T) {
			for _, mode := range []string{"poll", "read"} {
				c := &pollConn{stream: tc.stream, avail: len(tc.stream)}
				l := newLink(0, c, time.Second)
				l.beginRead(TagAllreduceRecv, [][]byte{make([]byte, 8)})
				var err error
				if mode == "poll" {
					// Polls until the failure shows (a partial read first
					// returns what it got).
					for i := 0; i < 3 && err == nil; i++ {
						var done bool
						done, _, err = l.pollRead()
						require.False(t, done, "mode=%s", mode)
					}
				} else {
					err = l.finishRead()
				}
				require.Error(t, err, "mode=%s", mode)
				if tc.want != nil {
					require.ErrorIs(t, err, tc.want, "mode=%s", mode)
				}
				var te *tagError
				var le *lengthError
				switch tc.kind {
				case "tag":
					require.True(t, errors.As(err, &te), "mode=%s: %v", mode, err)
				case "length":
					require.True(t, errors.As(err, &le), "mode=%s: %v", mode, err)
				}
				if tc.kind != "" {
					if mode == "read" {
						require.Equal(t, HeaderSize, c.off, "mode=%s: a refused frame's payload is not read", mode)
					} else {
						// A small frame is read whole with its header
						// (see pollStaged): never more than the frame
						// expected, however long the frame that came.
						require.LessOrEqual(t, c.off, HeaderSize+8, "mode=%s: a refused frame is read no further than the frame expected", mode)
					}
				}
			}
		})
	}
}

// TestPollAbort: an Abort polled for is read whole and names the rank at
// fault.
func TestPollAbort(t *testing.T) {
	stream := frameBytes(TagAbort, abortPayload(3, "barrier", syscall.ECONNRESET, "rank 3 failed during barrier (seen by rank 0): x"))
	c := &pollConn{stream: stream, avail: len(stream)}
	l := newLink(0, c, time.Second)
	l.beginRead(TagBarrierGo, nil)
	_, _, err := l.pollRead()
	var ab *AbortError
	require.ErrorAs(t, err, &ab)
	require.Equal(t, 3, ab.Rank)
	require.ErrorIs(t, err, syscall.ECONNRESET)
	require.Equal(t, len(stream), c.off)
}

// TestPollLinks: pollLinks completes the frames that have arrived, moves
// them to the front, yields between empty rounds, stops after spin without
// progress, and reports the first failure with its link.
func TestPollLinks(t *testing.T) {
	full := frameBytes(TagBarrierReady)
	mk := func(peer, avail int, stream []byte) *link {
		l := newLink(peer, &pollConn{stream: stream, avail: avail}, time.Second)
		l.beginRead(TagBarrierReady, nil)
		return l
	}
	a, b, c := mk(1, len(full), full), mk(2, 2, full), mk(3, len(full), full)
	links := []*link{a, b, c}
	done, bad, err := pollLinks(time.Millisecond, time.Second, links...)
	require.NoError(t, err)
	require.Nil(t, bad)
	require.Equal(t, 2, done)
	require.ElementsMatch(t, []*link{a, c}, links[:2])
	require.Equal(t, b, links[2])
	require.Positive(t, b.conn.(*pollConn).yields, "empty rounds yield")
	require.NoError(t, b.finishRead())

	// A failure stops polling at once and names its link.
	x, y := mk(1, 0, full), mk(2, len(full)-1, full[:len(full)-1])
	y.conn.(*pollConn).avail = len(full) // everything "arrived": EOF after it
	done, bad, err = pollLinks(time.Hour, time.Hour, x, y)
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
	require.Equal(t, y, bad)
	require.Zero(t, done)
}

// TestPostFrame: a small frame goes out without waiting as far as the link
// takes it; finishWrite writes the rest; the bytes are those of writeFrame.
func TestPostFrame(t *testing.T) {
	payload := [][]byte{[]byte("abc"), nil, []byte("defgh")}
	want := frameBytes(TagBroadcast, payload...)
	for room := 0; room <= len(want); room++ {
		c := &pollConn{room: room}
		l := newLink(1, c, time.Second)
		done, err := l.postFrame(stageFrame(nil, TagBroadcast, nil, payload))
		require.NoError(t, err)
		require.Equal(t, room >= len(want), done, "room=%d", room)
		require.Equal(t, !done && room > 0, l.wdirty, "room=%d: a frame cut short leaves the stream dirty; one not begun does not", room)
		if !done {
			require.NoError(t, l.finishWrite())
		}
		require.False(t, l.wdirty)
		require.Equal(t, want, c.written.Bytes(), "room=%d", room)
	}
}

// TestPollStagedAbort: an Abort that comes where a small frame was expected
// is read whole whether its reason is shorter or longer than the frame
// expected (the staged read takes part of it with the header), and a frame
// that follows a short Abort is left where it was read to.
func TestPollStagedAbort(t *testing.T) {
	for _, reason := range []string{"no", "rank 2 crashed in the middle of an allreduce, so rank 0 gave up"} {
		for _, mode := range []string{"poll", "read"} {
			stream := frameBytes(TagAbort, []byte(reason))
			c := &pollConn{stream: stream, avail: len(stream)}
			l := newLink(0, c, time.Second)
			l.beginRead(TagAllreduceRecv, [][]byte{make([]byte, 8)})
			var err error
			if mode == "poll" {
				_, _, err = l.pollRead()
			} else {
				err = l.finishRead()
			}
			var ab *AbortError
			require.True(t, errors.As(err, &ab), "mode=%s reason=%q: %v", mode, reason, err)
			require.Equal(t, reason, ab.Reason, "mode=%s: the reason arrives whole", mode)
			require.Equal(t, len(stream), c.off, "mode=%s: the Abort is consumed", mode)
		}
	}
}

// TestPollMovedClearsRfix: bytes that a polled read takes end a fixed read
// deadline (rfix: what moving or readsOn set after a deadline passed while
// the link still moved, here one that passed while the process was away),
// so the next arm sets a fresh deadline a timeout from now, where the passed
// fix would fail the next read at once. Without bytes the fix stays. Both
// paths of a polled read: a small frame staged whole, a large one in parts.
func TestPollMovedClearsRfix(t *testing.T) {
	const timeout = time.Second
	for _, size := range []int{10, stageMax + 10} {
		stream := frameBytes(TagAllgathervRecv, bytes.Repeat([]byte{7}, size))
		for _, moved := range []bool{true, false} {
			for _, arrived := range []int{0, 1, HeaderSize, len(stream) - 1} {
				t.Run(fmt.Sprintf("size=%d/moved=%v/arrived=%d", size, moved, arrived), func(t *testing.T) {
					l := newLink(1, &pollConn{stream: stream, avail: arrived}, timeout)
					l.beginRead(TagAllgathervRecv, [][]byte{make([]byte, size)})
					now := time.Now()
					fix := now.Add(-time.Millisecond)
					l.rfix, l.rfixMoved = fix, moved
					done, got, err := l.pollReadAt(now)
					require.NoError(t, err)
					require.False(t, done)
					require.Equal(t, arrived, got)
					require.NoError(t, l.armAt(false, now))
					if arrived == 0 {
						require.True(t, l.rfix.Equal(fix), "no bytes: the fix stays")
						require.True(t, l.rdl.Equal(fix), "no bytes: the fix is armed")
						return
					}
					require.True(t, l.rfix.IsZero(), "bytes came: the fix is gone")
					require.False(t, l.rfixMoved)
					require.True(t, l.rdl.Equal(now.Add(timeout+deadlineSlack(timeout))),
						"the next arm sets a fresh deadline, not the passed fix (%v)", l.rdl.Sub(now))
				})
			}
		}
	}
}
