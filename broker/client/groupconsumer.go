package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

// GroupConsumerOptions configure a GroupConsumer.
type GroupConsumerOptions struct {
	// Stream is the stream consumed.
	Stream string
	// Shards are the shard indexes the member tries to own; nil means
	// every shard the cluster's metadata lists for Stream.
	Shards []uint32
	// Group names the consumer group.
	Group string
	// Member names this member; empty means a random name. Two running
	// members must never share a name: the broker takes a claim by the
	// owner's name for a renewal.
	Member string
	// MaxRecords bounds the records one Poll reads from each shard; zero
	// means 1000.
	MaxRecords uint32
	// Ack, when set, makes the member acknowledge each record instead of
	// committing offsets (wire.FeatureAcks): it configures each shard it
	// claims with these settings, Poll fetches (redeliveries first, with
	// their delivery counts), and Ack and Nak settle records.
	Ack *AckOptions
}

// AckOptions are a group's per-record acknowledgement settings (see
// wire.GroupAckConfigRequest).
type AckOptions struct {
	MaxDeliveries uint32
	AckWait       time.Duration
	MaxInFlight   uint32
}

// GroupBatch is what a Poll read from one owned shard: Records from the
// member's position, and Next, the position after them (commit Next once
// they are processed).
type GroupBatch struct {
	Shard      record.ShardID
	Generation uint64
	Records    []record.Record
	Next       uint64
	// Deliveries is, with GroupConsumerOptions.Ack, each record's
	// delivery count (this one included); Next is then unused.
	Deliveries []uint32
}

// GroupConsumer is one member of a consumer group on a Cluster: each Poll
// claims the shards no live member owns, renews its leases on the shards
// it owns (a heartbeat per owned shard), and reads from each owned shard
// from its committed offset on; Commit records what was processed. A shard
// whose ownership moved to another member (a claim after this member's
// lease ran out) is dropped at the next refusal: its heartbeat or commit
// fails with wire.ErrGroupFenced. Poll at least every third of the lease
// (wire.GroupClaimOK.LeaseMillis) to keep the shards. A GroupConsumer is
// not safe for concurrent use.
type GroupConsumer struct {
	c     *Cluster
	o     GroupConsumerOptions
	owned map[uint32]*ownedShard
}

type ownedShard struct {
	generation uint64
	pos        uint64 // next offset to read
	configured bool   // Ack: the shard was configured at this generation
}

// NewGroupConsumer returns a member of o.Group on c.
func NewGroupConsumer(c *Cluster, o GroupConsumerOptions) (*GroupConsumer, error) {
	if o.Group == "" || o.Stream == "" {
		return nil, errors.New("client: a group consumer needs a stream and a group")
	}
	if o.Member == "" {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, err
		}
		o.Member = "member-" + hex.EncodeToString(b[:])
	}
	if o.MaxRecords == 0 {
		o.MaxRecords = 1000
	}
	return &GroupConsumer{c: c, o: o, owned: map[uint32]*ownedShard{}}, nil
}

// Member is the member's name.
func (g *GroupConsumer) Member() string { return g.o.Member }

// Owned returns the shards the member owns as far as it knows, with their
// generations.
func (g *GroupConsumer) Owned() map[uint32]uint64 {
	out := make(map[uint32]uint64, len(g.owned))
	for s, o := range g.owned {
		out[s] = o.generation
	}
	return out
}

func (g *GroupConsumer) shards(ctx context.Context) ([]uint32, error) {
	if g.o.Shards != nil {
		return g.o.Shards, nil
	}
	m, err := g.c.Metadata(ctx, g.o.Stream)
	if err != nil {
		return nil, err
	}
	var out []uint32
	for _, s := range m.Shards {
		if s.Shard.Stream == g.o.Stream {
			out = append(out, s.Shard.Shard)
		}
	}
	return out, nil
}

// Poll claims free shards, renews the owned ones and reads from each. A
// refusal of a claim or heartbeat (wire.ErrGroupFenced) only changes what
// the member owns; other errors are returned (after the batches read).
func (g *GroupConsumer) Poll(ctx context.Context) ([]GroupBatch, error) {
	shards, err := g.shards(ctx)
	if err != nil {
		return nil, err
	}
	var (
		out  []GroupBatch
		errs []error
	)
	for _, idx := range shards {
		shard := record.ShardID{Stream: g.o.Stream, Shard: idx}
		o := g.owned[idx]
		if o != nil {
			if _, err := g.c.GroupHeartbeat(ctx, shard, g.o.Group, g.o.Member, o.generation); err != nil {
				if errors.Is(err, wire.ErrGroupFenced) {
					delete(g.owned, idx)
					continue
				}
				errs = append(errs, err)
				continue
			}
		} else {
			ok, err := g.c.GroupClaim(ctx, shard, g.o.Group, g.o.Member)
			if err != nil {
				if !errors.Is(err, wire.ErrGroupFenced) {
					errs = append(errs, err)
				}
				continue
			}
			o = &ownedShard{generation: ok.Generation, pos: ok.Committed}
			g.owned[idx] = o
		}
		if g.o.Ack != nil {
			b, err := g.fetch(ctx, shard, o)
			if errors.Is(err, wire.ErrGroupFenced) {
				delete(g.owned, idx)
				continue
			}
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if len(b.Records) > 0 {
				out = append(out, b)
			}
			continue
		}
		res, err := g.c.Read(ctx, wire.ReadRequest{Shard: shard, From: wire.FromOffset, Offset: o.pos, MaxRecords: g.o.MaxRecords})
		var tooOld *wire.Error
		if errors.As(err, &tooOld) && tooOld.Code == wire.CodeCursorTooOld && tooOld.Floor > o.pos {
			// The records below the floor are trimmed: resume at it.
			o.pos = tooOld.Floor
			res, err = g.c.Read(ctx, wire.ReadRequest{Shard: shard, From: wire.FromOffset, Offset: o.pos, MaxRecords: g.o.MaxRecords})
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("read %s from %d: %w", shard, o.pos, err))
			continue
		}
		if len(res.Records) > 0 {
			out = append(out, GroupBatch{Shard: shard, Generation: o.generation, Records: res.Records, Next: res.Next})
		}
		o.pos = res.Next
	}
	return out, errors.Join(errs...)
}

// fetch configures an owned shard for per-record acknowledgement (once
// per generation) and fetches from it. A full window (wire.ErrGroupLimit)
// is an empty batch: the member acknowledges first.
func (g *GroupConsumer) fetch(ctx context.Context, shard record.ShardID, o *ownedShard) (GroupBatch, error) {
	if !o.configured {
		a := g.o.Ack
		if _, err := g.c.GroupAckConfig(ctx, wire.GroupAckConfigRequest{Shard: shard, Group: g.o.Group, Member: g.o.Member, Generation: o.generation,
			MaxDeliveries: a.MaxDeliveries, AckWaitMillis: uint32(a.AckWait / time.Millisecond), MaxInFlight: a.MaxInFlight}); err != nil {
			return GroupBatch{}, err
		}
		o.configured = true
	}
	f, err := g.c.GroupFetch(ctx, wire.GroupFetchRequest{Shard: shard, Group: g.o.Group, Member: g.o.Member, Generation: o.generation, MaxRecords: g.o.MaxRecords})
	if errors.Is(err, wire.ErrGroupLimit) {
		return GroupBatch{Shard: shard, Generation: o.generation}, nil
	}
	if err != nil {
		return GroupBatch{}, err
	}
	b := GroupBatch{Shard: shard, Generation: o.generation, Next: f.Committed}
	for _, d := range f.Deliveries {
		b.Records = append(b.Records, d.Record)
		b.Deliveries = append(b.Deliveries, d.Deliveries)
	}
	return b, nil
}

// Ack acknowledges offsets of shard (with GroupConsumerOptions.Ack): they
// are processed. A member that lost the shard gets an error matching
// wire.ErrGroupFenced and drops the shard; the new owner gets the records
// it did not acknowledge.
func (g *GroupConsumer) Ack(ctx context.Context, shard record.ShardID, offsets ...uint64) error {
	return g.settle(ctx, shard, offsets, false)
}

// Nak asks for offsets of shard to be delivered again at the next Poll
// (with GroupConsumerOptions.Ack).
func (g *GroupConsumer) Nak(ctx context.Context, shard record.ShardID, offsets ...uint64) error {
	return g.settle(ctx, shard, offsets, true)
}

func (g *GroupConsumer) settle(ctx context.Context, shard record.ShardID, offsets []uint64, nak bool) error {
	o := g.owned[shard.Shard]
	if o == nil || shard.Stream != g.o.Stream {
		return fmt.Errorf("client: member %s does not own %s: %w", g.o.Member, shard, wire.ErrGroupFenced)
	}
	var err error
	if nak {
		_, err = g.c.GroupNak(ctx, shard, g.o.Group, g.o.Member, o.generation, offsets)
	} else {
		_, err = g.c.GroupAck(ctx, shard, g.o.Group, g.o.Member, o.generation, offsets)
	}
	if errors.Is(err, wire.ErrGroupFenced) {
		delete(g.owned, shard.Shard)
	}
	return err
}

// Commit records next as the group's committed offset on shard. A member
// that lost the shard gets an error matching wire.ErrGroupFenced and drops
// the shard; the records it read since its last commit will be read again
// by the new owner.
func (g *GroupConsumer) Commit(ctx context.Context, shard record.ShardID, next uint64) error {
	o := g.owned[shard.Shard]
	if o == nil || shard.Stream != g.o.Stream {
		return fmt.Errorf("client: member %s does not own %s: %w", g.o.Member, shard, wire.ErrGroupFenced)
	}
	_, err := g.c.GroupCommit(ctx, shard, g.o.Group, g.o.Member, o.generation, next)
	if errors.Is(err, wire.ErrGroupFenced) {
		delete(g.owned, shard.Shard)
	}
	return err
}

// Close releases every owned shard, so other members may claim them at
// once rather than after the lease.
func (g *GroupConsumer) Close(ctx context.Context) error {
	var errs []error
	for idx, o := range g.owned {
		shard := record.ShardID{Stream: g.o.Stream, Shard: idx}
		if _, err := g.c.GroupLeave(ctx, shard, g.o.Group, g.o.Member, o.generation); err != nil && !errors.Is(err, wire.ErrGroupFenced) {
			errs = append(errs, err)
		}
		delete(g.owned, idx)
	}
	return errors.Join(errs...)
}
