package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"felix.dev/felix/broker/client"
	"felix.dev/felix/broker/wire"
)

// A Cluster's group commit whose answer is lost is sent again (committing
// the same offset twice is harmless); a GroupFenced answer is not retried
// and carries the owner. A broker without groups is never sent one.
func TestClusterGroupCommitResendsAndStopsWhenFenced(t *testing.T) {
	var b *scripted
	b = startScriptedWith(t, allFeatures|wire.FeatureGroups, func(f wire.Frame, n int) (wire.MsgType, []byte, bool) {
		if f.Type == wire.MsgMetadata {
			return wire.MsgMetadataOK, metaLeading(b.addr), true
		}
		req, err := wire.DecodeGroupCommit(f.Body)
		if err != nil || req.Group != "g" || req.Member != "m" || req.Generation != 2 {
			t.Errorf("group commit %+v %v", req, err)
			return 0, nil, false
		}
		switch n {
		case 1:
			return 0, nil, false // the answer is lost: the connection closes
		case 2:
			return wire.MsgGroupCommitOK, wire.EncodeGroupCommitOK(wire.GroupCommitOK{Entry: 9}), true
		}
		fenced, _ := wire.EncodeError(&wire.Error{Code: wire.CodeGroupFenced, Message: "taken over", Owner: "m2", Generation: 3}, allFeatures|wire.FeatureGroups)
		return wire.MsgError, fenced, true
	})
	c := newTestCluster(t, 4, b.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if got, err := c.GroupCommit(ctx, shard, "g", "m", 2, 40); err != nil || got.Entry != 9 {
		t.Fatalf("commit = %+v, %v; want entry 9 after one resend", got, err)
	}
	_, err := c.GroupCommit(ctx, shard, "g", "m", 2, 41)
	var we *wire.Error
	if !errors.Is(err, wire.ErrGroupFenced) || !errors.As(err, &we) || we.Owner != "m2" || we.Generation != 3 {
		t.Fatalf("commit after a takeover: %v, want GroupFenced naming m2 at 3", err)
	}
	if n := b.count(wire.MsgGroupCommit); n != 3 {
		t.Fatalf("broker saw %d commits, want 3 (the fenced one not resent)", n)
	}

	old := startScripted(t, func(f wire.Frame, n int) (wire.MsgType, []byte, bool) {
		if f.Type == wire.MsgMetadata {
			return wire.MsgMetadataOK, metaLeading(""), true
		}
		t.Errorf("a broker without groups was sent %v", f.Type)
		return 0, nil, false
	})
	oc := newTestCluster(t, 2, old.addr)
	if _, err := oc.GroupClaim(ctx, shard, "g", "m"); !errors.Is(err, client.ErrNoGroups) {
		t.Fatalf("claim to a broker without groups: %v, want ErrNoGroups", err)
	}
}
