//go:build !unix

package tcp

// ReadNow implements transport.Poller where non-blocking reads are not
// implemented: it reports that nothing has arrived, so a poller falls back
// to Read once its polling time is up.
func (c *Conn) ReadNow(p []byte) (int, error) { return 0, nil }

// WriteNow implements transport.Poller where non-blocking writes are not
// implemented: it writes nothing, so a poller falls back to Write.
func (c *Conn) WriteNow(p []byte) (int, error) { return 0, nil }

// CanPoll reports whether ReadNow and WriteNow really poll the socket on
// this system. Where they do not (outside Unix), they report that nothing
// has arrived and nothing went, and a poller should not poll at all.
const CanPoll = false
