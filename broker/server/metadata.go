package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"felix.dev/felix/broker/auth"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

// Metadata is what a broker knows of its cluster, for the Metadata request
// and for the leader hint of a ShardUnknown refusal (wire.FeatureMetadata).
// Implementations answer from state they already hold (a watch), quickly,
// and are safe for concurrent use.
type Metadata interface {
	// Brokers returns the cluster's brokers and the address clients reach
	// each on.
	Brokers(ctx context.Context) ([]wire.BrokerInfo, error)
	// Shards returns the shards of the named streams, or of every stream
	// of the cluster when streams is empty, ordered by stream and shard.
	// A stream it does not know has no entry.
	Shards(ctx context.Context, streams []string) ([]wire.ShardInfo, error)
}

// hintTimeout bounds the metadata lookup behind a ShardUnknown's hint.
const hintTimeout = 2 * time.Second

// hintingShards adds the leader hint to ShardUnknown refusals from shards.
type hintingShards struct {
	Shards
	meta Metadata
}

// DataLog refuses a shard this broker holds no replica of with a
// ShardUnknown that names the shard's leader (its client address and
// epoch) when the cluster's metadata knows one; the hint is sent only to
// connections that negotiated wire.FeatureMetadata.
func (h hintingShards) DataLog(shard record.ShardID) (Log, error) {
	l, err := h.Shards.DataLog(shard)
	if err == nil || !errors.Is(err, record.ErrShardUnknown) {
		return l, err
	}
	var we *wire.Error
	if errors.As(err, &we) && we.Leader != "" {
		return nil, err
	}
	out := &wire.Error{Code: wire.CodeShardUnknown, Message: err.Error()}
	ctx, cancel := context.WithTimeout(context.Background(), hintTimeout)
	defer cancel()
	if m, merr := lookupMetadata(ctx, h.meta, []string{shard.Stream}); merr == nil {
		if addr, epoch, ok := m.LeaderAddress(shard); ok {
			out.Leader, out.Epoch = addr, epoch
			out.Message = fmt.Sprintf("%s; leader is at %s", err, addr)
		}
	}
	return nil, out
}

// CounterLog serves the counter log of the underlying Shards, refusing a
// shard this broker holds no replica of as DataLog does: a shard's logs
// share their replicas and their leader, so the hint is the same.
func (h hintingShards) CounterLog(shard record.ShardID) (Log, error) {
	cl, ok := h.Shards.(CounterShards)
	if !ok {
		return nil, &wire.Error{Code: wire.CodeUnavailable, Message: "this broker serves no counter logs"}
	}
	l, err := cl.CounterLog(shard)
	if err == nil || !errors.Is(err, record.ErrShardUnknown) {
		return l, err
	}
	if _, derr := h.DataLog(shard); derr != nil {
		return nil, derr
	}
	return nil, err
}

// GroupLog serves the group log of the underlying Shards, refusing a shard
// this broker holds no replica of as DataLog does.
func (h hintingShards) GroupLog(shard record.ShardID) (Log, error) {
	gl, ok := h.Shards.(GroupShards)
	if !ok {
		return nil, &wire.Error{Code: wire.CodeUnavailable, Message: "this broker serves no group logs"}
	}
	l, err := gl.GroupLog(shard)
	if err == nil || !errors.Is(err, record.ErrShardUnknown) {
		return l, err
	}
	if _, derr := h.DataLog(shard); derr != nil {
		return nil, derr
	}
	return nil, err
}

// DeadLetterLog serves the dead-letter log of the underlying Shards,
// refusing a shard this broker holds no replica of as DataLog does.
func (h hintingShards) DeadLetterLog(shard record.ShardID) (Log, error) {
	dl, ok := h.Shards.(DeadLetterShards)
	if !ok {
		return nil, &wire.Error{Code: wire.CodeUnavailable, Message: "this broker serves no dead-letter logs"}
	}
	l, err := dl.DeadLetterLog(shard)
	if err == nil || !errors.Is(err, record.ErrShardUnknown) {
		return l, err
	}
	if _, derr := h.DataLog(shard); derr != nil {
		return nil, derr
	}
	return nil, err
}

func lookupMetadata(ctx context.Context, meta Metadata, streams []string) (wire.MetadataOK, error) {
	bs, err := meta.Brokers(ctx)
	if err != nil {
		return wire.MetadataOK{}, err
	}
	ss, err := meta.Shards(ctx, streams)
	if err != nil {
		return wire.MetadataOK{}, err
	}
	return wire.MetadataOK{Brokers: bs, Shards: ss}, nil
}

// handleMetadata answers a Metadata request. Every stream it names needs
// Describe (a refusal refuses the whole request, NotAuthorized); a request
// that names none lists the streams the principal may Describe and leaves
// out the others without counting them as refusals. A broker without
// Options.Metadata (standalone) answers with no brokers and no shards:
// clients send it every request.
func (c *conn) handleMetadata(reqID uint32, req wire.MetadataRequest, start time.Time, held charge) {
	var out wire.MetadataOK
	if meta := c.s.opts.Metadata; meta != nil {
		ctx, cancel := context.WithTimeout(c.waitCtx, c.s.opts.FrameTimeout)
		defer cancel()
		m, err := lookupMetadata(ctx, meta, req.Streams)
		if err != nil {
			c.fail(reqID, "metadata", start, held, &wire.Error{Code: wire.CodeUnavailable, Message: "metadata: " + err.Error()})
			return
		}
		out.Brokers = m.Brokers
		if len(req.Streams) > 0 {
			out.Shards = m.Shards
		} else {
			allowed := map[string]bool{}
			for _, s := range m.Shards {
				ok, seen := allowed[s.Shard.Stream]
				if !seen {
					ok = c.s.opts.Authorizer.Authorize(c.principal, auth.OpDescribe, s.Shard.Stream) == nil
					allowed[s.Shard.Stream] = ok
				}
				if ok {
					out.Shards = append(out.Shards, s)
				}
			}
		}
	}
	body, err := wire.EncodeMetadataOK(out)
	if err != nil {
		c.fail(reqID, "metadata", start, held, err)
		return
	}
	c.ok(wire.MsgMetadataOK, reqID, "metadata", start, held, body)
}
