package star

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// scriptConn is a Conn that reads a fixed input and records its output.
type scriptConn struct {
	in  *bytes.Reader
	out bytes.Buffer
}

func (c *scriptConn) Read(p []byte) (int, error)     { return c.in.Read(p) }
func (c *scriptConn) Write(p []byte) (int, error)    { return c.out.Write(p) }
func (*scriptConn) Close() error                     { return nil }
func (*scriptConn) SetDeadline(time.Time) error      { return nil }
func (*scriptConn) SetReadDeadline(time.Time) error  { return nil }
func (*scriptConn) SetWriteDeadline(time.Time) error { return nil }

// The example of docs/authentication.md.
var (
	docToken = Token("starcomm-example-token")
	docNonce = func() []byte {
		n := make([]byte, NonceSize)
		for i := range n {
			n[i] = byte(i)
		}
		return n
	}()
)

const docRank, docSize = 2, 4

// macInput is what AuthMAC keys with the token: the label, the nonce, the
// rank and the size.
func macInput(label string) []byte {
	b := append([]byte(label), docNonce...)
	b = binary.BigEndian.AppendUint32(b, docRank)
	return binary.BigEndian.AppendUint32(b, docSize)
}

// authGolden returns what the code sends in the example of
// docs/authentication.md, by name: the coordinator's side through
// challenge (the nonce fixed), the worker's through answer.
func authGolden(t *testing.T) map[string][]byte {
	t.Helper()
	restore := newNonce
	newNonce = func() []byte { return bytes.Clone(docNonce) }
	defer func() { newNonce = restore }()
	g := map[string][]byte{
		"handshake":           EncodeHandshake(docRank, docSize),
		"control":             EncodeControl(docRank, docSize),
		"ack":                 EncodeAck(docSize),
		"mac-input-handshake": macInput(authLabelHandshake),
		"mac-input-control":   macInput(authLabelControl),
	}
	for _, tc := range []struct {
		name  string
		first byte
	}{{"handshake", TagHandshake}, {"control", TagControl}} {
		// The worker answers the challenge.
		wc := &scriptConn{in: bytes.NewReader(EncodeAuthChallenge(docNonce))}
		require.NoError(t, answer(newLink(0, wc, time.Second), docToken, tc.first, docRank, docSize))
		g["response-"+tc.name] = wc.out.Bytes()
		// The coordinator challenges, and checks the answer.
		cc := &scriptConn{in: bytes.NewReader(wc.out.Bytes())}
		require.Nil(t, challenge(newLink(-1, cc, time.Second), docToken, tc.first, docRank, docSize, 10*time.Second))
		g["challenge"] = cc.out.Bytes()
	}
	// A wrong answer (another token), and the coordinator's Abort.
	wrong := EncodeAuthResponse(AuthMAC(Token("another-token"), TagHandshake, docNonce, docRank, docSize))
	g["response-wrong"] = wrong
	cc := &scriptConn{in: bytes.NewReader(wrong)}
	r := challenge(newLink(-1, cc, time.Second), docToken, TagHandshake, docRank, docSize, 10*time.Second)
	require.NotNil(t, r)
	payload := abortPayload(-1, OpStartup, r.cause, r.reason)
	abort := make([]byte, HeaderSize+len(payload))
	PutHeader(abort, TagAbort, len(payload))
	copy(abort[HeaderSize:], payload)
	g["abort-wrong-answer"] = abort
	return g
}

// goldenBlocks returns every fenced code block of the Markdown file at
// path whose info string is "golden NAME", decoded from hex (white space
// ignored), by name, in their order.
func goldenBlocks(t *testing.T, path string) (names []string, blocks map[string][]byte) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	blocks = map[string][]byte{}
	sc := bufio.NewScanner(f)
	name, in, line := "", false, 0
	var text strings.Builder
	for sc.Scan() {
		line++
		l := sc.Text()
		switch {
		case !in && strings.HasPrefix(l, "```golden "):
			name, in = strings.TrimSpace(strings.TrimPrefix(l, "```golden ")), true
			text.Reset()
			require.NotContains(t, blocks, name, "%s:%d: golden %s twice", path, line, name)
		case in && strings.HasPrefix(l, "```"):
			b, err := hex.DecodeString(strings.Join(strings.Fields(text.String()), ""))
			require.NoError(t, err, "%s: golden %s: not hex", path, name)
			blocks[name] = b
			names = append(names, name)
			in = false
		case in:
			text.WriteString(l + "\n")
		}
	}
	require.NoError(t, sc.Err())
	require.False(t, in, "%s: golden %s not closed", path, name)
	return names, blocks
}

// TestAuthenticationDocGolden: every "golden NAME" block of
// docs/authentication.md equals, byte for byte, what the code sends in the
// document's example (a fixed nonce and token), and every frame of the
// example is there.
func TestAuthenticationDocGolden(t *testing.T) {
	const doc = "../docs/authentication.md"
	want := authGolden(t)
	names, blocks := goldenBlocks(t, doc)
	for _, name := range names {
		w, ok := want[name]
		if !assert.True(t, ok, "%s: golden %s is nothing the test knows", doc, name) {
			continue
		}
		assert.Equal(t, layout(name, w), layout(name, blocks[name]), "%s: golden %s", doc, name)
	}
	for name, w := range want {
		assert.True(t, slices.Contains(names, name), "%s has no golden %s; it is:\n```golden %s\n%s\n```", doc, name, name, layout(name, w))
	}
}

// layout writes golden bytes as the document does: a frame as its LEN
// and TAG on one line, then its payload; AuthMAC's input as the label,
// the nonce, then rank and size; payloads and nonces 16 bytes a line in
// groups of 4.
func layout(name string, b []byte) string {
	var lines []string
	if strings.HasPrefix(name, "mac-input-") {
		label := bytes.IndexByte(b, 0) + 1
		lines = append(lines, hex.EncodeToString(b[:label]))
		lines = append(lines, groups(b[label:label+NonceSize])...)
		lines = append(lines, hex.EncodeToString(b[label+NonceSize:label+NonceSize+4])+" "+hex.EncodeToString(b[label+NonceSize+4:]))
		return strings.Join(lines, "\n")
	}
	lines = append(lines, hex.EncodeToString(b[:4])+" "+hex.EncodeToString(b[4:HeaderSize]))
	lines = append(lines, groups(b[HeaderSize:])...)
	return strings.Join(lines, "\n")
}

// groups writes b 16 bytes a line, in groups of 4.
func groups(b []byte) []string {
	var lines []string
	for len(b) > 0 {
		line := b[:min(16, len(b))]
		b = b[len(line):]
		var g []string
		for len(line) > 0 {
			g = append(g, hex.EncodeToString(line[:min(4, len(line))]))
			line = line[min(4, len(line)):]
		}
		lines = append(lines, strings.Join(g, " "))
	}
	return lines
}

var _ = io.EOF
