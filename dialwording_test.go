package starcomm_test

import (
	"context"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/starcomm/starcomm"
	"github.com/starcomm/starcomm/comm"
)

// TestWorkerConnectTimeoutWording: a worker whose coordinator never
// listens gives up after its connect timeout with the same words every
// time, whichever of the dialer's timer and the start-up's fires first:
// "connect timeout elapsed", and never "context deadline exceeded" (two
// workers of one job used to word it differently). Over real TCP, 20
// workers at once, connect timeout 300 ms.
func TestWorkerConnectTimeoutWording(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close()) // nobody listens there now
	const workers = 20
	errs := make([]error, workers)
	done := make(chan struct{})
	for i := range workers {
		go func() {
			defer func() { done <- struct{}{} }()
			cfg := starcomm.DefaultConfig()
			cfg.Backend, cfg.Coordinator, cfg.Port, cfg.Rank, cfg.Size = "tcp", "127.0.0.1", port, 1, 2
			cfg.ConnectTimeout = 300 * time.Millisecond
			c, err := starcomm.New(context.Background(), cfg)
			if err == nil {
				_ = c.Close()
			}
			errs[i] = err
		}()
	}
	for range workers {
		<-done
	}
	for i, err := range errs {
		var ife *comm.InitializationFailedError
		require.ErrorAs(t, err, &ife, "worker %d", i)
		msg := err.Error()
		assert.Contains(t, msg, "(connect timeout elapsed)", "worker %d", i)
		assert.False(t, strings.Contains(msg, "context deadline exceeded"), "worker %d: %s", i, msg)
		assert.ErrorIs(t, err, os.ErrDeadlineExceeded, "worker %d", i)
		assert.ErrorIs(t, err, context.DeadlineExceeded, "worker %d", i)
	}
	t.Logf("worker 0: %v", errs[0])
}
