// Package client is the Go client of the Felix wire protocol.
//
// One Client holds one connection and pipelines: any number of goroutines
// may call it at once, each request is written as soon as it is made and
// answers are matched by request id, so many requests are in flight on the
// one connection. Every call honours its context's deadline. A request
// made while nothing else is in flight (a synchronous caller) is written
// on the caller's goroutine; others go through the connection's writer
// goroutine, which gathers those made together into one write. Requests
// made one after another by one goroutine are written in that order.
//
// The client never retries. In particular a conditional append or trim whose
// answer was lost (deadline, broken connection) fails with an error matching
// ErrUnknownOutcome: it may or may not have landed, and sending it again
// blindly could land it twice or, worse, make a stale writer adopt a tail it
// never read. Re-read from your own cursor and decide [FD-1] [FD-2].
// Nor does it redial: once the broker closes the connection (for instance
// after its idle timeout) every call fails with an error matching
// ErrClosed; a conditional write that fails so without matching
// ErrUnknownOutcome was never sent and may be sent on a new connection.
//
// Errors from the broker are *wire.Error values; errors.Is matches the
// record package's sentinels (record.ErrOffsetMismatch,
// record.ErrCursorTooOld, ...), and (*wire.Error).RecordError converts to
// the typed record errors. A refusal on grounds of identity (wire
// NotAuthorized, Unauthenticated) comes as an *AuthError wrapping the
// *wire.Error, matched by ErrNotAuthorized and ErrUnauthenticated; a failed
// TLS handshake in Dial is a *HandshakeError. TLSFromDir and TLSFromFiles
// build the Options.TLS of a client holding a FelixUser's certificate: the
// broker is verified by its felix:// identity, not by the address dialed.
package client
