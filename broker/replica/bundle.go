package replica

import (
	"felix.dev/felix/broker/peer"
	"felix.dev/felix/broker/replication"
	"felix.dev/felix/broker/wire"
)

// maxBundled bounds the messages of one bundle this broker sends (the
// decoder takes up to peer.MaxBundle).
const maxBundled = 256

// outConn is the messages of one Ready bound for one connection that go
// out together in one bundle frame.
type outConn struct {
	to      replication.NodeID
	conn    replication.ConnID
	request bool // over the pool's connection; answers go over an accepted one
	bundles bool // the connection accepted wire.FeatureShipBundle
	ms      []peer.Shipped
}

// sendAll puts a Ready's messages on the wire (see send). Where a
// connection accepted wire.FeatureShipBundle, the messages without records
// bound for it (an idle pass's empty Appends and their answers, one per log
// [RP-4]) go out together in one bundle frame rather than one frame each,
// which saves a queue hand-off, a decode and a post to the shard's inbox
// per message (issue 31). Nothing else changes: every message is still
// sent, and decoded on the other side, as the core made it. The messages
// of one connection keep their order: a message carrying records goes out
// alone, after what was gathered for its connection before it. A bundle of
// one message is the version-1 frame.
func (s *shard) sendAll(msgs []replication.Message) {
	if len(msgs) < 2 {
		for _, m := range msgs {
			s.send(m)
		}
		return
	}
	out := s.out[:0]
	for _, m := range msgs {
		req := peer.IsRequest(m.Type)
		i := 0
		for i < len(out) && (out[i].to != m.To || out[i].conn != m.Conn || out[i].request != req) {
			i++
		}
		if i == len(out) {
			if len(out) < cap(out) {
				out = out[:i+1] // keeps the buffer of ms
				out[i].to, out[i].conn, out[i].request = m.To, m.Conn, req
				out[i].ms = out[i].ms[:0]
			} else {
				out = append(out, outConn{to: m.To, conn: m.Conn, request: req})
			}
			out[i].bundles = s.bundles(m.To, m.Conn, req)
		}
		oc := &out[i]
		if !oc.bundles || len(m.Records) > 0 {
			s.flush(oc)
			s.send(m)
			continue
		}
		oc.ms = append(oc.ms, peer.Shipped{Shard: s.id, Msg: m})
		if len(oc.ms) == maxBundled {
			s.flush(oc)
		}
	}
	for i := range out {
		s.flush(&out[i])
	}
	s.out = out
}

// bundles reports whether the connection a message to node over conn
// takes accepted bundles.
func (s *shard) bundles(node replication.NodeID, conn replication.ConnID, request bool) bool {
	if request {
		return s.m.pool.Bundles(node, conn)
	}
	pc := s.m.in.lookup(conn)
	return pc != nil && pc.Features().Has(wire.FeatureShipBundle)
}

// flush sends what oc gathered: one message as its own frame, more as one
// bundle.
func (s *shard) flush(oc *outConn) {
	switch len(oc.ms) {
	case 0:
		return
	case 1:
		s.sendOne(oc.ms[0].Msg)
	default:
		s.sendBundle(oc)
	}
	clear(oc.ms)
	oc.ms = oc.ms[:0]
}

// sendBundle encodes and sends what oc gathered as one bundle frame, built
// in a buffer of a frame the connection has finished writing when it has
// one (Pool.Buffer, PeerConn.Buffer).
func (s *shard) sendBundle(oc *outConn) {
	if oc.request {
		b, err := peer.AppendBundleFrame(s.m.pool.Buffer(oc.to, oc.conn), oc.ms)
		if err != nil {
			s.m.o.Logger.Error(err, "cannot encode replication bundle", "shard", s.id.String())
			return
		}
		// A bundle's bytes count whole: its Appends carry no records.
		s.counters.shipped(string(oc.to), len(b), 0)
		s.m.pool.Send(oc.to, oc.conn, b)
		return
	}
	pc := s.m.in.lookup(oc.conn)
	if pc == nil {
		return // the connection is gone; the leader asks again
	}
	b, err := peer.AppendBundleFrame(pc.Buffer(), oc.ms)
	if err != nil {
		s.m.o.Logger.Error(err, "cannot encode replication bundle", "shard", s.id.String())
		return
	}
	pc.SendFrame(b) // built whole: no copy
}
