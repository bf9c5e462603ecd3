// Package record holds the vocabulary shared by the log store, the wire
// protocol and replication: what a record is, how a shard log is named, and
// the typed errors of the log contract ([TR-1], [TR-3], [TR-4]).
//
// It owns no behaviour beyond small value helpers, so every other broker
// package may import it without creating a cycle.
package record

import "fmt"

// Kind says what a record is for. Readers are served only KindData; every
// other kind is bookkeeping that readers skip ([TR-2]: "Readers skip trim
// records").
type Kind uint8

const (
	// KindData is a record a client appended.
	KindData Kind = 1
	// KindTrim is a head trim: it carries the caller's headers and the floor
	// it asks for ([TR-2]).
	KindTrim Kind = 2
	// KindFence is written by a newly promoted leader at its new epoch
	// before it serves (replication's fence).
	KindFence Kind = 3
)

// String returns the kind's name.
func (k Kind) String() string {
	switch k {
	case KindData:
		return "data"
	case KindTrim:
		return "trim"
	case KindFence:
		return "fence"
	default:
		return fmt.Sprintf("kind(%d)", uint8(k))
	}
}

// Bookkeeping reports whether readers skip records of this kind.
func (k Kind) Bookkeeping() bool { return k != KindData }

// Header is one key/value pair carried by a record. Order is preserved.
type Header struct {
	Key   string
	Value []byte
}

// Record is one entry of a shard log.
//
// Offset is assigned by the log on append (dense from the shard's base);
// Epoch is the leader epoch the record was written in; Timestamp is Unix
// nanoseconds set by the appending broker. For KindTrim, Floor is the floor
// the trim asks for and satisfies Floor <= Offset.
type Record struct {
	Offset    uint64
	Epoch     uint64
	Timestamp int64
	Kind      Kind
	Floor     uint64
	Headers   []Header
	Payload   []byte
}

// LogKind names one of the four logs every shard keeps ([RP-1]).
type LogKind uint8

const (
	// LogData holds the records clients append and read.
	LogData LogKind = 0
	// LogGroup holds consumer-group state.
	LogGroup LogKind = 1
	// LogDeadLetter holds records consumers gave up on.
	LogDeadLetter LogKind = 2
	// LogCounter holds counters.
	LogCounter LogKind = 3
)

// LogKinds lists every log of a shard, in a fixed order.
var LogKinds = [...]LogKind{LogData, LogGroup, LogDeadLetter, LogCounter}

// String returns the log's name.
func (l LogKind) String() string {
	switch l {
	case LogData:
		return "data"
	case LogGroup:
		return "group"
	case LogDeadLetter:
		return "dead-letter"
	case LogCounter:
		return "counter"
	default:
		return fmt.Sprintf("log(%d)", uint8(l))
	}
}

// ShardID names a shard of a stream.
type ShardID struct {
	Stream string
	Shard  uint32
}

// String returns "stream/shard".
func (s ShardID) String() string { return fmt.Sprintf("%s/%d", s.Stream, s.Shard) }

// LogID names one log of one shard.
type LogID struct {
	ShardID
	Log LogKind
}

// String returns "stream/shard/log".
func (l LogID) String() string { return fmt.Sprintf("%s/%s", l.ShardID, l.Log) }
