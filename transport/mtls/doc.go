// Package mtls is a transport wrapper: TLS 1.3 with mutual authentication
// (crypto/tls) over any inner transport.Listener and transport.Dialer,
// such as transport/tcp's. The star protocol runs over it unchanged;
// starcomm turns it on for the tcp backend when COBRE_TCP_TLS_CERT,
// COBRE_TCP_TLS_KEY and COBRE_TCP_TLS_CA are set.
//
// # Authentication
//
// Both ends show a certificate and accept only a peer whose certificate is
// signed by Config.CA: the Listener (the coordinator) requires and
// verifies every client's certificate, and the Dialer (a worker) verifies
// the coordinator's certificate and that it is valid for the host name or
// IP address dialed (Config.ServerName overrides the name). The
// certificates therefore need:
//
//   - the coordinator's: signed by the CA, valid now, extended key usage
//     serverAuth (or none), and a subject alternative name for every name
//     or address workers dial (COBRE_TCP_COORDINATOR);
//   - a worker's: signed by the CA, valid now, extended key usage
//     clientAuth (or none).
//
// NewListener and NewDialer check this end's own certificate against
// these rules before any connection, so that a misconfigured rank fails
// at start-up naming the reason. Only TLS 1.3 is spoken, without session
// resumption. Load reads the PEM files; NewCA and CA.Issue make a CA and
// certificates to try TLS out (cmd/starcert).
//
// # Errors
//
// A failed handshake is a *HandshakeError whose message says what to
// check (the CA, the name, the dates, a peer that does not speak TLS); a
// refusal the peer sent as a TLS alert is a *PeerRefusedError. In TLS 1.3
// the server checks the client's certificate after the client's side of
// the handshake is over, so a worker whose certificate the coordinator
// refuses learns it from its first Read. A client that does not speak TLS
// is sent Config.PlaintextReply in the clear (starcomm sends an Abort
// frame saying that the coordinator requires TLS), so that it fails with
// that reason instead of waiting. A server that closes the connection
// during the handshake without an alert (a coordinator ending while the
// next job's workers already dial its port) is dialed again, with
// backoff, until the Dial's context ends.
//
// # Abilities
//
// Accept returns at once and runs the handshake in the background, bounded
// by Config.HandshakeTimeout, so a silent client never holds up other
// clients; the connection's first Read or Write waits for the handshake.
// A Conn keeps the transport contract (deadlines, Close, io.EOF) and
// implements transport.BuffersWriter (small buffers gathered into one
// record, large ones encrypted record by record, records handed to the
// inner conn in batches of 256 KiB) and transport.CloseWriter (a
// close_notify alert that does not wait for the peer). Over an inner
// transport.Poller, Dial and Accept return a PollingConn, itself a
// transport.Poller: ReadNow decrypts a record once it has wholly arrived,
// and WriteNow seals at most one record and finishes writing it in the
// background if the inner conn takes it only in part.
package mtls
