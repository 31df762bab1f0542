package starcomm_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm"
	"github.com/starcomm/starcomm/comm"
)

// envSpecWorkerChild makes the test binary a worker of
// TestSpecCoordinatorProcesses.
const envSpecWorkerChild = "STARCOMM_TEST_SPEC_WORKER"

// specWorkerChild is one starcomm worker under a coordinator that knows
// only the spec: start-up from the environment, a barrier, an allreduce
// (sum), a broadcast from rank 0, a barrier and Close, printing what it
// got.
func specWorkerChild() int {
	ctx := context.Background()
	c, err := starcomm.FromEnv(ctx)
	if err != nil {
		fmt.Println("FAIL start:", err)
		return 1
	}
	sum := make([]float64, 1)
	buf := make([]byte, 5)
	err = c.Barrier(ctx)
	if err == nil {
		err = comm.Allreduce(ctx, c, []float64{float64(c.Rank())}, sum, comm.Sum)
	}
	if err == nil {
		err = comm.Broadcast(ctx, c, buf, 0)
	}
	if err == nil {
		err = c.Barrier(ctx)
	}
	if cerr := c.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		fmt.Println("FAIL:", err)
		return 1
	}
	fmt.Printf("ok rank %d sum %v broadcast %s\n", c.Rank(), sum[0], buf)
	return 0
}

// specFrame writes one frame of the spec: LEN u32 BE (tag and payload),
// TAG, PAYLOAD.
func specFrame(t *testing.T, conn net.Conn, tag byte, payload []byte) {
	t.Helper()
	b := binary.BigEndian.AppendUint32(nil, uint32(1+len(payload)))
	b = append(append(b, tag), payload...)
	_, err := conn.Write(b)
	require.NoError(t, err)
}

// specRead reads one frame and returns its tag and payload.
func specRead(t *testing.T, conn net.Conn) (byte, []byte) {
	t.Helper()
	var h [5]byte
	_, err := io.ReadFull(conn, h[:])
	require.NoError(t, err)
	n := binary.BigEndian.Uint32(h[:4])
	require.Positive(t, n)
	require.LessOrEqual(t, n, uint32(1<<16), "a frame of %d bytes", n)
	payload := make([]byte, n-1)
	_, err = io.ReadFull(conn, payload)
	require.NoError(t, err)
	return h[4], payload
}

// TestSpecCoordinatorProcesses: starcomm worker processes under a
// coordinator written from the spec alone (this test, over real TCP). It
// accepts exactly R-1 connections, takes each for a worker's and
// acknowledges each Handshake at once; here each worker process starts
// only once the one before has its Ack, so the earlier workers hold their
// Acks while the coordinator still waits. Every connection it accepts must
// be a Handshake: a worker that dialed its control session right after its
// Ack would put a Control frame (0x0C) in a later worker's place, which
// fails such a coordinator's start-up. The workers dial it after the
// coordinator's first frame, when it accepts no more connections and
// keeps its listener open (the connection waits unanswered in its queue):
// they go on without a session through an allreduce, a broadcast, a
// barrier and Close.
func TestSpecCoordinatorProcesses(t *testing.T) {
	const size = 4
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port

	conns := make([]net.Conn, size)
	outs := make([]*bytes.Buffer, size)
	cmds := make([]*exec.Cmd, size)
	for r := 1; r < size; r++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envSpecWorkerChild+"=1",
			"COBRE_COMM_BACKEND=tcp", "COBRE_TCP_COORDINATOR=127.0.0.1",
			"COBRE_TCP_PORT="+strconv.Itoa(port), "COBRE_TCP_SIZE="+strconv.Itoa(size),
			"COBRE_TCP_RANK="+strconv.Itoa(r), "COBRE_TCP_TIMEOUT_SECS=30")
		outs[r] = &bytes.Buffer{}
		cmd.Stdout, cmd.Stderr = outs[r], outs[r]
		require.NoError(t, cmd.Start())
		cmds[r] = cmd
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()

		conn, err := ln.Accept()
		require.NoError(t, err)
		defer conn.Close()
		require.NoError(t, conn.SetDeadline(time.Now().Add(60*time.Second)))
		tag, payload := specRead(t, conn)
		require.Equal(t, byte(0x08), tag, "connection %d: tag 0x%02x, not a Handshake (a worker's place taken)", r, tag)
		require.Len(t, payload, 8)
		require.Equal(t, uint32(r), binary.BigEndian.Uint32(payload[0:4]), "connection %d: the Handshake's rank", r)
		require.Equal(t, uint32(size), binary.BigEndian.Uint32(payload[4:8]))
		conns[r] = conn
		specFrame(t, conn, 0x09, binary.BigEndian.AppendUint32(nil, size)) // Ack
	}

	barrier := func() {
		for r := 1; r < size; r++ {
			tag, payload := specRead(t, conns[r])
			require.Equal(t, byte(0x06), tag, "rank %d: BarrierReady", r)
			require.Empty(t, payload)
		}
		for r := 1; r < size; r++ {
			specFrame(t, conns[r], 0x07, nil) // BarrierGo
		}
	}
	barrier()
	// Allreduce, sum, in rank order; rank 0 contributes 0.
	var sum float64
	for r := 1; r < size; r++ {
		tag, payload := specRead(t, conns[r])
		require.Equal(t, byte(0x03), tag, "rank %d: AllreduceSend", r)
		require.Len(t, payload, 9)
		require.Equal(t, byte(0), payload[0], "the op byte: Sum")
		sum += math.Float64frombits(binary.LittleEndian.Uint64(payload[1:]))
	}
	for r := 1; r < size; r++ {
		specFrame(t, conns[r], 0x04, binary.LittleEndian.AppendUint64(nil, math.Float64bits(sum)))
	}
	for r := 1; r < size; r++ {
		specFrame(t, conns[r], 0x05, []byte("hello")) // Broadcast from rank 0
	}
	barrier()
	for r := 1; r < size; r++ {
		specFrame(t, conns[r], 0x0A, nil) // Shutdown
	}
	for r := 1; r < size; r++ {
		rest, err := io.ReadAll(conns[r])
		require.NoError(t, err, "rank %d", r)
		assert.Empty(t, rest, "rank %d sent more than the spec's frames", r)
		err = cmds[r].Wait()
		assert.NoError(t, err, "rank %d: %s", r, outs[r])
		assert.Contains(t, outs[r].String(), fmt.Sprintf("ok rank %d sum 6 broadcast hello\n", r))
	}
}
