package star

import "sync/atomic"

// The points of a collective where one goroutine hands work or a link to
// another, or the communicator changes state. Tests set testHook to act
// there (for example, to call Close from another goroutine at every one of
// them); in production it is nil and costs a load and a comparison.
const (
	hookBegin   = "begin"   // the collective is running, before its first I/O
	hookPoll    = "poll"    // before polling links from the collective's goroutine
	hookHandoff = "handoff" // before a request goes to a link's goroutine
	hookServed  = "served"  // a link's goroutine finished a request, before it reports
	hookResult  = "result"  // the collective's goroutine took a link's result
	hookPosted  = "posted"  // a small frame was posted to one link without waiting
	hookSent    = "sent"    // a worker's frame went out
	hookEnd     = "end"     // the collective's I/O is over, before it settles or fails
	hookRelay   = "relay"   // the coordinator begins a relayed allgatherv
	hookStream  = "stream"  // the coordinator begins to reduce a streamed allreduce
	hookReply   = "reply"   // a streamed allreduce's replies begin, overlapping the reduction
	hookDuplex  = "duplex"  // a worker writes its frame while it reads the reply
	hookHere    = "here"    // a worker moved its deadlines on rank 0's word that it is here
	hookBusy    = "busy"    // a worker moved its deadlines on rank 0's word that it is still in an earlier collective
	hookWords   = "words"   // a relay's writer whose worker is gone waits for the link's reader, then reads its last words
	hookFailing = "failing" // a failure was recorded, before the Aborts go out
	hookOOB     = "oob"     // the coordinator is about to send an Abort over a control session
	hookClosing = "closing" // Close marked the communicator closed and cancelled a running collective

	// hookRegistered: the coordinator registered a worker's Handshake (the
	// hook's rank is the worker's).
	hookRegistered = "registered"
	// hookBeat: a control session is about to send a heartbeat.
	hookBeat = "beat"
	// hookHeartbeat: a control session is about to read its peer's
	// heartbeats (the hook's rank is the peer's).
	hookHeartbeat = "heartbeat"
	// hookAllSilent: the coordinator found every worker silent when one
	// of them reached the liveness timeout, and gives the others a
	// heartbeat interval to be heard before it names itself.
	hookAllSilent = "all-silent"
	// hookSessionSetUp: the coordinator has answered a worker's Control
	// frame and is about to attach its session (the hook's rank is the
	// worker's).
	hookSessionSetUp = "session-set-up"
	// hookAbsent: a link whose deadline passed in the middle of this
	// process's absence, with nothing from its peer to show, gives the
	// peer a fresh timeout (the hook's rank is the peer's; see
	// link.late).
	hookAbsent = "absent"
	// hookSlowWrite: a write whose deadline passed while the peer's host
	// kept acknowledging with its window open goes on under a fresh
	// deadline (the hook's rank is the peer's; see link.slowWrite).
	hookSlowWrite = "slow-write"
	// hookMoving: a read whose deadline passed while the link still
	// moved bytes reads on (the hook's rank is the peer's; see
	// link.moving).
	hookMoving = "moving"
	// hookAwaitSession: the desync check waits for a worker's control
	// session, not attached yet (the hook's rank is the worker's).
	hookAwaitSession = "await-session"
)

// testHook, when set (by tests only), is called at every hook point with
// the communicator's rank. It is read atomically: a test may remove it
// while a communicator's goroutines still run.
var testHook atomic.Pointer[func(rank int, point string)]

// callHook calls testHook, if set.
func callHook(rank int, point string) {
	if h := testHook.Load(); h != nil {
		(*h)(rank, point)
	}
}

// hook calls testHook with this communicator's rank.
func (c *Comm) hook(point string) { callHook(c.rank, point) }
