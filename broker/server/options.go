package server

import (
	"crypto/tls"
	"time"

	"github.com/go-logr/logr"

	"felix.dev/felix/broker/auth"
	"felix.dev/felix/broker/counter"
	"felix.dev/felix/broker/group"
	"felix.dev/felix/broker/producer"
	"felix.dev/felix/broker/wire"
)

// Role says which half of the protocol a server speaks.
type Role uint8

const (
	// RoleClient (the default) serves client requests (append, read, trim,
	// describe) and refuses every replication frame (0x40..0x4F) with
	// NotAuthorized, counted in
	// felix_broker_replication_frames_refused_total{reason="client_port"}.
	RoleClient Role = iota
	// RolePeer serves the peer port: only the Hello and replication
	// frames, on connections whose principal is a broker (Options.
	// Authenticate must say so); client requests are refused with
	// NotAuthorized, any other principal at its Hello.
	RolePeer
)

// String returns "client" or "peer".
func (r Role) String() string {
	switch r {
	case RoleClient:
		return "client"
	case RolePeer:
		return "peer"
	}
	return "Role(?)"
}

// Defaults for Options fields left zero.
const (
	DefaultMaxBatchRecords  = 4096
	DefaultMaxBatchBytes    = 4 << 20
	DefaultMaxRecordBytes   = 1 << 20
	DefaultMaxInFlightBytes = 64 << 20
	DefaultHandshakeTimeout = 10 * time.Second
	DefaultFrameTimeout     = 30 * time.Second
	DefaultWriteTimeout     = 30 * time.Second
	DefaultMaxReadWait      = 60 * time.Second
	DefaultMaxReadRecords   = 10000
	DefaultMaxConnections   = 1024
	// DefaultIdleTimeout disconnects a client silent for this long.
	DefaultIdleTimeout = 5 * time.Minute
	// DefaultMaxConnectionsPerAddress bounds the connections from one IP.
	DefaultMaxConnectionsPerAddress = 256
	// DefaultMaxFrameMemory bounds the request frames of all connections.
	DefaultMaxFrameMemory = 256 << 20
	// DefaultMaxPeerFrameMemory bounds the replication frames being read.
	DefaultMaxPeerFrameMemory = 64 << 20
	// DefaultFrameMemoryWait is how long a frame waits for the budget.
	DefaultFrameMemoryWait = 5 * time.Second
	// DefaultPeerQueueFrames and DefaultPeerQueueBytes bound the frames
	// waiting to go out on one replication connection.
	DefaultPeerQueueFrames = 4096
	DefaultPeerQueueBytes  = 64 << 20
	// DefaultCertCheckInterval is how often the server compares its clock
	// with the certificate expiry of every authenticated connection.
	DefaultCertCheckInterval = time.Second
)

// maxHelloFrame bounds the first frame of a connection: a Hello is a few
// dozen bytes, and nothing larger is read from a peer not yet identified.
const maxHelloFrame = 4 << 10

// Options configures a Server. Zero values take the defaults above.
type Options struct {
	// Logger receives connection-level events; zero discards them.
	Logger logr.Logger
	// Metrics receives the server's measurements; nil means none.
	Metrics *Metrics
	// TLS, when set, wraps every accepted connection in a TLS server.
	TLS *tls.Config
	// Features are the optional protocol bits this broker offers; zero
	// means wire.KnownFeatures.
	Features wire.Features
	// StorageID is the broker's storage id presented to peers that
	// negotiate wire.FeatureStorageID [RP-2]; nil presents none.
	StorageID []byte
	// Role is the half of the protocol this server speaks: RoleClient
	// (the client port, the default) or RolePeer (the peer port).
	Role Role
	// Replication, when set, receives the replication frames (0x40..0x4F)
	// of a RolePeer server's connections (replication.go); nil refuses
	// them with BadRequest, as a broker without replication always did.
	// A RoleClient server never hands it a frame (NotAuthorized instead)
	// unless InsecurePeersOnClientPort.
	Replication ReplicationHandler
	// InsecurePeersOnClientPort makes a RoleClient server hand replication
	// frames of any connection to Replication, unauthenticated, as brokers
	// did before the peer port existed. It exists only for tests: in-process
	// tests that replicate over plain client connections, and brokers run
	// with `felix broker --insecure-no-tls` (test and development set-ups,
	// never emitted by the operator). No file or wire field may set it, and
	// a production broker must never run with it.
	InsecurePeersOnClientPort bool
	// Authenticate, when set, is called once per connection after its TLS
	// handshake (with the connection's state; nil on a plaintext
	// connection) and returns who the peer is; on a RolePeer server it must
	// be an auth.Broker with a non-empty Name. An error answers the Hello
	// with Unauthenticated (the error's text is the message: it must hold
	// no secret) and closes the connection. Nil: every connection is
	// auth.Anonymous.
	Authenticate func(cs *tls.ConnectionState) (auth.Principal, error)
	// Authorizer is asked before every client request (append, with or
	// without an expected tail: OpAppend; read: OpRead; trim: OpTrim;
	// describe: OpDescribe); a refusal is answered NotAuthorized with
	// nothing done, counted in
	// felix_broker_requests_refused_total{reason="not_authorized"}. If it
	// implements auth.AnonymousGate and refuses anonymous connections, an
	// anonymous connection is answered Unauthenticated at its Hello. Any
	// other request type is not a client operation and is refused as
	// before (BadRequest) without being asked about or served. Nil means
	// auth.AllowAll.
	Authorizer auth.Authorizer
	// Metadata answers Metadata requests and names the leader in a
	// ShardUnknown refusal (wire.FeatureMetadata); nil (a standalone
	// broker) answers Metadata with no brokers and no shards.
	Metadata Metadata
	// Epoch is written on every appended record and trim.
	Epoch uint64

	// MaxFrameSize bounds a frame's length field (wire.DefaultMaxFrameSize).
	MaxFrameSize uint32
	// MaxBatchRecords bounds the records of one append request; it should
	// not exceed the store's own limit.
	MaxBatchRecords int
	// MaxBatchBytes bounds the payload plus header bytes of a merged store
	// append; it should not exceed the store's own limit.
	MaxBatchBytes int
	// MaxRecordBytes bounds one record's payload plus headers.
	MaxRecordBytes int
	// MaxInFlightBytes bounds the request bytes a connection may have
	// accepted but not yet answered; the broker stops reading the
	// connection until answers go out (TCP backpressure). Raised to
	// MaxFrameSize if lower.
	MaxInFlightBytes int64
	// HandshakeTimeout bounds the time from accept to a complete Hello.
	HandshakeTimeout time.Duration
	// FrameTimeout bounds the time from a frame's first byte to its last:
	// a client that sends half a frame and stalls is disconnected.
	FrameTimeout time.Duration
	// IdleTimeout disconnects a client that sends nothing for that long
	// between frames (Error BadRequest "idle timeout", request id 0). Zero
	// means DefaultIdleTimeout; negative: idle connections stay.
	IdleTimeout time.Duration
	// WriteTimeout bounds one write of answers to a connection.
	WriteTimeout time.Duration
	// MaxReadWait caps a read's follow-mode wait.
	MaxReadWait time.Duration
	// MaxReadRecords caps a read's record count.
	MaxReadRecords int
	// MaxConnections bounds the open connections; one more is answered
	// with Unavailable and closed. With MaxInFlightBytes it bounds the
	// memory held by requests.
	MaxConnections int
	// MaxConnectionsPerAddress bounds the open connections from one remote
	// IP address; one more is answered with Unavailable and closed (counted
	// as connections dropped, reason too-many-from-address). Zero means
	// DefaultMaxConnectionsPerAddress; negative: no bound.
	MaxConnectionsPerAddress int
	// MaxFrameMemory bounds the bytes of client request frames all
	// connections together hold, from the frame's first body bytes until
	// its answer is written. A body is charged as it arrives (at most twice
	// what arrived, at least 64 KiB), so a peer that announces a frame and
	// stalls holds only what it sent. A charge that does not fit waits up to
	// FrameMemoryWait; the frame is then read past without being kept and
	// answered with Unavailable. Frames of at most 64 KiB that do not fit
	// take from a separate 8 MiB pool instead, so small requests never wait
	// on large ones. Raised to MaxFrameSize plus the length field if lower.
	// Zero means DefaultMaxFrameMemory.
	MaxFrameMemory int64
	// MaxPeerFrameMemory is the same bound for replication frames (until
	// they are handed on), kept apart so that clients can never stall
	// replication; a replication frame that does not fit is dropped (the
	// replication core sends again). Raised to MaxFrameSize plus the length
	// field if lower. Zero means DefaultMaxPeerFrameMemory.
	MaxPeerFrameMemory int64
	// FrameMemoryWait is how long a frame waits for MaxFrameMemory; zero
	// means DefaultFrameMemoryWait.
	FrameMemoryWait time.Duration
	// PeerQueueFrames and PeerQueueBytes bound the replication frames
	// waiting to be written on one accepted connection (PeerConn.Send);
	// a send that does not fit is dropped and counted, never waited for
	// (the replication core re-sends what is lost). Zero means the
	// defaults above.
	PeerQueueFrames int
	PeerQueueBytes  int64

	// Now is the clock a connection's certificate expiry is compared
	// with (the broker passes pki.Source.Now); nil means time.Now.
	Now func() time.Time
	// CertCheckInterval is how often every connection that presented a
	// certificate is checked against Now: once Now passes the earliest
	// NotAfter of the chain it presented, its next request (and any read
	// waiting in follow mode) is answered Unauthenticated "certificate
	// expired" and the connection is closed. Zero means
	// DefaultCertCheckInterval.
	CertCheckInterval time.Duration
	// OnTLSHandshakeError, when set, is called with the error of every
	// failed TLS handshake (the refusal of a certificate by the TLS
	// configuration's VerifyConnection, a wrong protocol, a timeout), so
	// the caller can count refusals the Hello never sees.
	OnTLSHandshakeError func(err error)

	// Idempotence bounds each shard's table of idempotent producers
	// (broker/producer): producers kept, batches remembered per producer,
	// and the minimum age before a producer may be evicted. Zero fields
	// take producer's defaults.
	Idempotence producer.Limits
	// IdempotenceScanRecords bounds how many records back from its tail
	// a shard's log is read to rebuild that table when this broker starts
	// serving the shard (a new leader); zero means
	// DefaultIdempotenceScanRecords.
	IdempotenceScanRecords int
	// CounterLimits bound each shard's counters (keys, key length,
	// producer marks); zero fields take counter's defaults. An add
	// beyond them is refused with CounterLimit.
	CounterLimits counter.Limits
	// CounterSnapshotEvery: after this many adds to a shard's counters
	// since its last snapshot, the server appends a snapshot to the
	// shard's counter log and trims the log below it. Zero means
	// DefaultCounterSnapshotEvery; negative turns it off.
	CounterSnapshotEvery int
	// GroupLimits bound each shard's consumer groups (groups, name
	// length); zero fields take group's defaults. A claim beyond them is
	// refused with GroupLimit.
	GroupLimits group.Limits
	// GroupLease is how long a group member owns a shard without a
	// heartbeat, claim or commit; zero means DefaultGroupLease.
	GroupLease time.Duration
	// GroupSnapshotEvery: after this many entries of a shard's group log
	// since its last snapshot, the server appends a snapshot and trims the
	// log below it. Zero means DefaultGroupSnapshotEvery; negative turns
	// it off.
	GroupSnapshotEvery int
	// MaxDeadLetters is the most dead-lettered records a shard's
	// dead-letter log holds above its floor; zero means
	// DefaultMaxDeadLetters. A record due to be dead-lettered beyond it
	// stays outstanding (and the leader logs it) until a DeadLetterTrim
	// makes room. It also bounds the redrive intents above the floor that
	// were replaced after losing their conditional append: a redrive that
	// would replace one more is refused with GroupLimit [TR-10].
	MaxDeadLetters int

	// twin switches rules off; only this package's tests set it (the
	// twins that show a rule load-bearing by failing without it).
	twin serverTwin
}

// serverTwin switches a rule off for a twin test. The zero value keeps
// every rule.
type serverTwin struct {
	// unconditionalGroupAppend ([TR-9] off): a group-log entry is
	// appended wherever the log's tail is, not on the tail the leader's
	// fold reached, so a writer whose fold is stale is not refused.
	unconditionalGroupAppend bool
	// unconditionalCounterAppend (the counter log's tail check off): a
	// counter add is appended wherever the log's tail is, its value
	// computed from a fold that may be stale.
	unconditionalCounterAppend bool
	// unboundedRedrive (the redrive's intent bounds off [TR-10]): a
	// redrive writes a new intent after every lost conditional append,
	// however many it wrote in the request and however many replaced
	// intents the shard's dead-letter log holds.
	unboundedRedrive bool
}

func (o Options) withDefaults() Options {
	if o.Logger.GetSink() == nil {
		o.Logger = logr.Discard()
	}
	if o.Features == 0 {
		o.Features = wire.KnownFeatures
	}
	if o.GroupLease <= 0 {
		o.GroupLease = DefaultGroupLease
	}
	if o.GroupSnapshotEvery == 0 {
		o.GroupSnapshotEvery = DefaultGroupSnapshotEvery
	}
	if o.MaxDeadLetters <= 0 {
		o.MaxDeadLetters = DefaultMaxDeadLetters
	}
	if o.CounterSnapshotEvery == 0 {
		o.CounterSnapshotEvery = DefaultCounterSnapshotEvery
	}
	if o.IdempotenceScanRecords <= 0 {
		o.IdempotenceScanRecords = DefaultIdempotenceScanRecords
	}
	if o.Authorizer == nil {
		o.Authorizer = auth.AllowAll{}
	}
	if o.MaxFrameSize == 0 {
		o.MaxFrameSize = wire.DefaultMaxFrameSize
	}
	if o.MaxBatchRecords <= 0 {
		o.MaxBatchRecords = DefaultMaxBatchRecords
	}
	if o.MaxBatchBytes <= 0 {
		o.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if o.MaxRecordBytes <= 0 {
		o.MaxRecordBytes = DefaultMaxRecordBytes
	}
	if o.MaxInFlightBytes <= 0 {
		o.MaxInFlightBytes = DefaultMaxInFlightBytes
	}
	if o.MaxInFlightBytes < int64(o.MaxFrameSize) {
		o.MaxInFlightBytes = int64(o.MaxFrameSize)
	}
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if o.FrameTimeout <= 0 {
		o.FrameTimeout = DefaultFrameTimeout
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.MaxReadWait <= 0 {
		o.MaxReadWait = DefaultMaxReadWait
	}
	if o.MaxReadRecords <= 0 {
		o.MaxReadRecords = DefaultMaxReadRecords
	}
	if o.MaxConnections <= 0 {
		o.MaxConnections = DefaultMaxConnections
	}
	if o.IdleTimeout == 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.MaxConnectionsPerAddress == 0 {
		o.MaxConnectionsPerAddress = DefaultMaxConnectionsPerAddress
	}
	if o.MaxFrameMemory <= 0 {
		o.MaxFrameMemory = DefaultMaxFrameMemory
	}
	if o.MaxFrameMemory < 4+int64(o.MaxFrameSize) {
		o.MaxFrameMemory = 4 + int64(o.MaxFrameSize)
	}
	if o.MaxPeerFrameMemory <= 0 {
		o.MaxPeerFrameMemory = DefaultMaxPeerFrameMemory
	}
	if o.MaxPeerFrameMemory < 4+int64(o.MaxFrameSize) {
		o.MaxPeerFrameMemory = 4 + int64(o.MaxFrameSize)
	}
	if o.FrameMemoryWait <= 0 {
		o.FrameMemoryWait = DefaultFrameMemoryWait
	}
	if o.PeerQueueFrames <= 0 {
		o.PeerQueueFrames = DefaultPeerQueueFrames
	}
	if o.PeerQueueBytes <= 0 {
		o.PeerQueueBytes = DefaultPeerQueueBytes
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.CertCheckInterval <= 0 {
		o.CertCheckInterval = DefaultCertCheckInterval
	}
	return o
}
