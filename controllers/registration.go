package controllers

import (
	"fmt"

	felixv1 "felix.dev/felix/api/v1alpha1"
)

// grantAction is the operator's answer to a registration request.
type grantAction uint8

const (
	// grantNone: no request pending.
	grantNone grantAction = iota
	// grantAccept: the request saw the current incarnation; it gets the
	// next one.
	grantAccept
	// grantRefuse: the request saw an older incarnation (another start
	// registered in between); it is cleared and the broker must start its
	// [ID-4] sequence again.
	grantRefuse
)

// grant is the pure registration decision [ID-4].
type grant struct {
	Action      grantAction
	Incarnation int64
	StorageID   string
	Address     string
	// PeerAddress is the request's peer (replication) address; empty for
	// a broker without a peer port (older, or insecure dev mode), which
	// then cannot be dialled by its peers.
	PeerAddress string
	// Rotated is true when an accepted id differs from the previously
	// registered one (the broker's storage id rotated, [ID-3]).
	Rotated    bool
	PreviousID string
	Message    string
}

// decideRegistration grants Incarnation+1 to a request whose
// SeenIncarnation equals the current Incarnation, and refuses any other:
// optimistic, so two racing starts that read the same incarnation cannot
// both win (the second finds the incarnation moved on).
func decideRegistration(st felixv1.FelixBrokerStatus) grant {
	req := st.RegistrationRequest
	if req == nil {
		return grant{Action: grantNone}
	}
	if req.SeenIncarnation != st.Incarnation {
		return grant{Action: grantRefuse, Message: fmt.Sprintf(
			"registration of storage id %s refused: it saw incarnation %d, the current one is %d",
			req.StorageID, req.SeenIncarnation, st.Incarnation)}
	}
	g := grant{
		Action:      grantAccept,
		Incarnation: st.Incarnation + 1,
		StorageID:   req.StorageID,
		Address:     req.Address,
		PeerAddress: req.PeerAddress,
		PreviousID:  st.StorageID,
		Rotated:     st.StorageID != "" && st.StorageID != req.StorageID,
	}
	g.Message = fmt.Sprintf("registered storage id %s at incarnation %d", g.StorageID, g.Incarnation)
	if g.Rotated {
		g.Message = fmt.Sprintf("storage id rotated from %s to %s at incarnation %d: the broker's data directory may hold less than its peers were told [ID-3]",
			g.PreviousID, g.StorageID, g.Incarnation)
	}
	return g
}
