package tcp

import (
	"os"
	"strconv"
	"strings"
	"sync"
)

// systemBufferCaps reads the largest receive and send buffers a program
// may ask for (net.core.rmem_max and wmem_max), once; 0 when unknown.
var systemBufferCaps = sync.OnceValues(func() (recv, send int) {
	return readCap("/proc/sys/net/core/rmem_max"), readCap("/proc/sys/net/core/wmem_max")
})

// readCap reads one of the caps; 0 when it cannot.
func readCap(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 0 {
		return 0
	}
	return n
}
