package starcomm_test

import (
	"context"
	"fmt"
	"log"

	"github.com/starcomm/starcomm"
	"github.com/starcomm/starcomm/comm"
)

// A program builds its communicator from the COBRE_* environment (here
// none is set, so it is the single-rank local backend) and calls
// collectives with typed slices.
func Example() {
	ctx := context.Background()
	c, err := starcomm.FromEnv(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// Every rank contributes two values; everyone receives all of them in
	// rank order.
	counts := make([]int, c.Size())
	displs := make([]int, c.Size())
	for r := range counts {
		counts[r], displs[r] = 2, 2*r
	}
	send := []float64{float64(c.Rank()), 0.5}
	recv := make([]float64, 2*c.Size())
	if err := comm.Allgatherv(ctx, c, send, recv, counts, displs); err != nil {
		log.Fatal(err)
	}

	// A deterministic sum: reduced in rank order on every rank.
	sum := make([]float64, 1)
	if err := comm.Allreduce(ctx, c, []float64{1.5}, sum, comm.Sum); err != nil {
		log.Fatal(err)
	}
	fmt.Println(c.Rank(), c.Size(), recv, sum)
	// Output: 0 1 [0 0.5] [1.5]
}
