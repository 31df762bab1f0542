package star

import (
	"encoding/binary"
	"hash/fnv"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/xtaci/smux"

	"github.com/starcomm/starcomm/comm"
)

// TestFingerprintOfManyRanks: an allgatherv's fingerprint lists the counts
// of up to listedCounts ranks, and beyond that carries their FNV-1a hash,
// so that at any Size it is one control message the coordinator's reader
// takes. (Listing every count, a fingerprint of 16,396 ranks or more was
// over maxMsg: the coordinator's reader refused it and ended the worker's
// message stream, and every allgatherv's check failed.)
func TestFingerprintOfManyRanks(t *testing.T) {
	listed := &call{op: comm.OpAllgatherv, dt: comm.Float64, counts: make([]int, listedCounts)}
	assert.Len(t, listed.fingerprint(nil, 1), 19+4*listedCounts, "counts listed up to listedCounts ranks")

	for _, size := range []int{listedCounts + 1, 16396, MaxSize} {
		counts := make([]int, size)
		for i := range counts {
			counts[i] = i % 7
		}
		cl := &call{op: comm.OpAllgatherv, dt: comm.Float64, counts: counts}
		fp := cl.fingerprint(nil, 9)
		require.Len(t, fp, 27, "size %d", size)
		h := fnv.New64a()
		var b [4]byte
		for _, n := range counts {
			binary.BigEndian.PutUint32(b[:], uint32(n))
			h.Write(b[:])
		}
		assert.Equal(t, h.Sum64(), binary.BigEndian.Uint64(fp[19:]), "size %d: the counts' FNV-1a hash", size)
		assert.Equal(t, uint32(size), binary.BigEndian.Uint32(fp[15:19]), "size %d: the number of ranks", size)
		assert.True(t, strings.HasPrefix(describeFingerprint(fp), "allgatherv(float64, counts of "), describeFingerprint(fp))

		counts[size/2]++
		other := cl.fingerprint(nil, 9)
		assert.NotEqual(t, fp, other, "size %d: one count differs", size)
		counts[size/2]--
		assert.Equal(t, fp, cl.fingerprint(nil, 9), "size %d: the same counts again", size)
	}

	// The largest fingerprint through a real session's message reader.
	a, b := net.Pipe()
	cs, err := smux.Client(a, smuxConfig())
	require.NoError(t, err)
	defer cs.Close()
	ss, err := smux.Server(b, smuxConfig())
	require.NoError(t, err)
	defer ss.Close()
	w, err := cs.OpenStream()
	require.NoError(t, err)
	fp := (&call{op: comm.OpAllgatherv, dt: comm.Float64, counts: make([]int, MaxSize)}).fingerprint(nil, 1)
	sent := make(chan error, 1)
	go func() {
		sent <- (&control{msgs: w, wmu: make(chan struct{}, 1)}).send(msgCall, fp, time.Now().Add(5*time.Second))
	}()
	r, err := ss.AcceptStream()
	require.NoError(t, err)
	kind, body, err := (&control{msgs: r}).readMsg(time.Now().Add(5 * time.Second))
	require.NoError(t, err)
	require.NoError(t, <-sent)
	assert.Equal(t, byte(msgCall), kind)
	assert.Equal(t, fp, body)
}
