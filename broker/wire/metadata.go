package wire

import (
	"fmt"
	"math"
)

// Bounds of a Metadata exchange. A decoder refuses counts above them, and
// counts the rest of the body cannot hold, before it allocates.
const (
	// MaxMetadataStreams is the most streams one Metadata request names.
	MaxMetadataStreams = 1024
	// MaxMetadataReplicas is the most replicas one shard entry lists.
	MaxMetadataReplicas = 255
	// MaxMetadataNameLen bounds a broker name, a broker address and a
	// leader name in a MetadataOK.
	MaxMetadataNameLen = 1024
)

// MetadataRequest asks a broker what it knows of its cluster
// (FeatureMetadata). Streams names the streams whose shards to list; none
// asks for every stream the connection's principal may Describe.
type MetadataRequest struct {
	Streams []string
}

// BrokerInfo is one broker of the cluster: its name and the HOST:PORT
// clients reach it on (empty when it has registered none).
type BrokerInfo struct {
	Name    string
	Address string
}

// ShardInfo is one shard as the cluster's assignments say: its Leader (a
// broker name, empty before the control plane chose one) at Epoch, and
// its Replicas in the order of the assignment.
type ShardInfo struct {
	Shard    ShardRef
	Leader   string
	Epoch    uint64
	Replicas []string
}

// MetadataOK answers a Metadata request: the cluster's brokers, and the
// shards of the streams asked for (a stream without shards, or unknown,
// has no entry), ordered by stream and shard.
type MetadataOK struct {
	Brokers []BrokerInfo
	Shards  []ShardInfo
}

// Smallest encodings, for bounding counts before allocating.
const (
	minStreamEntry = 2 + 1                 // a stream name is at least one byte
	minBrokerEntry = 2 + 2                 // name, address
	minShardEntry  = 2 + 1 + 4 + 2 + 8 + 1 // shard, leader, epoch, replica count
	minReplicaName = 2
)

func checkName(what, s string) error {
	if len(s) > MaxMetadataNameLen {
		return fmt.Errorf("%w: %s of %d bytes exceeds %d", ErrMalformed, what, len(s), MaxMetadataNameLen)
	}
	return nil
}

// EncodeMetadata returns the body of a Metadata frame.
func EncodeMetadata(r MetadataRequest) ([]byte, error) {
	if len(r.Streams) > MaxMetadataStreams {
		return nil, fmt.Errorf("%w: %d streams in one metadata request, limit %d", ErrMalformed, len(r.Streams), MaxMetadataStreams)
	}
	e := enc{b: make([]byte, 0, 2+len(r.Streams)*16)}
	e.u16(uint16(len(r.Streams)))
	for _, s := range r.Streams {
		if err := CheckStreamName(s); err != nil {
			return nil, err
		}
		e.str(s)
	}
	return e.b, nil
}

// DecodeMetadata decodes a Metadata body.
func DecodeMetadata(b []byte) (MetadataRequest, error) {
	d := newDec(b)
	var r MetadataRequest
	n := int(d.U16("stream count"))
	switch {
	case d.Err != nil:
	case n > MaxMetadataStreams:
		d.Fail("%d streams in one metadata request, limit %d", n, MaxMetadataStreams)
	case n*minStreamEntry > d.Remaining():
		d.Fail("%d streams cannot fit in %d bytes", n, d.Remaining())
	case n > 0:
		r.Streams = make([]string, 0, n)
		for i := 0; i < n && d.Err == nil; i++ {
			s := d.str("stream")
			if d.Err == nil {
				if err := CheckStreamName(s); err != nil {
					d.Err = err
				}
			}
			r.Streams = append(r.Streams, s)
		}
	}
	return r, d.end("metadata")
}

// EncodeMetadataOK returns the body of a MetadataOK frame.
func EncodeMetadataOK(r MetadataOK) ([]byte, error) {
	if uint64(len(r.Brokers)) > math.MaxUint32 || uint64(len(r.Shards)) > math.MaxUint32 {
		return nil, fmt.Errorf("%w: metadata too large", ErrMalformed)
	}
	e := enc{b: make([]byte, 0, 8+len(r.Brokers)*32+len(r.Shards)*64)}
	e.u32(uint32(len(r.Brokers)))
	for _, b := range r.Brokers {
		if err := checkName("broker name", b.Name); err != nil {
			return nil, err
		}
		if err := checkName("broker address", b.Address); err != nil {
			return nil, err
		}
		e.str(b.Name)
		e.str(b.Address)
	}
	e.u32(uint32(len(r.Shards)))
	for _, s := range r.Shards {
		if err := checkShard(s.Shard); err != nil {
			return nil, err
		}
		if err := checkName("leader", s.Leader); err != nil {
			return nil, err
		}
		if len(s.Replicas) > MaxMetadataReplicas {
			return nil, fmt.Errorf("%w: %d replicas, limit %d", ErrMalformed, len(s.Replicas), MaxMetadataReplicas)
		}
		e.shard(s.Shard)
		e.str(s.Leader)
		e.u64(s.Epoch)
		e.u8(uint8(len(s.Replicas)))
		for _, n := range s.Replicas {
			if err := checkName("replica", n); err != nil {
				return nil, err
			}
			e.str(n)
		}
	}
	return e.b, nil
}

// name decodes a str of at most MaxMetadataNameLen bytes.
func (d *dec) name(what string) string {
	s := d.str(what)
	if d.Err == nil && len(s) > MaxMetadataNameLen {
		d.Fail("%s of %d bytes exceeds %d", what, len(s), MaxMetadataNameLen)
	}
	return s
}

// DecodeMetadataOK decodes a MetadataOK body. Every count is checked
// against the bytes left before anything is allocated for it.
func DecodeMetadataOK(b []byte) (MetadataOK, error) {
	d := newDec(b)
	var r MetadataOK
	nb := d.U32("broker count")
	if d.Err == nil && uint64(nb)*minBrokerEntry > uint64(d.Remaining()) {
		d.Fail("%d brokers cannot fit in %d bytes", nb, d.Remaining())
	}
	if d.Err == nil && nb > 0 {
		r.Brokers = make([]BrokerInfo, 0, nb)
		for i := uint32(0); i < nb && d.Err == nil; i++ {
			r.Brokers = append(r.Brokers, BrokerInfo{Name: d.name("broker name"), Address: d.name("broker address")})
		}
	}
	ns := d.U32("shard count")
	if d.Err == nil && uint64(ns)*minShardEntry > uint64(d.Remaining()) {
		d.Fail("%d shards cannot fit in %d bytes", ns, d.Remaining())
	}
	if d.Err == nil && ns > 0 {
		r.Shards = make([]ShardInfo, 0, ns)
		for i := uint32(0); i < ns && d.Err == nil; i++ {
			s := ShardInfo{Shard: d.shard(), Leader: d.name("leader"), Epoch: d.U64("epoch")}
			nr := int(d.U8("replica count"))
			if d.Err == nil && nr*minReplicaName > d.Remaining() {
				d.Fail("%d replicas cannot fit in %d bytes", nr, d.Remaining())
			}
			if d.Err == nil && nr > 0 {
				s.Replicas = make([]string, 0, nr)
				for j := 0; j < nr && d.Err == nil; j++ {
					s.Replicas = append(s.Replicas, d.name("replica"))
				}
			}
			r.Shards = append(r.Shards, s)
		}
	}
	return r, d.end("metadata ok")
}

// LeaderAddress returns the client address of shard's leader as m says,
// with the epoch; ok is false when m names no leader for the shard or no
// address for it.
func (m MetadataOK) LeaderAddress(shard ShardRef) (addr string, epoch uint64, ok bool) {
	for _, s := range m.Shards {
		if s.Shard != shard || s.Leader == "" {
			continue
		}
		for _, b := range m.Brokers {
			if b.Name == s.Leader && b.Address != "" {
				return b.Address, s.Epoch, true
			}
		}
		return "", s.Epoch, false
	}
	return "", 0, false
}
