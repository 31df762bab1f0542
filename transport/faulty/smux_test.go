package faulty_test

import (
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/xtaci/smux"

	"github.com/starcomm/starcomm/testkit"
	"github.com/starcomm/starcomm/transport"
	"github.com/starcomm/starcomm/transport/faulty"
	"github.com/starcomm/starcomm/transport/pipe"
)

// TestControlSmux runs real smux sessions over faulty control conns, on the
// real clock: smux pools channels across sessions, which must not cross
// testing/synctest bubbles, so no other test here uses it. A session works
// over a control conn after its first frames (its heartbeats keep it open
// for many keep-alive timeouts, its streams carry data); a Hang on the
// control conn ends both sessions by their keep-alive timeout, a Crash
// gives the peer's session EOF; the data conn goes on.
func TestControlSmux(t *testing.T) {
	cfg := smux.DefaultConfig()
	cfg.KeepAliveInterval = 20 * time.Millisecond
	cfg.KeepAliveTimeout = 200 * time.Millisecond
	for _, kind := range []faulty.Kind{faulty.Hang, faulty.Crash} {
		t.Run("fault="+kind.String(), func(t *testing.T) {
			testkit.CheckGoroutines(t)
			s := faulty.NewScript(
				faulty.Fault{Kind: kind, Rank: 1, Manual: true, Control: true},
				// Placed where a session's bytes would be frames, were
				// they tracked: none fires.
				faulty.Fault{Kind: faulty.Crash, Rank: 0, Link: 1, Dir: faulty.Read, Frame: 3, Control: true},
				faulty.Fault{Kind: faulty.CorruptTag, Rank: 1, Dir: faulty.Read, Frame: 1, Control: true},
				faulty.Fault{Kind: faulty.LenTooLarge, Rank: 0, Link: -1, Dir: faulty.Write, Frame: 2, Control: true},
			)
			n := pipe.NewNetwork()
			n.Buffer = 64 << 10
			pl, err := n.Listen(coordAddr)
			require.NoError(t, err)
			l := s.WrapListener(pl)
			defer l.Close()
			d := s.WrapDialer(n, 1)
			connect := func() (dialed, accepted transport.Conn) {
				type res struct {
					c   transport.Conn
					err error
				}
				acc := testkit.Async(func() res { c, err := l.Accept(); return res{c, err} })
				c, err := d.Dial(t.Context(), coordAddr)
				require.NoError(t, err)
				a := <-acc
				require.NoError(t, a.err)
				t.Cleanup(func() { c.Close(); a.c.Close() })
				return c, a.c
			}
			w := &worker{rank: 1}
			w.wCtl, w.cCtl = connect()
			w.wData, w.cData = connect()
			w.firstFrames(t, false)
			w.requireAttributed(t)

			client, err := smux.Client(w.wCtl, cfg)
			require.NoError(t, err)
			defer client.Close()
			server, err := smux.Server(w.cCtl, cfg)
			require.NoError(t, err)
			defer server.Close()
			echoed := testkit.Async(func() error {
				st, err := server.AcceptStream()
				if err != nil {
					return err
				}
				defer st.Close()
				_, err = io.Copy(st, st)
				return err
			})
			st, err := client.OpenStream()
			require.NoError(t, err)
			msg := session(9, 100<<10)
			go func() { _, _ = st.Write(msg) }()
			got := make([]byte, len(msg))
			_, err = io.ReadFull(st, got)
			require.NoError(t, err)
			require.Equal(t, msg, got, "a stream's bytes through the control conns")
			time.Sleep(5 * cfg.KeepAliveTimeout) // heartbeats keep both sessions open
			require.False(t, client.IsClosed(), "client session, heartbeats passing")
			require.False(t, server.IsClosed(), "server session, heartbeats passing")
			require.Zero(t, s.Fired())

			s.Fire(1)
			require.Equal(t, 1, s.Fired())
			if kind == faulty.Hang {
				// No heartbeat passes: each session gives up on its own.
				for _, sess := range []*smux.Session{client, server} {
					select {
					case <-sess.CloseChan():
					case <-time.After(10 * time.Second):
						t.Fatal("a session over a hung control conn is still open")
					}
				}
			} else {
				// The server's session reads EOF: its stream and Accept
				// fail at once.
				select {
				case <-echoed: // the stream ended
					echoed = nil
				case <-time.After(10 * time.Second):
					t.Fatal("the server's stream is still open after the control conn crashed")
				}
				_, err := server.AcceptStream()
				require.ErrorIs(t, err, io.EOF)
			}
			require.Equal(t, 1, s.Fired(), "no fault placed past frame 0 fired")
			requireIntact(t, w.wData, w.cData, "data conn")
			client.Close()
			server.Close()
			if echoed != nil {
				<-echoed
			}
		})
	}
}
