package shm_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/shm"
)

var nameSeq atomic.Int64

// uniqueName returns a segment name no other test (or test process) uses.
func uniqueName(t testing.TB) string {
	return fmt.Sprintf("test-%d-%d-%d", os.Getpid(), time.Now().UnixNano()%1_000_000, nameSeq.Add(1))
}

// startRanks starts size ranks of one shm job as goroutines of this
// process, each with its own mapping of the segment.
func startRanks(t testing.TB, size int, tweak func(*shm.CommConfig)) []*shm.Comm {
	t.Helper()
	name := uniqueName(t)
	comms := make([]*shm.Comm, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		cfg := shm.CommConfig{Name: name, Rank: r, Size: size, ConnectTimeout: 20 * time.Second, Timeout: 30 * time.Second}
		if tweak != nil {
			tweak(&cfg)
		}
		wg.Go(func() { comms[r], errs[r] = shm.New(context.Background(), cfg) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, c := range comms {
			if c != nil {
				c.Close()
			}
		}
		t.Fatalf("start %d shm ranks: %v", size, err)
	}
	return comms
}

func asComms(cs []*shm.Comm) []comm.Communicator {
	out := make([]comm.Communicator, len(cs))
	for i, c := range cs {
		out[i] = c
	}
	return out
}
