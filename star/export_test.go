package star

import (
	"time"

	"github.com/starcomm/starcomm/comm"
)

// SetTestHook sets the package's test hook (see hooks.go) for the tests
// of package star_test, and returns a function that removes it. Set it
// before any communicator starts.
func SetTestHook(h func(rank int, point string)) (restore func()) {
	testHook.Store(&h)
	return func() { testHook.Store(nil) }
}

// SetSpliceOff keeps the links built while it is set from splicing frame
// headers (the staged writes and leads of systems without splice(2) are
// then used over TCP), and returns a function that restores the default.
// Set it before building communicators; not for parallel tests.
func SetSpliceOff() (restore func()) {
	spliceOff.Store(true)
	return func() { spliceOff.Store(false) }
}

// HookRegistered is the hook point at which the coordinator registers a
// worker's valid Handshake; the hook's rank is the worker's.
const HookRegistered = hookRegistered

// HookBeat is the hook point at which a control session is about to send
// a heartbeat.
const HookBeat = hookBeat

// HookHeartbeat is the hook point at which a control session is about to
// read its peer's heartbeats; the hook's rank is the peer's.
const HookHeartbeat = hookHeartbeat

// HookAllSilent is the hook point at which the coordinator found every
// worker silent, before it waits a heartbeat interval to be sure.
const HookAllSilent = hookAllSilent

// HookRelay is the hook point at which the coordinator begins a relayed
// allgatherv.
const HookRelay = hookRelay

// HookWords is the hook point at which a relay's writer whose worker is
// gone waits for the link's reader before it reads the worker's last words.
const HookWords = hookWords

// HookBegin is the hook point at which a collective is running, before
// its first I/O.
const HookBegin = hookBegin

// AbortPayload is abortPayload: the payload of an Abort frame blaming rank
// for a failure of op, with reason for people and cause classified.
var AbortPayload = abortPayload

// Fingerprint returns the fingerprint of collective seq as the desync check
// sends it (kind 2 on the control session's message stream).
func Fingerprint(seq uint64, op string, dt comm.DType, n int, counts []int, root int, rop comm.ReduceOp) []byte {
	cl := &call{op: op, dt: dt, n: n, counts: counts, root: root, rop: rop}
	return cl.fingerprint(nil, seq)
}

// HookSessionSetUp is the hook point at which the coordinator has answered
// a worker's Control frame and is about to attach its session.
const HookSessionSetUp = hookSessionSetUp

// HookAwaitSession is the hook point at which the desync check starts to
// wait for a worker's control session.
const HookAwaitSession = hookAwaitSession

// HookEnd is the hook point at which a collective's I/O is over, before
// it settles or fails.
const HookEnd = hookEnd

// HookClosing is the hook point at which Close has marked the communicator
// closed.
const HookClosing = hookClosing

// LinkCancelCauses returns the cause each of c's links was cancelled with
// (nil: not cancelled).
func LinkCancelCauses(c *Comm) []error {
	var out []error
	for _, l := range c.role.links() {
		out = append(out, l.cancelled())
	}
	return out
}

// Pending returns the failure found between collectives that c's next
// collective will report (nil: none).
func Pending(c *Comm) error {
	c.stateMu.Lock()
	defer c.stateMu.Unlock()
	return c.pending
}

// SetScratchKeep sets the most allreduce scratch rank 0 keeps between
// collectives, and returns a function that restores it. Not for parallel
// tests.
func SetScratchKeep(n int) (restore func()) {
	old := scratchKeep
	scratchKeep = n
	return func() { scratchKeep = old }
}

// HookStream is the hook point at which the coordinator begins to reduce
// a streamed allreduce.
const HookStream = hookStream

// HookReply is the hook point at which a streamed allreduce's replies
// begin, overlapping the reduction.
const HookReply = hookReply

// HookHere is the hook point at which a worker moved its deadlines on
// rank 0's word that it is here (on the control session's reader).
const HookHere = hookHere

// HookBusy is the hook point at which a worker moved its deadlines on
// rank 0's word that it is still in an earlier collective.
const HookBusy = hookBusy

// HookSlowWrite is the hook point at which a write whose deadline passed
// while the peer's host kept acknowledging went on (the rank is the
// peer's).
const HookSlowWrite = hookSlowWrite

// HookMoving is the hook point at which a read whose deadline passed while
// the link still moved bytes read on (the rank is the peer's).
const HookMoving = hookMoving

// HookDuplex is the hook point at which a worker begins to write its frame
// while it reads the reply.
const HookDuplex = hookDuplex

// SetDuplexMin sets the least frame a worker writes while it reads the
// reply, and returns a function that restores it. Not for parallel tests.
func SetDuplexMin(n int) (restore func()) {
	old := duplexMin
	duplexMin = n
	return func() { duplexMin = old }
}

// SetStream sets the least ·n of a streamed allreduce and its chunk
// size (0: the default), and returns a function that restores both. Not
// for parallel tests.
func SetStream(least, chunk int) (restore func()) {
	oldMin, oldChunk := streamMin, streamChunkFixed
	streamMin, streamChunkFixed = least, chunk
	return func() { streamMin, streamChunkFixed = oldMin, oldChunk }
}

// StreamChunkSize is the chunk of a streamed allreduce with workers links.
func StreamChunkSize(workers int) int { return streamChunkSize(workers) }

// ScratchBytes returns the allreduce scratch rank 0's c keeps.
func ScratchBytes(c *Comm) int { return 8 * cap(c.role.(*coordinator).scratch) }

// ControlWait is how long after start-up a worker of three ranks or more
// opens its control session when no frame from rank 0 came first.
func ControlWait() time.Duration { return controlWait }

// SpinNow is how long c polls for a small frame in its next polled wait
// (see Comm.waited). Call it between collectives.
func SpinNow(c comm.Communicator) time.Duration { return c.(*Comm).spin(0) }

// SetRelayOnHost makes the coordinators built while it is set relay the
// large allgathervs of workers on this host too (they are stored and
// forwarded otherwise; see transport.HostLocal), and returns a function
// that restores the default. Set it before building communicators; not
// for parallel tests.
func SetRelayOnHost() (restore func()) {
	relayOnHost.Store(true)
	return func() { relayOnHost.Store(false) }
}
