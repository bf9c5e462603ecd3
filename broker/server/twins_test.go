package server

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"felix.dev/felix/broker/client"
	"felix.dev/felix/broker/wire"
)

// The twins of this file run one scenario twice: with every rule on the
// scenario's invariants hold; with one rule switched off (Options.twin)
// they must break. A twin that stops breaking them fails the test: the
// rule would no longer be shown load-bearing.
//
// Each scenario is two leaders over one log, deterministically: server A
// folds the shard's log, server B (a second Server over the same store,
// as a newer leader of the shard is) folds it too and writes, then A
// writes from its now stale fold. The clock is injected; nothing sleeps.

// tr9DeposedCommit is the scenario of [TR-9]: m1 owns the shard for group
// g at generation 1 and commits 5 through A; B grants m2 the shard at
// generation 2 (m1's lease ran out on B) and m2 commits 9 through B; then
// m1, deposed, commits 3 through A, whose fold still names it the owner.
// It returns the invariants that broke:
//
//   - fenced: the deposed member's commit is refused with GroupFenced
//     naming m2 at generation 2;
//   - no-backwards: every server's view of g (A's, B's and a fresh fold's)
//     is owner m2, generation 2, committed 9 (the last commit acknowledged
//     to the current owner): nothing a deposed member sends moves the
//     offset back;
//   - folds: a fresh fold of the group log succeeds.
func tr9DeposedCommit(t *testing.T, twin serverTwin) []string {
	t.Helper()
	clk := newFakeClock()
	opts := Options{GroupLease: 10 * time.Second, Now: clk.Now, twin: twin}
	b := startBroker(t, opts)
	ctx := ctxT(t)
	a := dial(t, b.addr, client.Options{})
	if _, err := a.GroupClaim(ctx, shardA, "g", "m1"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.GroupCommit(ctx, shardA, "g", "m1", 1, 5); err != nil {
		t.Fatal(err)
	}
	// B: a second leader over the same log, with its own fold; its
	// leases are short, so m1's ownership runs out there first.
	bOpts := opts
	bOpts.GroupLease = time.Nanosecond
	bc := dial(t, serveAgain(t, b, bOpts), client.Options{})
	if _, err := bc.GroupDescribe(ctx, shardA, "g"); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	if cl, err := bc.GroupClaim(ctx, shardA, "g", "m2"); err != nil || cl.Generation != 2 || cl.Committed != 5 {
		t.Fatalf("claim by m2 through B: %+v %v", cl, err)
	}
	if _, err := bc.GroupCommit(ctx, shardA, "g", "m2", 2, 9); err != nil {
		t.Fatal(err)
	}

	var broke []string
	_, err := a.GroupCommit(ctx, shardA, "g", "m1", 1, 3)
	var we *wire.Error
	if !errors.Is(err, wire.ErrGroupFenced) || !errors.As(err, &we) || we.Owner != "m2" || we.Generation != 2 {
		broke = append(broke, fmt.Sprintf("fenced: the deposed member's commit through the stale fold answered %v, want GroupFenced naming m2 at generation 2", err))
	}
	fresh := dial(t, serveAgain(t, b, opts), client.Options{})
	for _, v := range []struct {
		name string
		c    *client.Client
	}{{"A (stale fold)", a}, {"B", bc}, {"a fresh fold", fresh}} {
		d, err := v.c.GroupDescribe(ctx, shardA, "g")
		switch {
		case isCorrupt(err):
			broke = append(broke, fmt.Sprintf("folds: %s: the group log no longer folds: %v", v.name, err))
		case err != nil:
			t.Fatalf("describe through %s: %v", v.name, err)
		case len(d.Groups) != 1 || d.Groups[0].Owner != "m2" || d.Groups[0].Generation != 2 || d.Groups[0].Committed != 9:
			broke = append(broke, fmt.Sprintf("no-backwards: %s describes %+v, want owner m2 at generation 2, committed 9", v.name, d.Groups))
		}
	}
	return broke
}

// isCorrupt reports whether err is a Corrupt answer (a log that no
// longer folds).
func isCorrupt(err error) bool {
	var we *wire.Error
	return errors.As(err, &we) && we.Code == wire.CodeCorrupt
}

// TestTR9_DeposedMemberCannotMoveTheOffsetBack: with [TR-9] a deposed
// member's commit through a leader whose fold is stale is refused by the
// log's tail check, and the group's committed offset stays where its
// current owner put it.
func TestTR9_DeposedMemberCannotMoveTheOffsetBack(t *testing.T) {
	if broke := tr9DeposedCommit(t, serverTwin{}); len(broke) > 0 {
		t.Fatalf("[TR-9] on, invariants broke:\n%s", joinLines(broke))
	}
}

// TestTR9Twin_UnconditionalCommitMovesTheOffsetBack is the twin: with the
// commit appended without the fold's tail, the deposed member's commit
// is acknowledged, the stale leader serves the offset moved back, and the
// log no longer folds. The scenario's invariants must break.
func TestTR9Twin_UnconditionalCommitMovesTheOffsetBack(t *testing.T) {
	broke := tr9DeposedCommit(t, serverTwin{unconditionalGroupAppend: true})
	if len(broke) == 0 {
		t.Fatal("twin ([TR-9] off): every invariant held; the tail check is no longer shown load-bearing")
	}
	t.Logf("twin ([TR-9] off) broke, as it must:\n%s", joinLines(broke))
}

// counterStaleAdd is the scenario of the counter log's tail check: A
// folds k = 10; B, a newer leader over the same log, adds 5 (15); then A
// adds 1 from its stale fold, retrying while it answers Unavailable
// (nothing written) up to three times. It returns the invariants that
// broke:
//
//   - sums: each acknowledged value is the sum of the deltas acknowledged
//     up to it (10, 15, 16): no add is lost or counted twice;
//   - reads: the last writer (A) and a fresh fold read k = 16, the sum
//     of every acknowledged delta, and the counter log folds. (B is not
//     asked: a read serves the server's fold without a tail check, and B
//     has not written since A did. In a cluster only the leader of the
//     current epoch writes a shard's logs and a new epoch refolds, so a
//     fold is stale this way only with two servers over one store.)
func counterStaleAdd(t *testing.T, twin serverTwin) []string {
	t.Helper()
	opts := Options{twin: twin}
	b := startBroker(t, opts)
	ctx := ctxT(t)
	a := dial(t, b.addr, client.Options{})
	var broke []string
	sum := int64(0)
	add := func(who string, c *client.Client, delta int64) {
		t.Helper()
		for attempt := 0; ; attempt++ {
			got, err := c.CounterAdd(ctx, shardA, "k", delta, nil)
			var we *wire.Error
			if err != nil && errors.As(err, &we) && we.Code == wire.CodeUnavailable && attempt < 3 {
				continue // nothing written; retry, as a client does
			}
			if err != nil {
				broke = append(broke, fmt.Sprintf("sums: add %d through %s: %v", delta, who, err))
				return
			}
			sum += delta
			if got.Value != sum {
				broke = append(broke, fmt.Sprintf("sums: add %d through %s acknowledged value %d, want %d (the sum of the acknowledged deltas)", delta, who, got.Value, sum))
			}
			return
		}
	}
	add("A", a, 10)
	bc := dial(t, serveAgain(t, b, opts), client.Options{})
	add("B", bc, 5)
	add("A (stale fold)", a, 1)
	fresh := dial(t, serveAgain(t, b, opts), client.Options{})
	for _, v := range []struct {
		name string
		c    *client.Client
	}{{"A", a}, {"a fresh fold", fresh}} {
		g, err := v.c.CounterGet(ctx, shardA, "k")
		switch {
		case isCorrupt(err):
			broke = append(broke, fmt.Sprintf("reads: %s: the counter log no longer folds: %v", v.name, err))
		case err != nil:
			t.Fatalf("get through %s: %v", v.name, err)
		case g.Value != sum:
			broke = append(broke, fmt.Sprintf("reads: %s reads k = %d, want %d", v.name, g.Value, sum))
		}
	}
	return broke
}

// TestTR8_CounterAddOnAStaleFoldRefusedByTheLog: a counter add through a
// leader whose fold is stale is refused by the counter log's tail check
// (Unavailable, nothing written); its retry folds again and sums.
func TestTR8_CounterAddOnAStaleFoldRefusedByTheLog(t *testing.T) {
	if broke := counterStaleAdd(t, serverTwin{}); len(broke) > 0 {
		t.Fatalf("tail check on, invariants broke:\n%s", joinLines(broke))
	}
}

// TestTR8Twin_UnconditionalCounterAddLosesAnAdd is the twin: with the add
// appended without the fold's tail, the stale leader acknowledges a value
// that lost the other leader's add, and the log no longer folds.
func TestTR8Twin_UnconditionalCounterAddLosesAnAdd(t *testing.T) {
	broke := counterStaleAdd(t, serverTwin{unconditionalCounterAppend: true})
	if len(broke) == 0 {
		t.Fatal("twin (counter tail check off): every invariant held; the tail check is no longer shown load-bearing")
	}
	t.Logf("twin (counter tail check off) broke, as it must:\n%s", joinLines(broke))
}

func joinLines(ss []string) string {
	out := ""
	for _, s := range ss {
		out += "  " + s + "\n"
	}
	return out
}

// TestTR10Twin_UnboundedRedriveGrowsTheDeadLetterLog: with the redrive's
// intent bounds off, a redrive that keeps losing its conditional append
// writes an intent per lost attempt, within a request and across
// requests, so the scenarios that bound the dead-letter log break.
func TestTR10Twin_UnboundedRedriveGrowsTheDeadLetterLog(t *testing.T) {
	for _, tc := range redriveBoundCases[:2] {
		t.Run(tc.name, func(t *testing.T) {
			errs, intents := redriveRace(t, serverTwin{unboundedRedrive: true}, tc.maxDead, tc.races, tc.requests)
			if broke := tc.check(errs, intents); len(broke) == 0 {
				t.Fatalf("twin kept the bounds (answers %v, %d intents): the bounds are no longer shown load-bearing", errs, intents)
			} else {
				t.Logf("twin broke the bounds as expected: %v", broke)
			}
		})
	}
}
