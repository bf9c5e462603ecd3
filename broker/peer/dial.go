package peer

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"time"

	"felix.dev/felix/broker/replication"
	"felix.dev/felix/broker/wire"
)

// ErrTLSHandshake is wrapped by a dial whose TLS handshake failed (the
// peer's certificate was refused, or it refused ours).
var ErrTLSHandshake = errors.New("peer: TLS handshake failed")

// errLookup marks a handshake whose storage id could not be learned.
var errLookup = errors.New("peer: storage id lookup failed")

// connect dials node and performs the handshake.
func (p *Pool) connect(ctx context.Context, node replication.NodeID) (*liveConn, error) {
	addr, err := p.o.Resolve(node)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", node, err)
	}
	hctx, cancel := context.WithTimeout(ctx, p.o.HandshakeTimeout)
	defer cancel()
	nc, err := p.o.Dial(hctx, addr)
	if err != nil {
		return nil, err
	}
	if p.o.TLS != nil {
		tc := tls.Client(nc, p.o.TLS(node))
		if err := tc.HandshakeContext(hctx); err != nil {
			_ = nc.Close()
			return nil, fmt.Errorf("%w with %s at %s: %w", ErrTLSHandshake, node, addr, err)
		}
		nc = tc
	}
	stop := context.AfterFunc(hctx, func() { _ = nc.SetDeadline(time.Now()) })
	sid, feats, err := handshake(nc, p.o.StorageID, p.o.MaxFrameSize)
	if !stop() || err != nil {
		_ = nc.Close()
		if err == nil {
			err = hctx.Err()
		}
		return nil, err
	}
	_ = nc.SetDeadline(time.Time{})
	return &liveConn{id: p.o.ConnIDs.Next(), sid: sid, feats: feats, nc: nc, out: make(chan []byte, p.o.QueueFrames),
		free:  make(chan []byte, freeFrames),
		close: make(chan struct{})}, nil
}

// offered is what a replication connection's Hello offers: the storage id
// [RP-2] and bundles (issue 31).
const offered = wire.FeatureStorageID | wire.FeatureShipBundle

// handshake sends a Hello offering the storage-id and ship-bundle
// features and returns the id the HelloOK presented ("" when the bit was
// not negotiated) and the features it accepted.
func handshake(nc net.Conn, self []byte, maxFrame uint32) (replication.StorageID, wire.Features, error) {
	sid, ok, err := hello(nc, self, maxFrame)
	if err != nil {
		return "", 0, err
	}
	return sid, ok.Features & offered, nil
}

func hello(nc net.Conn, self []byte, maxFrame uint32) (replication.StorageID, wire.HelloOK, error) {
	var none wire.HelloOK
	body, err := wire.EncodeHello(wire.Hello{Version: wire.ProtocolVersion, Features: offered, StorageID: self})
	if err != nil {
		return "", none, err
	}
	if err := wire.WriteFrame(nc, wire.Frame{Type: wire.MsgHello, Body: body}); err != nil {
		return "", none, fmt.Errorf("send hello: %w", err)
	}
	f, err := wire.ReadFrame(bufio.NewReaderSize(nc, 512), maxFrame)
	if err != nil {
		return "", none, fmt.Errorf("read hello answer: %w", err)
	}
	if f.Type == wire.MsgError {
		e, derr := wire.DecodeError(f.Body, 0)
		if derr != nil {
			return "", none, derr
		}
		return "", none, fmt.Errorf("handshake refused: %w", e)
	}
	if f.Type != wire.MsgHelloOK {
		return "", none, fmt.Errorf("handshake answered with %s: %w", f.Type, wire.ErrMalformed)
	}
	ok, err := wire.DecodeHelloOK(f.Body)
	if err != nil {
		return "", none, fmt.Errorf("%w: %w", errLookup, err)
	}
	if !ok.Features.Has(wire.FeatureStorageID) {
		return "", ok, nil // an older broker: it presents no id
	}
	if len(ok.StorageID) != wire.StorageIDSize {
		return "", none, fmt.Errorf("%w: feature negotiated, no id presented", errLookup)
	}
	return replication.StorageID(hex.EncodeToString(ok.StorageID)), ok, nil
}
