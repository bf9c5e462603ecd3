package client

import (
	"context"
	"errors"
	"fmt"

	"felix.dev/felix/broker/wire"
)

// ErrNoMetadata is returned by Metadata when the broker did not accept
// wire.FeatureMetadata (an older broker, or a client that did not offer
// it): it cannot say who leads what.
var ErrNoMetadata = errors.New("client: the broker does not serve metadata")

// Metadata asks the broker for the cluster's brokers and the shards of
// streams, with their leaders, epochs and replicas; no stream asks for
// every stream the connection's principal may Describe. A standalone
// broker answers with no brokers and no shards. Naming a stream the
// principal may not Describe fails with an *AuthError.
func (c *Client) Metadata(ctx context.Context, streams ...string) (wire.MetadataOK, error) {
	if !c.hello.Features.Has(wire.FeatureMetadata) {
		return wire.MetadataOK{}, ErrNoMetadata
	}
	body, err := wire.EncodeMetadata(wire.MetadataRequest{Streams: streams})
	if err != nil {
		return wire.MetadataOK{}, err
	}
	f, _, err := c.roundTrip(ctx, wire.MsgMetadata, body)
	if err != nil {
		return wire.MetadataOK{}, err
	}
	ok, err := answer(c, f, wire.MsgMetadataOK, wire.DecodeMetadataOK)
	if err != nil {
		var we *wire.Error
		if errors.As(err, &we) && we.Code == wire.CodeNotAuthorized {
			return ok, &AuthError{Err: we}
		}
		return ok, fmt.Errorf("client: metadata: %w", err)
	}
	return ok, nil
}
