package netns_test

import (
	"fmt"
	"log"
	"os"
	"os/exec"
	"strconv"

	"github.com/starcomm/starcomm/internal/netns"
)

// Four ranks on four hosts named node0 to node3: rank r runs the test
// binary in host r's namespace, rank 0 listens on host 0's address only,
// the workers find it by name, and host 2's link is cut in the middle of
// the job. (Compiled, not run: it needs root.)
func Example() {
	if err := netns.Available(); err != nil {
		fmt.Println("skip:", err)
		return
	}
	n, err := netns.New("Example", 4, netns.Options{IPv6: true, Names: []string{"node0", "node1", "node2", "node3"}})
	if err != nil {
		log.Fatal(err)
	}
	defer n.Close()

	var ranks []*exec.Cmd
	for r := range n.Hosts() {
		cmd := n.SelfCommand(r, "-test.run=^$")
		cmd.Env = append(os.Environ(),
			"COBRE_COMM_BACKEND=tcp",
			"COBRE_TCP_COORDINATOR="+n.Name(0), // resolved through host r's hosts file
			"COBRE_TCP_BIND_ADDR="+n.Addr(0),
			"COBRE_TCP_PORT=29500",
			"COBRE_TCP_RANK="+strconv.Itoa(r),
			"COBRE_TCP_SIZE="+strconv.Itoa(n.Hosts()),
		)
		if err := cmd.Start(); err != nil {
			log.Fatal(err)
		}
		ranks = append(ranks, cmd)
	}
	// ... once the ranks are busy:
	if err := n.Cut(2); err != nil {
		log.Fatal(err)
	}
	for _, cmd := range ranks {
		_ = cmd.Wait() // ranks 0, 1, 3 should fail, naming rank 2
	}
}
