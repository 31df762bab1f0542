package shm

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/starcomm/starcomm/comm"
)

// BackendName is the name of the shared-memory backend in errors
// (comm.InitializationFailedError.Backend, comm.BackendNotAvailableError).
const BackendName = "shm"

// KindPOSIX is the Kind of the provider of the shm backend: regions are
// POSIX shared memory mapped by every rank of the communicator.
const KindPOSIX = "posix"

// DefaultDir is where segments live: the tmpfs of POSIX shared memory.
const DefaultDir = "/dev/shm"

// DefaultChunkBytes is the size of one chunk of the pipeline: each rank has
// two chunk buffers in the segment, so a message of any size moves through
// 2 × DefaultChunkBytes of shared memory per rank.
const DefaultChunkBytes = 256 << 10

// DefaultTimeout is CommConfig.Timeout's default: 60 s, as the tcp
// backend's.
const DefaultTimeout = 60 * time.Second

// DefaultConnectTimeout is CommConfig.ConnectTimeout's default: 30 s, as
// the tcp backend's.
const DefaultConnectTimeout = 30 * time.Second

// MaxNameLen bounds COBRE_SHM_NAME: the segment's file name (the prefix,
// the name and a region suffix) must fit the file system's 255 bytes.
const MaxNameLen = 200

// MaxSize bounds CommConfig.Size: ranks are stored in 16 bits of the
// abort word.
const MaxSize = 1 << 15

// filePrefix starts the name of every file starcomm puts in Dir.
const filePrefix = "starcomm-"

// CommConfig configures one rank of a shared-memory communicator.
type CommConfig struct {
	// Name names the job's segment (COBRE_SHM_NAME): letters, digits, '-'
	// and '_', at most MaxNameLen bytes. Every rank of a job uses the same
	// name, and no two live jobs may.
	Name string
	// Rank is this process's rank, 0..Size-1 (COBRE_TCP_RANK).
	Rank int
	// Size is the number of ranks (COBRE_TCP_SIZE), at least 1.
	Size int
	// Timeout is how long a rank waits for a peer that makes no progress
	// before it declares that peer hung (COBRE_SHM_TIMEOUT_SECS). A rank
	// that computes for longer than this between collectives while the
	// others wait for it is declared failed. 0 means the default, 60 s.
	Timeout time.Duration
	// ConnectTimeout bounds start-up: how long a rank waits for every rank
	// to join the segment (COBRE_TCP_CONNECT_TIMEOUT_MS). 0 means the
	// default, 30 s.
	ConnectTimeout time.Duration
	// Dir is the directory of the segment; "" means DefaultDir.
	Dir string
	// ChunkBytes is the pipeline's chunk size in bytes, a multiple of 64;
	// 0 means DefaultChunkBytes. Every rank of a job must use the same.
	ChunkBytes int
	// MaxRegionBytes caps one region of the communicator's Provider, as
	// Config.MaxRegionBytes does for the heap fallback; 0 means no cap
	// beyond the free space of Dir.
	MaxRegionBytes int
	// OnFailure, if set, is called once, with the communicator's first
	// failure (of start-up or a collective), synchronously, before the
	// failing call returns. It must not call the communicator.
	OnFailure func(Failure)
}

// Failure is what CommConfig.OnFailure receives.
type Failure struct {
	// Op is the operation that failed: a collective's name (comm.OpBarrier
	// and the others) or OpStartup.
	Op string
	// Rank is this rank; Blamed the rank at fault as this rank sees it, or
	// -1 when unknown.
	Rank, Blamed int
	// Err is the error the call returns.
	Err error
}

// OpStartup is the Operation of start-up failures.
const OpStartup = "start-up"

// Errors a collective or start-up failure wraps (see the package doc).
var (
	// ErrPeerExited: a rank's process ended without closing the
	// communicator (crashed, was killed, or exited).
	ErrPeerExited = errors.New("process exited without closing the communicator")
	// ErrPeerClosed: a rank closed the communicator while others still
	// expected it in a collective, or during one (comm.ErrPeerClosed:
	// the tcp backend's too).
	ErrPeerClosed = comm.ErrPeerClosed
	// ErrMismatch: ranks called different collectives, or disagree on an
	// argument the segment carries (element type, operator, root, length).
	ErrMismatch = errors.New("ranks called different collectives or disagree on their arguments")
	// ErrPidNamespace: a rank runs in another pid namespace than the rank
	// that created the segment (another container): the ranks' process
	// ids, by which each watches the others, would name other processes
	// or none.
	ErrPidNamespace = errors.New("ranks in different pid namespaces")
)

// AbortError is the cause of a collective that failed because another rank
// failed: Rank is the rank at fault, Reporter the rank that noticed, Op the
// operation Reporter was in and Message its description. Err is the
// failure's class: os.ErrDeadlineExceeded (a hang), ErrPeerExited,
// ErrPeerClosed (that rank's Close, also when it interrupted its
// collective), ErrMismatch, context.Canceled or context.DeadlineExceeded
// (that rank's context); on the rank whose Close interrupted its own
// collective, comm.ErrInvalidCommunicator.
type AbortError struct {
	Rank, Reporter int
	Op             string
	Message        string
	Err            error
}

// Error names the failed rank, the collective and the rank that reported it.
func (e *AbortError) Error() string {
	return fmt.Sprintf("rank %d failed during %s (reported by rank %d): %s", e.Rank, e.Op, e.Reporter, e.Message)
}

// Unwrap returns the failure's class.
func (e *AbortError) Unwrap() error { return e.Err }

// InUseError reports a segment that a live job uses: a second job started
// with the same name. Nothing of that job was touched.
type InUseError struct {
	// Path is the segment's file.
	Path string
	// Reason says how the segment is used (running, another size, this
	// rank taken by a live process).
	Reason string
}

// Error names the segment and says how to avoid the clash.
func (e *InUseError) Error() string {
	return fmt.Sprintf("segment %s is in use by another live job (%s): give every job its own COBRE_SHM_NAME", e.Path, e.Reason)
}

// MissingRanksError reports a start-up that ended before every rank joined
// the segment. It unwraps to os.ErrDeadlineExceeded when the connect
// timeout passed.
type MissingRanksError struct {
	// Ranks are the ranks that never joined, in increasing order.
	Ranks []int
	// Err is the cause: os.ErrDeadlineExceeded, or the start-up abort of
	// another rank.
	Err error
	// Size and Within, when Within is set (a wait that the connect
	// timeout ended), are the job's size and that timeout, for the
	// message.
	Size   int
	Within time.Duration
}

// Error lists the ranks that never joined, and why the wait ended: after
// the connect timeout, how many joined within it and which setting bounds
// it.
func (e *MissingRanksError) Error() string {
	if e.Within > 0 && e.Size > 0 {
		return fmt.Sprintf("%d of %d ranks joined the segment within %v (the connect timeout, COBRE_TCP_CONNECT_TIMEOUT_MS); missing ranks %s: %v",
			e.Size-len(e.Ranks), e.Size, e.Within, comm.FormatRanks(e.Ranks), e.Err)
	}
	return fmt.Sprintf("missing ranks %s: %v", comm.FormatRanks(e.Ranks), e.Err)
}

// Unwrap returns the cause.
func (e *MissingRanksError) Unwrap() error { return e.Err }

// CheckName reports whether name is a valid segment name: 1..MaxNameLen
// letters, digits, '-' and '_'. It returns what is wrong, or "".
func CheckName(name string) string {
	switch {
	case name == "":
		return "must not be empty"
	case len(name) > MaxNameLen:
		return fmt.Sprintf("must be at most %d bytes", MaxNameLen)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return fmt.Sprintf("must hold only letters, digits, '-' and '_' (found %q)", r)
		}
	}
	return ""
}

// SegmentPath returns the file of the segment named name in dir ("" means
// DefaultDir): dir/starcomm-NAME.
func SegmentPath(dir, name string) string {
	if dir == "" {
		dir = DefaultDir
	}
	return filepath.Join(dir, filePrefix+name)
}

// RemoveFiles removes the segment named name in dir ("" means DefaultDir)
// and the files of its regions, if any are left: a launcher's cleanup
// after a job whose every rank was killed (a rank killed inside
// CreateRegion can leave a region's file). Only for a job that has ended:
// a live job's segment is not to be removed.
func RemoveFiles(dir, name string) {
	path := SegmentPath(dir, name)
	_ = os.Remove(path)
	removeRegions(path)
}

// removeRegions removes the region files of the segment at path.
func removeRegions(path string) {
	left, _ := filepath.Glob(globEscape(path) + ".region-*")
	for _, f := range left {
		_ = os.Remove(f)
	}
}

// globEscape escapes the glob metacharacters of path.
func globEscape(path string) string {
	var b strings.Builder
	for _, r := range path {
		if strings.ContainsRune(`*?[\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// regionPath returns the file of region k of the segment at path. It
// exists only while CreateRegion runs.
func regionPath(path string, k uint64) string {
	return fmt.Sprintf("%s.region-%d", path, k)
}

// withDefaults fills the zero fields of c.
func (c CommConfig) withDefaults() CommConfig {
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.Dir == "" {
		c.Dir = DefaultDir
	}
	if c.ChunkBytes == 0 {
		c.ChunkBytes = DefaultChunkBytes
	}
	return c
}

// Validate reports every invalid field of c, naming it.
func (c CommConfig) Validate() error {
	var errs []string
	if why := CheckName(c.Name); why != "" {
		errs = append(errs, fmt.Sprintf("Name %q %s", c.Name, why))
	}
	switch {
	case c.Size < 1 || c.Size > MaxSize:
		errs = append(errs, fmt.Sprintf("Size is %d; it must be in 1..%d", c.Size, MaxSize))
	case c.Rank < 0 || c.Rank >= c.Size:
		errs = append(errs, fmt.Sprintf("Rank is %d; it must be in 0..%d for Size %d", c.Rank, c.Size-1, c.Size))
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Sprintf("Timeout is %v; it must be positive", c.Timeout))
	}
	if c.ConnectTimeout < 0 {
		errs = append(errs, fmt.Sprintf("ConnectTimeout is %v; it must be positive", c.ConnectTimeout))
	}
	if c.ChunkBytes < 0 || c.ChunkBytes%64 != 0 || c.ChunkBytes > 1<<30 {
		errs = append(errs, fmt.Sprintf("ChunkBytes is %d; it must be a multiple of 64 up to 1 GiB (0: the default)", c.ChunkBytes))
	}
	if c.MaxRegionBytes < 0 {
		errs = append(errs, fmt.Sprintf("MaxRegionBytes is %d; it must be 0 (no cap) or positive", c.MaxRegionBytes))
	}
	if len(errs) > 0 {
		return fmt.Errorf("shm: %s", strings.Join(errs, "; "))
	}
	return nil
}

// For returns the shared-memory provider of c: the provider of a shm
// communicator (or of a communicator SplitLocal returned), and the heap
// fallback for every other communicator.
func For(c comm.Communicator) Provider {
	if p, ok := c.(interface{ Provider() Provider }); ok {
		return p.Provider()
	}
	return HeapFallback(c)
}
