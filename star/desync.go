package star

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/starcomm/starcomm/comm"
)

// ErrDesync is the cause when ranks called different collectives, or the
// same one with arguments that disagree, as Config.CheckCollectives finds.
// A *DesyncError on the rank that compared them; through an Abort on the
// others.
var ErrDesync = errors.New("star: ranks called different collectives")

// DesyncError is what Config.CheckCollectives found: collective number
// Seq, as rank Rank called it (Called), differs from what the other ranks
// called (Others says which and what).
type DesyncError struct {
	Seq    uint64
	Rank   int
	Called string
	Others string
}

// Error names the collective, the rank that differs, its call and the
// others'.
func (e *DesyncError) Error() string {
	return fmt.Sprintf("collective #%d: rank %d called %s; %s", e.Seq, e.Rank, e.Called, e.Others)
}

// Is matches ErrDesync.
func (e *DesyncError) Is(target error) bool { return target == ErrDesync }

// call is what a rank passed to a collective, as the desync check compares
// it (Config.CheckCollectives).
type call struct {
	op     string
	dt     comm.DType
	n      int   // elements (allreduce, broadcast)
	counts []int // allgatherv
	root   int   // broadcast
	rop    comm.ReduceOp
}

// Operation codes of a fingerprint. A worker that closes its
// communicator sends the fingerprint of a call to OpClose as the next
// collective's (see worker.shutdown): a coordinator waiting for that
// collective's fingerprints then fails every rank at once, naming it,
// instead of waiting out the timeout.
var opCodes = map[string]byte{comm.OpAllgatherv: 1, comm.OpAllreduce: 2, comm.OpBroadcast: 3, comm.OpBarrier: 4, OpClose: 5}

// listedCounts is the most ranks whose allgatherv counts a fingerprint
// lists one by one (16 KiB of them): beyond it, it carries their hash, so
// that a fingerprint stays within a control message (maxMsg) at any Size.
const listedCounts = 4096

// fingerprint appends to dst[:0] the canonical bytes of collective seq
// called as cl: seq u64 BE, op u8, element type u8, reduce op u8, root u32
// BE, n u32 BE, then, for allgatherv, n counts u32 BE, or, for more than
// listedCounts ranks, the 64-bit FNV-1a hash (u64 BE) of those counts'
// bytes.
func (cl *call) fingerprint(dst []byte, seq uint64) []byte {
	dst = binary.BigEndian.AppendUint64(dst[:0], seq)
	dst = append(dst, opCodes[cl.op], byte(cl.dt), byte(cl.rop))
	dst = binary.BigEndian.AppendUint32(dst, uint32(cl.root))
	if cl.op == comm.OpAllgatherv {
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(cl.counts)))
		if len(cl.counts) > listedCounts {
			return binary.BigEndian.AppendUint64(dst, countsHash(cl.counts))
		}
		for _, n := range cl.counts {
			dst = binary.BigEndian.AppendUint32(dst, uint32(n))
		}
		return dst
	}
	return binary.BigEndian.AppendUint32(dst, uint32(cl.n))
}

// countsHash is the 64-bit FNV-1a hash of counts, each as u32 BE, without
// allocating.
func countsHash(counts []int) uint64 {
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	for _, n := range counts {
		for shift := 24; shift >= 0; shift -= 8 {
			h = (h ^ uint64(byte(uint32(n)>>shift))) * prime
		}
	}
	return h
}

// describeFingerprint writes a fingerprint as the call it stands for, e.g.
// "allreduce(float64, n=4, sum)".
func describeFingerprint(fp []byte) string {
	if len(fp) < 19 {
		return fmt.Sprintf("an unreadable call (%x)", fp)
	}
	op := "?"
	for name, code := range opCodes {
		if code == fp[8] {
			op = name
		}
	}
	dt, rop := comm.DType(fp[9]), comm.ReduceOp(fp[10])
	root := int(int32(binary.BigEndian.Uint32(fp[11:15])))
	n := int(binary.BigEndian.Uint32(fp[15:19]))
	switch op {
	case comm.OpAllgatherv:
		if n > listedCounts && len(fp) >= 27 {
			return fmt.Sprintf("allgatherv(%v, counts of %d ranks with hash %016x)", dt, n, binary.BigEndian.Uint64(fp[19:27]))
		}
		counts := make([]string, 0, n)
		for i := 0; i < n && 19+4*i+4 <= len(fp); i++ {
			counts = append(counts, strconv.Itoa(int(binary.BigEndian.Uint32(fp[19+4*i:]))))
		}
		return fmt.Sprintf("allgatherv(%v, counts=[%s])", dt, strings.Join(counts, ","))
	case comm.OpAllreduce:
		return fmt.Sprintf("allreduce(%v, n=%d, %v)", dt, n, rop)
	case comm.OpBroadcast:
		return fmt.Sprintf("broadcast(%v, n=%d, root=%d)", dt, n, root)
	case comm.OpBarrier:
		return "barrier()"
	case OpClose:
		return "Close() (it closed its communicator)"
	}
	return fmt.Sprintf("an unknown call (%x)", fp)
}

// compareCalls returns nil when every rank's fingerprint of collective seq
// (fps[r], nil for a rank that was not checked) is the same, else the
// *DesyncError naming the rank that differs: the ranks that agree with the
// most others are right (with rank 0's group winning a tie).
func compareCalls(seq uint64, fps [][]byte) error {
	groups := map[string][]int{}
	var order []string
	for r, fp := range fps {
		if fp == nil {
			continue
		}
		k := string(fp)
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	if len(groups) <= 1 {
		return nil
	}
	best := string(fps[0])
	for _, k := range order {
		if len(groups[k]) > len(groups[best]) {
			best = k
		}
	}
	var outliers []string
	var first = -1
	var firstCall string
	for _, k := range order {
		if k == best {
			continue
		}
		rs := groups[k]
		if first < 0 {
			first, firstCall = rs[0], describeFingerprint([]byte(k))
			if len(rs) > 1 {
				outliers = append(outliers, fmt.Sprintf("%s also called it", rankWord(rs[1:])))
			}
			continue
		}
		outliers = append(outliers, fmt.Sprintf("%s called %s", rankWord(rs), describeFingerprint([]byte(k))))
	}
	others := append(outliers, fmt.Sprintf("%s called %s", rankWord(groups[best]), describeFingerprint([]byte(best))))
	return &DesyncError{Seq: seq, Rank: first, Called: firstCall, Others: strings.Join(others, "; ")}
}

// rankWord writes ranks as "rank 2" or "ranks 0,1,3".
func rankWord(ranks []int) string {
	if len(ranks) == 1 {
		return "rank " + strconv.Itoa(ranks[0])
	}
	return "ranks " + joinRanks(ranks)
}
