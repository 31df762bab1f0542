package shm

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The segment's layout. Every offset is a multiple of 64 (a cache line) so
// that words written by different ranks never share a line.
//
//	0       header (page 0): magic, version, geometry, state, abort word
//	4096    control blocks, ctlStride bytes per rank
//	dataOff per rank, two halves of ChunkBytes each
const (
	segMagic   = 0x314d485354524153 // "SARTSHM1" little-endian
	segVersion = 3
	pageSize   = 4096
	ctlOff     = pageSize
	ctlStride  = 512
)

// Header fields (offsets in page 0).
const (
	hMagic    = 0   // uint64
	hVersion  = 8   // uint32
	hSize     = 12  // uint32
	hChunk    = 16  // uint64
	hNonce    = 24  // uint64: random, set by the rank that initialised the segment
	hState    = 32  // uint32: stateForming, stateRunning
	hJoined   = 36  // uint32: ranks that joined
	hPidNS    = 40  // uint64: the pid namespace (inode) of the rank that initialised the segment; 0: unknown
	hStartGen = 48  // uint32: start-up news (the last join, a failure, a rank's context ended); the futex word of the ranks waiting for the others to join
	hAbort    = 64  // uint64: the abort word (see packAbort), its own cache line
	hStartErr = 128 // uint32: ranks whose start-up failed
)

// Segment states.
const (
	stateForming = 1
	stateRunning = 2
)

// Control block fields (offsets in a rank's block).
const (
	cPid      = 0  // int32
	cState    = 4  // uint32: slotFree, slotJoined, slotClosed, slotFailed
	cProg     = 64 // uint64: the rank's progress counter, its own line
	cHdr      = 72 // two collective headers (steps G even, G odd), on the progress line
	hdrSize   = 24
	cBell     = 128 // uint32: futex word others ring to wake this rank
	cSleeping = 132 // uint32: 1 while this rank sleeps on its bell
	cMsgLen   = 192 // uint32: length of the failure message
	cMsg      = 196 // the failure message, up to ctlStride-cMsg bytes
	maxMsg    = ctlStride - cMsg
)

// Slot states.
const (
	slotFree   = 0
	slotJoined = 1
	slotClosed = 2
	slotFailed = 3
)

// Lock bytes of the segment file (open file description locks, released by
// the kernel when the process dies however it dies).
const (
	lockDoor  = 0 // exclusive while a rank joins, initialises or removes the segment
	lockAlive = 1 // shared by every member from join to leave
)

// geometry is the segment's size for a job.
type geometry struct {
	size       int
	chunk      int
	halfStride int
	dataOff    int
	total      int
}

func newGeometry(size, chunk int) geometry {
	g := geometry{size: size, chunk: chunk, halfStride: chunk}
	g.dataOff = roundUp(ctlOff+size*ctlStride, pageSize)
	g.total = roundUp(g.dataOff+size*2*g.halfStride, pageSize)
	return g
}

func roundUp(n, m int) int { return (n + m - 1) / m * m }

// segment is one rank's mapping of the job's segment.
type segment struct {
	path string
	fd   int
	mem  []byte
	geo  geometry
	base unsafe.Pointer
	// replaced is true when this rank found a segment left by a job that
	// had ended without removing it, and replaced it.
	replaced bool
	// dev and ino identify the segment's file (0: unknown), so that
	// forget removes this job's name only, never a later job's.
	dev, ino uint64
}

// forget removes the segment's name (and its regions' names) once its
// job has failed: no rank can join a running job, and the ranks still
// attached keep their mapping. Without it, a rank that leaves last after
// the others failed (a hung rank, killed once they had) left the file
// behind. The name is removed only if it is still this job's file.
func (s *segment) forget() {
	var st unix.Stat_t
	if s.ino == 0 || unix.Stat(s.path, &st) != nil || uint64(st.Dev) != s.dev || st.Ino != s.ino { //nolint:unconvert
		return
	}
	_ = unix.Unlink(s.path)
	removeRegions(s.path)
}

func (s *segment) u32(off int) *uint32 { return (*uint32)(unsafe.Add(s.base, off)) }
func (s *segment) u64(off int) *uint64 { return (*uint64)(unsafe.Add(s.base, off)) }
func (s *segment) ctl(r int) int       { return ctlOff + r*ctlStride }
func (s *segment) prog(r int) *uint64  { return s.u64(s.ctl(r) + cProg) }
func (s *segment) bell(r int) *uint32  { return s.u32(s.ctl(r) + cBell) }
func (s *segment) sleeping(r int) *uint32 {
	return s.u32(s.ctl(r) + cSleeping)
}
func (s *segment) slotState(r int) *uint32 { return s.u32(s.ctl(r) + cState) }
func (s *segment) pid(r int) *int32        { return (*int32)(unsafe.Add(s.base, s.ctl(r)+cPid)) }

// half returns the offset of rank r's half h (0 or 1).
func (s *segment) half(r, h int) int {
	return s.geo.dataOff + (2*r+h)*s.geo.halfStride
}

// setLock takes (typ F_RDLCK or F_WRLCK) or releases (F_UNLCK) lock byte b
// without waiting; it reports false when another process holds a
// conflicting lock.
func setLock(fd int, b int64, typ int16) (bool, error) {
	lk := unix.Flock_t{Type: typ, Whence: 0, Start: b, Len: 1}
	err := unix.FcntlFlock(uintptr(fd), unix.F_OFD_SETLK, &lk)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES):
		return false, nil
	}
	return false, err
}

// lockUntil takes lock byte b, retrying until deadline.
func lockUntil(ctx context.Context, fd int, b int64, typ int16, deadline time.Time) error {
	wait := 100 * time.Microsecond
	for {
		ok, err := setLock(fd, b, typ)
		if err != nil || ok {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return os.ErrDeadlineExceeded
		}
		time.Sleep(wait) // polling a lock held for microseconds by a joining rank
		wait = min(2*wait, 5*time.Millisecond)
	}
}

// sameFile reports whether path still names the file open as fd.
func sameFile(fd int, path string) bool {
	var a, b unix.Stat_t
	if unix.Fstat(fd, &a) != nil || unix.Stat(path, &b) != nil {
		return false
	}
	return a.Dev == b.Dev && a.Ino == b.Ino
}

// join opens (creating or replacing) the segment of cfg and registers rank
// cfg.Rank in it. It returns with the door lock released and the alive lock
// held shared. See the package doc for the protocol.
func join(ctx context.Context, cfg CommConfig, deadline time.Time) (*segment, error) {
	path := SegmentPath(cfg.Dir, cfg.Name)
	geo := newGeometry(cfg.Size, cfg.ChunkBytes)
	for {
		fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
		if err != nil {
			if fi, lerr := os.Lstat(path); lerr == nil {
				if nerr := notSegment(path, fi.Mode()); nerr != nil {
					return nil, nerr
				}
			}
			err = &fs.PathError{Op: "open", Path: path, Err: err}
			if errors.Is(err, fs.ErrPermission) {
				return nil, fmt.Errorf("cannot open the segment (another user's job, or a directory this user may not write): %w", err)
			}
			return nil, err
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err == nil && st.Mode&unix.S_IFMT != unix.S_IFREG {
			unix.Close(fd)
			fi, lerr := os.Lstat(path)
			if lerr != nil {
				return nil, &fs.PathError{Op: "open", Path: path, Err: lerr}
			}
			if nerr := notSegment(path, fi.Mode()); nerr != nil {
				return nil, nerr
			}
			continue // replaced by a regular file since: open it again
		}
		s, retry, err := joinFD(ctx, cfg, path, fd, geo, deadline)
		if err != nil || !retry {
			if err != nil {
				unix.Close(fd)
			}
			return s, err
		}
		unix.Close(fd) // the file was removed or replaced while we opened it
	}
}

// notSegment is the error of a segment path that holds something other
// than a regular file (mode m), which this rank leaves alone; nil for a
// regular file.
func notSegment(path string, m fs.FileMode) error {
	// Not internal/filekind: shm imports comm, the standard library and
	// x/sys only (TestImports).
	var what string
	switch {
	case m.IsRegular():
		return nil
	case m&fs.ModeSymlink != 0:
		what = "a symbolic link"
	case m.IsDir():
		what = "a directory"
	case m&fs.ModeNamedPipe != 0:
		what = "a named pipe"
	case m&fs.ModeDevice != 0:
		what = "a device"
	case m&fs.ModeSocket != 0:
		what = "a socket"
	default:
		what = "of another kind (" + m.Type().String() + ")"
	}
	return fmt.Errorf("%s is %s, not a segment: remove it, or give the job another COBRE_SHM_NAME", path, what)
}

// joinFD is join on an open segment file. retry is true when the file
// was unlinked before this rank took the door: open the path again.
func joinFD(ctx context.Context, cfg CommConfig, path string, fd int, geo geometry, deadline time.Time) (s *segment, retry bool, err error) {
	if err := lockUntil(ctx, fd, lockDoor, unix.F_WRLCK, deadline); err != nil {
		return nil, false, fmt.Errorf("waiting for the segment's door lock: %w", err)
	}
	defer setLock(fd, lockDoor, unix.F_UNLCK)
	if !sameFile(fd, path) {
		return nil, true, nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, false, err
	}
	s = &segment{path: path, fd: fd, geo: geo, dev: uint64(st.Dev), ino: st.Ino} //nolint:unconvert // Dev is uint32 on some platforms
	alone, err := setLock(fd, lockAlive, unix.F_WRLCK)
	if err != nil {
		return nil, false, err
	}
	if alone {
		// No live process uses the file: it is new, or left by a job
		// that ended without removing it. Initialise it afresh.
		s.replaced = st.Size > 0
		if s.replaced {
			removeRegions(path) // what a job killed in CreateRegion left
		}
		if err := s.initialise(); err != nil {
			// Nobody else uses the file, and this rank holds the door:
			// do not leave an empty or half-sized file behind (a full
			// /dev/shm).
			if sameFile(fd, path) {
				_ = unix.Unlink(path)
			}
			setLock(fd, lockAlive, unix.F_UNLCK)
			return nil, false, err
		}
		// Holding the door, nobody can take the alive lock between these.
		if _, err := setLock(fd, lockAlive, unix.F_UNLCK); err != nil {
			s.unmap()
			return nil, false, err
		}
	} else if err := s.attach(st.Size); err != nil {
		return nil, false, err
	}
	if ok, err := setLock(fd, lockAlive, unix.F_RDLCK); err != nil || !ok {
		s.unmap()
		if err == nil {
			err = errors.New("cannot share the segment's alive lock")
		}
		return nil, false, err
	}
	if err := s.register(cfg.Rank); err != nil {
		setLock(fd, lockAlive, unix.F_UNLCK)
		s.unmap()
		return nil, false, err
	}
	return s, false, nil
}

// initialise truncates the file to the job's size (zeroing it) and writes
// the header.
func (s *segment) initialise() error {
	if err := unix.Ftruncate(s.fd, 0); err != nil {
		return fmt.Errorf("truncating the segment: %w", err)
	}
	if err := unix.Ftruncate(s.fd, int64(s.geo.total)); err != nil {
		return fmt.Errorf("sizing the segment to %d bytes: %w", s.geo.total, err)
	}
	// Reserve the pages now: a full /dev/shm is an error here, not a
	// SIGBUS in a collective.
	if err := unix.Fallocate(s.fd, 0, 0, int64(s.geo.total)); err != nil && !errors.Is(err, unix.EOPNOTSUPP) {
		return fmt.Errorf("allocating the segment's %d bytes: %w", s.geo.total, err)
	}
	if err := s.mmap(); err != nil {
		return err
	}
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	*s.u32(hVersion) = segVersion
	*s.u32(hSize) = uint32(s.geo.size)
	*s.u64(hChunk) = uint64(s.geo.chunk)
	*s.u64(hNonce) = binary.LittleEndian.Uint64(nonce[:])
	*s.u64(hPidNS) = pidNamespace()
	atomic.StoreUint32(s.u32(hState), stateForming)
	atomic.StoreUint64(s.u64(hMagic), segMagic)
	return nil
}

// attach maps a segment that live processes use and checks that it is this
// job's, still forming.
func (s *segment) attach(size int64) error {
	if size < pageSize {
		return &InUseError{Path: s.path, Reason: fmt.Sprintf("a live process holds a %d-byte file that is not a starcomm segment", size)}
	}
	want := s.geo.total
	s.geo.total = pageSize
	if err := s.mmap(); err != nil {
		return err
	}
	magic, version := atomic.LoadUint64(s.u64(hMagic)), *s.u32(hVersion)
	size32, chunk := int(*s.u32(hSize)), int(*s.u64(hChunk))
	s.unmap()
	s.geo.total = want
	switch {
	case magic != segMagic || version != segVersion:
		return &InUseError{Path: s.path, Reason: "a live process holds a file that is not a starcomm segment of this version"}
	case size32 != s.geo.size || chunk != s.geo.chunk:
		return &InUseError{Path: s.path, Reason: fmt.Sprintf("a live job of %d ranks with %d-byte chunks uses it; this job has %d ranks with %d-byte chunks", size32, chunk, s.geo.size, s.geo.chunk)}
	case int64(want) != size:
		return &InUseError{Path: s.path, Reason: fmt.Sprintf("the segment is %d bytes, want %d", size, want)}
	}
	return s.mmap()
}

// register claims this rank's control block. The caller holds the door.
func (s *segment) register(rank int) error {
	if atomic.LoadUint32(s.u32(hState)) == stateRunning {
		return &InUseError{Path: s.path, Reason: fmt.Sprintf("a job of %d ranks is running on it (pids %v)", s.geo.size, s.pids())}
	}
	if atomic.LoadUint32(s.u32(hStartErr)) != 0 {
		// This job's start-up failed before this rank came: say why.
		if w := atomic.LoadUint64(s.u64(hAbort)); w != 0 {
			return fmt.Errorf("the job's start-up on segment %s failed before rank %d joined; start the job again: %w", s.path, rank, s.abortCause(w))
		}
		return &InUseError{Path: s.path, Reason: "the start-up of the job forming on it has failed; its ranks are leaving"}
	}
	if st := atomic.LoadUint32(s.slotState(rank)); st != slotFree {
		return &InUseError{Path: s.path, Reason: fmt.Sprintf("rank %d is already taken by pid %d", rank, atomic.LoadInt32(s.pid(rank)))}
	}
	if own, lead := pidNamespace(), atomic.LoadUint64(s.u64(hPidNS)); own != 0 && lead != 0 && own != lead {
		// Fail the job's start-up at once, naming this rank (the odd one
		// out may be the segment's creator: the message does not say
		// which): the ranks that joined would otherwise take this one's
		// pid for another process's.
		msg := fmt.Sprintf("rank %d (pid namespace pid:[%d]) and the rank that created segment %s (pid:[%d]) run in different pid namespaces: the ranks of an shm job must share one (one container, or a pod or host pid namespace), or use the tcp backend", rank, own, s.path, lead)
		off := s.ctl(rank)
		n := copy(s.mem[off+cMsg:off+ctlStride], msg)
		atomic.StoreUint32(s.u32(off+cMsgLen), uint32(n))
		atomic.AddUint32(s.u32(hStartErr), 1)
		atomic.CompareAndSwapUint64(s.u64(hAbort), 0, packAbort(rank, rank, causePidNS, opStartup))
		s.startNews()
		return fmt.Errorf("%s: %w", msg, ErrPidNamespace)
	}
	atomic.StoreInt32(s.pid(rank), int32(os.Getpid()))
	atomic.StoreUint32(s.slotState(rank), slotJoined)
	if atomic.AddUint32(s.u32(hJoined), 1) == uint32(s.geo.size) {
		atomic.StoreUint32(s.u32(hState), stateRunning)
		// Only the last join wakes the ranks that wait: waking them at
		// every join made start-up take time and CPU growing with the
		// square of the size (at 512 ranks, longer than 30 s here).
		s.startNews()
	}
	return nil
}

// startNews wakes the ranks that wait for the others to join: it changes
// the word they sleep on (so that a rank about to sleep does not miss it),
// then wakes them.
func (s *segment) startNews() {
	atomic.AddUint32(s.u32(hStartGen), 1)
	futexWake(s.u32(hStartGen), 1<<30)
}

// pidNamespace returns the inode of this process's pid namespace, 0 when
// it cannot be known (no /proc).
func pidNamespace() uint64 {
	var st unix.Stat_t
	if unix.Stat("/proc/self/ns/pid", &st) != nil {
		return 0
	}
	return st.Ino
}

// deadPeer returns a rank other than self that joined and whose process
// has ended, and its pid, or -1. (Without pidfds, before Linux 5.3, a
// process that has ended but is not yet reaped, or whose pid the system
// gave to another process, is not seen: the connect timeout then ends the
// wait.)
//
// It looks at up to looks ranks that joined, from *next on (round the
// ranks), and passes over at most deadPeerScan slots; *next moves on past
// them, so that the next call goes on from there.
func (s *segment) deadPeer(self int, next *int, looks int) (int, int) {
	size := s.geo.size
	for i := 0; i < min(size, deadPeerScan) && looks > 0; i++ {
		r := *next % size
		*next = r + 1
		if r == self || atomic.LoadUint32(s.slotState(r)) != slotJoined {
			continue
		}
		looks--
		pid := int(atomic.LoadInt32(s.pid(r)))
		if pid > 0 && processEnded(pid) && atomic.LoadUint32(s.slotState(r)) == slotJoined {
			return r, pid
		}
	}
	return -1, 0
}

// deadPeerScan bounds the slots one call of deadPeer passes over.
const deadPeerScan = 1024

// processEnded reports whether process pid has ended, reaped or not (a
// zombie has ended too: its parent may not have waited for it yet).
func processEnded(pid int) bool {
	fd, err := unix.PidfdOpen(pid, 0)
	switch {
	case errors.Is(err, unix.ESRCH):
		return true
	case err != nil: // before Linux 5.3: only a reaped process is seen
		return unix.Kill(pid, 0) == unix.ESRCH
	}
	defer unix.Close(fd)
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n > 0 && fds[0].Revents != 0
}

// pids returns the process ids of the ranks that joined.
func (s *segment) pids() []int {
	var out []int
	for r := range s.geo.size {
		if atomic.LoadUint32(s.slotState(r)) != slotFree {
			out = append(out, int(atomic.LoadInt32(s.pid(r))))
		}
	}
	return out
}

// missing returns the ranks that have not joined.
func (s *segment) missing() []int {
	var out []int
	for r := range s.geo.size {
		if atomic.LoadUint32(s.slotState(r)) == slotFree {
			out = append(out, r)
		}
	}
	sort.Ints(out)
	return out
}

func (s *segment) mmap() error {
	mem, err := unix.Mmap(s.fd, 0, s.geo.total, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("mapping the segment's %d bytes: %w", s.geo.total, err)
	}
	s.mem, s.base = mem, unsafe.Pointer(&mem[0])
	return nil
}

func (s *segment) unmap() {
	if s.mem != nil {
		_ = unix.Munmap(s.mem)
		s.mem, s.base = nil, nil
	}
}

// leave gives up this rank's share of the segment and, when no other live
// process shares it any more, removes the file. It does not unmap: the
// caller does once nothing reads the mapping.
func (s *segment) leave() {
	if s.fd < 0 {
		return
	}
	_, _ = setLock(s.fd, lockAlive, unix.F_UNLCK)
	// The last member to leave removes the file. Under the door, so that
	// a rank of a new job that is initialising the same path is not
	// disturbed: it holds the door, and then the file is not ours to
	// remove.
	deadline := time.Now().Add(100 * time.Millisecond)
	if lockUntil(context.Background(), s.fd, lockDoor, unix.F_WRLCK, deadline) == nil {
		if alone, _ := setLock(s.fd, lockAlive, unix.F_WRLCK); alone {
			if sameFile(s.fd, s.path) {
				_ = unix.Unlink(s.path)
				removeRegions(s.path)
			}
			_, _ = setLock(s.fd, lockAlive, unix.F_UNLCK)
		}
		_, _ = setLock(s.fd, lockDoor, unix.F_UNLCK)
	}
	_ = unix.Close(s.fd)
	s.fd = -1
}
