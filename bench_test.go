package starcomm_test

import (
	"context"
	"fmt"
	"io"
	"sync"
	"testing"

	"github.com/starcomm/starcomm/comm"
	"github.com/starcomm/starcomm/star"
	"github.com/starcomm/starcomm/testkit"
	"github.com/starcomm/starcomm/transport"
)

// Benchmarks run every rank as goroutines of this process over pipes, TCP
// loopback, or TLS (transport/mtls) over TCP loopback; an op's time is from the first rank's start to the last
// rank's end. SetBytes is the data every rank ends up with (allgatherv:
// ranks x bytes per rank; allreduce and broadcast: the buffer).

var benchNets = []struct {
	name string
	mk   func(testing.TB) testkit.Network
}{
	{"pipe", func(testing.TB) testkit.Network { return testkit.NewPipeNetwork() }},
	{"tcp", func(testing.TB) testkit.Network { return testkit.NewTCPNetwork() }},
	{"tls", func(tb testing.TB) testkit.Network {
		nw, err := testkit.NewTLSNetwork()
		if err != nil {
			tb.Fatalf("TLS network: %v", err)
		}
		return nw
	}},
}

func sizeName(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dKB", n/1000)
	}
	return fmt.Sprintf("%dB", n)
}

// runAll runs f on every rank b.N times, all ranks in step.
func runAll(b *testing.B, comms []comm.Communicator, f func(c comm.Communicator) error) {
	b.Helper()
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	b.ResetTimer()
	for r, c := range comms {
		wg.Go(func() {
			for i := 0; i < b.N; i++ {
				if err := f(c); err != nil {
					errs[r] = err
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	for r, err := range errs {
		if err != nil {
			b.Fatalf("rank %d: %v", r, err)
		}
	}
}

func startBench(b *testing.B, nw testkit.Network, ranks int) []comm.Communicator {
	comms, err := testkit.StartStar(context.Background(), nw, ranks, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = testkit.CloseAll(comms) })
	return comms
}

func BenchmarkAllgatherv(b *testing.B) {
	for _, nw := range benchNets {
		for _, ranks := range []int{2, 4} {
			for _, per := range []int{200_000, 2 << 20, 16 << 20} {
				b.Run(fmt.Sprintf("transport=%s/ranks=%d/bytes=%s", nw.name, ranks, sizeName(per)), func(b *testing.B) {
					comms := startBench(b, nw.mk(b), ranks)
					n := per / 8
					counts, displs := make([]int, ranks), make([]int, ranks)
					for r := range counts {
						counts[r], displs[r] = n, r*n
					}
					sends, recvs := make([][]float64, ranks), make([][]float64, ranks)
					for r := range ranks {
						sends[r], recvs[r] = make([]float64, n), make([]float64, ranks*n)
					}
					b.SetBytes(int64(ranks * per))
					b.ReportAllocs()
					ctx := context.Background()
					runAll(b, comms, func(c comm.Communicator) error {
						return comm.Allgatherv(ctx, c, sends[c.Rank()], recvs[c.Rank()], counts, displs)
					})
				})
			}
		}
	}
}

func BenchmarkAllreduce(b *testing.B) {
	for _, nw := range benchNets {
		for _, ranks := range []int{2, 4} {
			for _, size := range []int{32, 64 << 10} {
				b.Run(fmt.Sprintf("transport=%s/ranks=%d/bytes=%s", nw.name, ranks, sizeName(size)), func(b *testing.B) {
					comms := startBench(b, nw.mk(b), ranks)
					sends, recvs := make([][]float64, ranks), make([][]float64, ranks)
					for r := range ranks {
						sends[r], recvs[r] = make([]float64, size/8), make([]float64, size/8)
					}
					b.SetBytes(int64(size))
					b.ReportAllocs()
					ctx := context.Background()
					runAll(b, comms, func(c comm.Communicator) error {
						return comm.Allreduce(ctx, c, sends[c.Rank()], recvs[c.Rank()], comm.Sum)
					})
				})
			}
		}
	}
}

func BenchmarkBroadcast(b *testing.B) {
	for _, nw := range benchNets {
		for _, ranks := range []int{2, 4} {
			const size = 10240
			b.Run(fmt.Sprintf("transport=%s/ranks=%d/bytes=%s", nw.name, ranks, sizeName(size)), func(b *testing.B) {
				comms := startBench(b, nw.mk(b), ranks)
				bufs := make([][]uint8, ranks)
				for r := range bufs {
					bufs[r] = make([]uint8, size)
				}
				b.SetBytes(size)
				b.ReportAllocs()
				ctx := context.Background()
				runAll(b, comms, func(c comm.Communicator) error {
					return comm.Broadcast(ctx, c, bufs[c.Rank()], ranks-1)
				})
			})
		}
	}
}

func BenchmarkBarrier(b *testing.B) {
	for _, nw := range benchNets {
		for _, ranks := range []int{2, 4} {
			b.Run(fmt.Sprintf("transport=%s/ranks=%d", nw.name, ranks), func(b *testing.B) {
				comms := startBench(b, nw.mk(b), ranks)
				b.ReportAllocs()
				ctx := context.Background()
				runAll(b, comms, func(c comm.Communicator) error { return c.Barrier(ctx) })
			})
		}
	}
}

// BenchmarkRawRelay is the lower bound for a star allgatherv on the same
// sockets: workers write their bytes, the coordinator reads them all
// (concurrently, straight into one buffer) and writes the whole buffer back
// to every worker (concurrently). No framing, no checks, no reduction.
func BenchmarkRawRelay(b *testing.B) {
	for _, nw := range benchNets {
		for _, ranks := range []int{2, 4} {
			for _, per := range []int{200_000, 2 << 20, 16 << 20} {
				b.Run(fmt.Sprintf("transport=%s/ranks=%d/bytes=%s", nw.name, ranks, sizeName(per)), func(b *testing.B) {
					conns := rawStar(b, nw.mk(b), ranks)
					b.SetBytes(int64(ranks * per))
					b.ReportAllocs()
					total := ranks * per
					coordBuf := make([]byte, total)
					bufs := make([][]byte, ranks)
					for r := range bufs {
						bufs[r] = make([]byte, total)
					}
					// The coordinator serves each link from its own
					// goroutine, as star does: read the worker's part; when
					// every part is in, write the whole buffer back.
					type result struct{}
					arrived, sent := make(chan result, ranks), make(chan result, ranks)
					gos := make([]chan result, ranks)
					for w := 1; w < ranks; w++ {
						gos[w] = make(chan result, 1)
					}
					var wg sync.WaitGroup
					b.ResetTimer()
					for w := 1; w < ranks; w++ {
						wg.Go(func() { // worker w
							c := conns[w][0]
							for i := 0; i < b.N; i++ {
								if _, err := c.Write(bufs[w][w*per : (w+1)*per]); err != nil {
									b.Error(err)
									return
								}
								if _, err := io.ReadFull(c, bufs[w]); err != nil {
									b.Error(err)
									return
								}
							}
						})
						wg.Go(func() { // the coordinator's end of link w
							c := conns[0][w]
							for i := 0; i < b.N; i++ {
								_, _ = io.ReadFull(c, coordBuf[w*per:(w+1)*per])
								arrived <- result{}
								<-gos[w]
								_, _ = c.Write(coordBuf)
								sent <- result{}
							}
						})
					}
					wg.Go(func() { // the coordinator
						for i := 0; i < b.N; i++ {
							for w := 1; w < ranks; w++ {
								<-arrived
							}
							for w := 1; w < ranks; w++ {
								gos[w] <- result{}
							}
							for w := 1; w < ranks; w++ {
								<-sent
							}
						}
					})
					wg.Wait()
					b.StopTimer()
				})
			}
		}
	}
}

// rawStar connects ranks-1 workers to a coordinator over nw: conns[0][w]
// is the coordinator's end of link w, conns[w][0] the worker's.
func rawStar(b *testing.B, nw testkit.Network, ranks int) [][]transport.Conn {
	ln, err := nw.Listen()
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	conns := make([][]transport.Conn, ranks)
	for r := range conns {
		conns[r] = make([]transport.Conn, ranks)
	}
	for w := 1; w < ranks; w++ {
		done := make(chan error, 1)
		go func() {
			c, err := nw.Dialer().Dial(context.Background(), ln.Addr())
			conns[w][0] = c
			done <- err
		}()
		c, err := ln.Accept()
		if err != nil {
			b.Fatal(err)
		}
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		conns[0][w] = c
	}
	b.Cleanup(func() {
		for _, row := range conns {
			for _, c := range row {
				if c != nil {
					c.Close()
				}
			}
		}
	})
	return conns
}

// BenchmarkControlSession measures what the control session costs small
// collectives (allreduce of 32 bytes, barrier) at 4 ranks over TCP: off
// (Liveness < 0, the spec's wire alone), on (heartbeats and out-of-band
// Aborts, the default), and on with the desync check (CheckCollectives:
// one fingerprint per rank per collective).
func BenchmarkControlSession(b *testing.B) {
	modes := []struct {
		name  string
		tweak func(*star.Config)
	}{
		{"off", func(c *star.Config) { c.Liveness = -1 }},
		{"on", nil},
		{"check", func(c *star.Config) { c.CheckCollectives = true }},
	}
	const ranks = 4
	for _, op := range []string{"allreduce-32B", "barrier"} {
		for _, m := range modes {
			b.Run(fmt.Sprintf("op=%s/control=%s", op, m.name), func(b *testing.B) {
				comms, err := testkit.StartStar(context.Background(), testkit.NewTCPNetwork(), ranks, m.tweak)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = testkit.CloseAll(comms) })
				sends, recvs := make([][]float64, ranks), make([][]float64, ranks)
				for r := range ranks {
					sends[r], recvs[r] = make([]float64, 4), make([]float64, 4)
				}
				b.ReportAllocs()
				ctx := context.Background()
				runAll(b, comms, func(c comm.Communicator) error {
					if op == "barrier" {
						return c.Barrier(ctx)
					}
					return comm.Allreduce(ctx, c, sends[c.Rank()], recvs[c.Rank()], comm.Sum)
				})
			})
		}
	}
}
