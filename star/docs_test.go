package star_test

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/star"
	"github.com/starcomm/starcomm/testkit"
)

// protocolDoc is the protocol's documentation, whose golden blocks
// TestDocsGolden checks.
const protocolDoc = "../docs/protocol.md"

// goldenBlocks returns the hex blocks of the Markdown file at path whose
// fence says "hex golden=NAME", by NAME: the bytes, with "#" comments and
// white space ignored. A block that is not hex fails the test.
func goldenBlocks(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	blocks := map[string][]byte{}
	name, in := "", false
	var text strings.Builder
	line := 0
	for sc := bufio.NewScanner(f); sc.Scan(); {
		line++
		l := sc.Text()
		switch {
		case !in && strings.HasPrefix(l, "```hex golden="):
			name, in = strings.TrimPrefix(l, "```hex golden="), true
			text.Reset()
			require.NotContains(t, blocks, name, "%s:%d: golden block %q twice", path, line, name)
		case in && strings.HasPrefix(l, "```"):
			in = false
			b, err := hex.DecodeString(text.String())
			require.NoError(t, err, "%s: golden block %q is not hex", path, name)
			blocks[name] = b
		case in:
			l, _, _ = strings.Cut(l, "#")
			text.WriteString(strings.Join(strings.Fields(l), ""))
		}
	}
	require.False(t, in, "%s: golden block %q not closed", path, name)
	return blocks
}

// TestDocsGolden: every golden block of docs/protocol.md is the bytes the
// star package puts on the wire (or the frame it builds) for that case,
// and every case below has its block in the documentation.
func TestDocsGolden(t *testing.T) {
	blocks := goldenBlocks(t, protocolDoc)
	frame := func(tag byte, payload []byte) []byte {
		b := make([]byte, star.HeaderSize+len(payload))
		star.PutHeader(b, tag, len(payload))
		copy(b[star.HeaderSize:], payload)
		return b
	}
	var sent, read []byte // the worker's data link in the transcript
	var ctlSent, ctlRead []byte
	want := map[string]func() []byte{
		"handshake": func() []byte { return star.EncodeHandshake(1, 2) },
		"ack":       func() []byte { return star.EncodeAck(2) },
		"transcript-worker-sent": func() []byte {
			sent, read = docsTranscript(t)
			return sent
		},
		"transcript-worker-read": func() []byte { return read },
		"abort": func() []byte {
			return frame(star.TagAbort, star.AbortPayload(3, comm.OpAllgatherv, os.ErrDeadlineExceeded,
				"rank 3 failed during allgatherv (seen by rank 0): no progress for 1m0s"))
		},
		"abort-plain": func() []byte { return star.EncodeAbort("rank 2 already registered") },
		"control":     func() []byte { return star.EncodeControl(1, 2) },
		"control-opening-worker-sent": func() []byte {
			ctlSent, ctlRead = docsControlOpening(t)
			return ctlSent
		},
		"control-opening-worker-read": func() []byte { return ctlRead },
		"fingerprint-allreduce": func() []byte {
			return star.Fingerprint(7, comm.OpAllreduce, comm.Float64, 4, nil, 0, comm.Sum)
		},
		"fingerprint-allgatherv": func() []byte {
			return star.Fingerprint(8, comm.OpAllgatherv, comm.Uint8, 0, []int{1, 2}, 0, comm.Sum)
		},
	}
	// In the order above: the transcripts fill their pairs.
	order := []string{"handshake", "ack", "transcript-worker-sent", "transcript-worker-read", "abort", "abort-plain",
		"control", "control-opening-worker-sent", "control-opening-worker-read", "fingerprint-allreduce", "fingerprint-allgatherv"}
	require.Len(t, order, len(want))
	for _, name := range order {
		t.Run("block="+name, func(t *testing.T) {
			got := want[name]()
			doc, ok := blocks[name]
			if !ok {
				t.Fatalf("%s has no block golden=%s; the bytes are:\n%s", protocolDoc, name, hex.Dump(got))
			}
			if !assert.Equal(t, got, doc, "%s golden=%s vs the star package", protocolDoc, name) {
				t.Logf("the star package's bytes:\n%s", hex.Dump(got))
			}
		})
	}
	for name := range blocks {
		assert.True(t, slices.Contains(order, name), "%s: golden block %q is checked by nothing", protocolDoc, name)
	}
}

// docsTranscript runs the documentation's example job (two ranks over
// pipes, the data links alone) and returns what the worker sent and read.
func docsTranscript(t *testing.T) (sent, read []byte) {
	testkit.CheckGoroutines(t)
	ts := &taps{}
	comms, err := testkit.StartStar(context.Background(), testkit.NewPipeNetwork(), 2, func(c *star.Config) {
		c.Liveness = -1 // no control session: the spec's data link alone
		if c.Dialer != nil {
			c.Dialer = ts.dialer(c.Dialer)
		}
	})
	require.NoError(t, err)
	ctx := context.Background()
	errs := testkit.RunRanks(comms, func(c comm.Communicator) error {
		r := c.Rank()
		recv := make([]uint8, 3)
		if err := comm.Allgatherv(ctx, c, [][]uint8{{0x10}, {0x20, 0x21}}[r], recv, []int{1, 2}, []int{0, 1}); err != nil {
			return err
		}
		sum := make([]uint8, 2)
		if err := comm.Allreduce(ctx, c, [][]uint8{{1, 2}, {3, 4}}[r], sum, comm.Sum); err != nil {
			return err
		}
		if err := comm.Broadcast(ctx, c, [][]uint8{{0}, {0x77}}[r], 1); err != nil {
			return err
		}
		if err := comm.Broadcast(ctx, c, [][]uint8{{0x55}, {0}}[r], 0); err != nil {
			return err
		}
		return c.Barrier(ctx)
	})
	require.NoError(t, errors.Join(errs...))
	require.NoError(t, errors.Join(testkit.RunRanks(comms, func(c comm.Communicator) error { return c.Close() })...))
	require.Len(t, ts.all, 1)
	w := ts.all[0]
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.wrote.Bytes()), slices.Clone(w.read.Bytes())
}

// docsControlOpening starts two ranks with the control session, on the
// fake clock, and returns the first bytes the worker's control connection
// sent and read: the Control frames, then smux opening the two streams.
func docsControlOpening(t *testing.T) (sent, read []byte) {
	testkit.SyncTest(t, func(t *testing.T) {
		ts := &taps{}
		comms, err := testkit.StartStar(context.Background(), testkit.NewPipeNetwork(), 2, func(c *star.Config) {
			c.Liveness = 10 * time.Second
			if c.Dialer != nil {
				c.Dialer = ts.dialer(c.Dialer)
			}
		})
		require.NoError(t, err)
		defer testkit.CloseAll(comms)
		synctest.Wait() // the control session is up; no heartbeat is due yet
		ts.mu.Lock()
		defer ts.mu.Unlock()
		require.Len(t, ts.all, 2, "the data link and the control connection")
		for _, tp := range ts.all {
			tp.mu.Lock()
			if w := tp.wrote.Bytes(); len(w) > 4 && w[4] == star.TagControl {
				sent, read = slices.Clone(w), slices.Clone(tp.read.Bytes())
			}
			tp.mu.Unlock()
		}
	})
	require.NotNil(t, sent, "no control connection")
	return sent, read
}
