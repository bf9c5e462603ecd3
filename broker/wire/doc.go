// Package wire is the Felix broker protocol: the frame codec, the versioned
// handshake with its feature bits, the request and response messages and the
// table of stable numeric error codes. It owns the byte layout and nothing
// else: it performs no I/O beyond reading and writing frames on a stream and
// holds no connection state.
//
// Decoded messages alias the body they were decoded from (payloads and
// header values are sub-slices of it); a caller that reuses a body buffer
// must copy what it keeps.
//
// docs/protocol.md is the normative description; the golden vectors in
// testdata/ pin it byte for byte.
//
// The same frames carry client traffic and, later, replication between
// brokers ([RP-2]): message types 0x40..0x4F are reserved for replication and
// the FeatureStorageID bit lets a broker present its storage id to its peers.
// A peer that offers no feature bit sees exactly the version-1 frames.
package wire
