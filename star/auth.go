package star

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"
)

// Authentication (see the package documentation): with Config.Token set,
// the coordinator answers the first frame of every connection (Handshake
// or Control) with a challenge, a fresh nonce, and registers the rank, or
// approves the control session, only once the answer proves that the peer
// holds the same token.

// Tags of the authentication frames, this package's extension of the wire.
const (
	// TagAuthChallenge is the coordinator's answer to a connection's
	// first frame (Handshake or Control) when it has a token: the payload
	// is a fresh random nonce of NonceSize bytes.
	TagAuthChallenge byte = 0x0D
	// TagAuthResponse is the worker's answer to the challenge: the payload
	// is AuthMAC of the nonce, its rank and its size (MACSize bytes).
	TagAuthResponse byte = 0x0E
)

// Sizes of the authentication payloads.
const (
	// NonceSize is the size of a challenge's nonce.
	NonceSize = 32
	// MACSize is the size of an answer: an HMAC-SHA256.
	MACSize = sha256.Size
)

// The domain-separation labels that start the input of AuthMAC, one per
// kind of connection, so that an answer for one is no answer for the
// other, nor for anything else keyed with the same token.
const (
	authLabelHandshake = "starcomm-auth/1 handshake\x00"
	authLabelControl   = "starcomm-auth/1 control\x00"
)

// ErrAuthentication is the cause (errors.Is) of a start-up that failed on
// authentication: on a worker whose answer the coordinator refused (its
// token differs), that has no token while the coordinator asks for one,
// or that has one while the coordinator does not ask; and in the Abort
// the coordinator sends such a connection (cause "auth").
var ErrAuthentication = errors.New("star: authentication (token) refused")

// Token is the shared secret of a job (Config.Token). It is printed as
// "[redacted]" whatever the verb (fmt, slog, encoding), so that it never
// appears in a log or a message by accident.
type Token []byte

const redacted = "[redacted]"

// String returns "[redacted]", or "" for an empty token.
func (t Token) String() string {
	if len(t) == 0 {
		return ""
	}
	return redacted
}

// GoString is String: %#v does not show the token either.
func (t Token) GoString() string { return t.String() }

// Format writes String whatever the verb and flags (%x, %q and %v
// included).
func (t Token) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, t.String()) }

// MarshalText returns String, for encoders (encoding/json and slog's
// handlers among them).
func (t Token) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// LogValue returns String, for slog.
func (t Token) LogValue() slog.Value { return slog.StringValue(t.String()) }

// AuthMAC returns the answer to the challenge nonce on a connection whose
// first frame has tag first (TagHandshake or TagControl; any other tag
// gives nil) and says rank and size: HMAC-SHA256 keyed with token over the
// label of that kind of connection, the nonce, then rank and size as u32
// big-endian (see the package documentation).
func AuthMAC(token Token, first byte, nonce []byte, rank, size uint32) []byte {
	var label string
	switch first {
	case TagHandshake:
		label = authLabelHandshake
	case TagControl:
		label = authLabelControl
	default:
		return nil
	}
	m := hmac.New(sha256.New, token)
	m.Write([]byte(label))
	m.Write(nonce)
	var rs [8]byte
	binary.BigEndian.PutUint32(rs[0:4], rank)
	binary.BigEndian.PutUint32(rs[4:8], size)
	m.Write(rs[:])
	return m.Sum(nil)
}

// EncodeAuthChallenge returns the full AuthChallenge frame carrying nonce
// (NonceSize bytes).
func EncodeAuthChallenge(nonce []byte) []byte {
	b := make([]byte, HeaderSize+len(nonce))
	PutHeader(b, TagAuthChallenge, len(nonce))
	copy(b[HeaderSize:], nonce)
	return b
}

// EncodeAuthResponse returns the full AuthResponse frame carrying mac
// (MACSize bytes, from AuthMAC).
func EncodeAuthResponse(mac []byte) []byte {
	b := make([]byte, HeaderSize+len(mac))
	PutHeader(b, TagAuthResponse, len(mac))
	copy(b[HeaderSize:], mac)
	return b
}

// newNonce returns a fresh random nonce. (A variable only so that the
// golden-bytes test can fix it.)
var newNonce = func() []byte {
	nonce := make([]byte, NonceSize)
	_, _ = rand.Read(nonce) // never fails: the runtime crashes instead
	return nonce
}

// authRefusal is why the coordinator refuses a connection that did not
// authenticate, and the cause class of its Abort.
type authRefusal struct {
	reason string
	cause  error
}

// challenge authenticates the peer of l, a connection whose first frame
// (tag first) claimed rank and size: it sends a fresh nonce and checks the
// answer in constant time, all within l.until (the connection's
// HandshakeTimeout). It returns nil when the answer is right. The secret
// never crosses the wire, and a recorded answer is no answer to another
// nonce.
func challenge(l *link, token Token, first byte, rank, size uint32, handshakeTimeout time.Duration) *authRefusal {
	who := fmt.Sprintf("a connection claiming rank %d", rank)
	if first == TagControl {
		who = fmt.Sprintf("a control connection claiming rank %d", rank)
	}
	nonce := newNonce()
	if err := l.writeAll(EncodeAuthChallenge(nonce), nil); err != nil {
		return &authRefusal{fmt.Sprintf("authentication: the challenge could not be sent to %s: %v", who, err), errRefusedRemote}
	}
	var mac [MACSize]byte
	err := l.readFrame(TagAuthResponse, mac[:])
	var ab *AbortError
	var te *tagError
	var le *lengthError
	switch {
	case err == nil:
	case errors.As(err, &ab):
		// What an unauthenticated peer says is not repeated, only its
		// class: a starcomm worker without a token says "auth".
		why := "an Abort"
		if errors.Is(ab, ErrAuthentication) {
			why = "an Abort saying it has no token"
		}
		return &authRefusal{fmt.Sprintf("authentication failed: %s answered the challenge with %s (with a token set, every rank needs it)", who, why), ErrAuthentication}
	case errors.As(err, &te):
		return &authRefusal{fmt.Sprintf("authentication failed: %s answered the challenge with a %s frame (a spec-only peer? with a token set, every rank must be starcomm and have it)", who, TagName(te.got)), ErrAuthentication}
	case errors.As(err, &le) && le.got < 0:
		return &authRefusal{fmt.Sprintf("authentication failed: %s answered the challenge with a frame of LEN 0 (no room for its tag), expected %d bytes", who, MACSize), ErrAuthentication}
	case errors.As(err, &le):
		return &authRefusal{fmt.Sprintf("authentication failed: %s answered the challenge with %d bytes, expected %d", who, le.got, MACSize), ErrAuthentication}
	case isTimeout(err):
		return &authRefusal{fmt.Sprintf("authentication: %s did not answer the challenge within the handshake timeout (%v)", who, handshakeTimeout), errRefusedRemote}
	default:
		return &authRefusal{fmt.Sprintf("authentication: %s failed before answering the challenge: %v", who, err), errRefusedRemote}
	}
	if !hmac.Equal(mac[:], AuthMAC(token, first, nonce, rank, size)) {
		return &authRefusal{fmt.Sprintf("authentication failed: %s gave a wrong answer to the challenge (its token differs from the coordinator's)", who), ErrAuthentication}
	}
	return nil
}

// answer is a worker's side of challenge, on l, whose first frame (tag
// first) said rank and size: it reads the nonce and sends the answer.
func answer(l *link, token Token, first byte, rank, size int) error {
	var nonce [NonceSize]byte
	if err := l.readFrame(TagAuthChallenge, nonce[:]); err != nil {
		return err
	}
	return l.writeAll(EncodeAuthResponse(AuthMAC(token, first, nonce[:], uint32(rank), uint32(size))), nil)
}

// tellCoordinator sends the coordinator an Abort from this worker (rank)
// in start-up, saying why it gives up, and closes l: first reading what
// the coordinator still sends (the rest of a frame whose header was read),
// so that closing does not reset the connection and lose the Abort.
func tellCoordinator(l *link, rank int, reason string, cause error, shutdownTimeout time.Duration) {
	until := time.Now().Add(shutdownTimeout)
	l.resume()
	l.wdirty = false
	l.startDrain(until)
	_ = l.sendFinal(TagAbort, abortPayload(rank, OpStartup, cause, reason), until)
	l.finish()
}
