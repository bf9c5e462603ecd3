package controllers_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/client"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/controllers"
)

// setShards raises (or tries to set) a stream's spec.shards with a merge
// patch, as `kubectl patch felixstream S --type merge -p
// '{"spec":{"shards":N}}'` does.
func setShards(t *testing.T, ns, name string, n int32) {
	t.Helper()
	s, err := getStream(ns, name)
	if err != nil {
		t.Fatalf("get stream %s: %v", name, err)
	}
	patch := client.RawPatch("application/merge-patch+json", []byte(fmt.Sprintf(`{"spec":{"shards":%d}}`, n)))
	if err := suite.c.Patch(context.Background(), s, patch); err != nil {
		t.Fatalf("set shards of %s to %d: %v", name, n, err)
	}
}

// TestStream_ShardsRaisedAddsShards: raising spec.shards 2 -> 4 creates
// s-2 and s-3, labelled, owned and spread as shards made at creation
// (each assigned at epoch 1), leaves s-0 and s-1 as they were (same UID,
// same spec), says so in an event ShardsAdded "added shards 2-3", and the
// stream's status counts four shards.
func TestStream_ShardsRaisedAddsShards(t *testing.T) {
	ns := namespace(t)
	brokers := placed(t, ns, "grow", 3, 2, 3)
	before := map[string]*felixv1.FelixShard{}
	for _, name := range []string{"s-0", "s-1"} {
		before[name] = getShard(t, ns, name)
	}

	setShards(t, ns, "s", 4)

	for _, name := range []string{"s-2", "s-3"} {
		eventually(t, 15*time.Second, name+" assigned", func() (bool, string) {
			sh := getShard(t, ns, name)
			if sh == nil || sh.Status.Assignment == nil {
				return false, "unassigned"
			}
			return sh.Status.Assignment.Epoch == 1, fmt.Sprintf("epoch %d", sh.Status.Assignment.Epoch)
		})
	}
	s0 := before["s-0"]
	for i, name := range []string{"s-2", "s-3"} {
		sh := getShard(t, ns, name)
		if sh.Spec.Stream != "s" || sh.Spec.Index != int32(i+2) || sh.Spec.FirstEpoch != 0 {
			t.Errorf("%s spec %+v; want stream s, index %d, no first epoch", name, sh.Spec, i+2)
		}
		if !equality.Semantic.DeepEqual(sh.Labels, s0.Labels) || !equality.Semantic.DeepEqual(sh.OwnerReferences, s0.OwnerReferences) {
			t.Errorf("%s labels %v owners %v; want those of s-0: %v %v", name, sh.Labels, sh.OwnerReferences, s0.Labels, s0.OwnerReferences)
		}
		seen := map[string]bool{}
		for _, r := range sh.Spec.Replicas {
			if brokers[r] == nil {
				t.Errorf("%s replica %s is not a broker of the cluster", name, r)
			}
			seen[r] = true
		}
		if len(seen) != 3 {
			t.Errorf("%s replicas %v not 3 distinct brokers", name, sh.Spec.Replicas)
		}
	}
	// Spread as at creation: shard i starts at the stream's offset plus i,
	// so with 3 brokers s-2 leads on the broker s-0 and s-1 do not, and
	// s-3 has s-0's set.
	s2, s3 := getShard(t, ns, "s-2"), getShard(t, ns, "s-3")
	if first := s2.Spec.Replicas[0]; first == s0.Spec.Replicas[0] || first == before["s-1"].Spec.Replicas[0] {
		t.Errorf("s-2 preferred leader %s; want the broker s-0 (%s) and s-1 (%s) do not start on", first, s0.Spec.Replicas[0], before["s-1"].Spec.Replicas[0])
	}
	if !slices.Equal(s3.Spec.Replicas, s0.Spec.Replicas) {
		t.Errorf("s-3 replicas %v; want s-0's %v (the order wraps after 3 brokers)", s3.Spec.Replicas, s0.Spec.Replicas)
	}
	for name, old := range before {
		now := getShard(t, ns, name)
		if now.UID != old.UID || !equality.Semantic.DeepEqual(now.Spec, old.Spec) {
			t.Errorf("%s changed: uid %s spec %+v; was uid %s spec %+v", name, now.UID, now.Spec, old.UID, old.Spec)
		}
		if now.Status.Assignment == nil || now.Status.Assignment.Epoch != 1 {
			t.Errorf("%s assignment %+v; want it kept at epoch 1", name, now.Status.Assignment)
		}
	}
	eventually(t, 10*time.Second, `ShardsAdded event "added shards 2-3"`, func() (bool, string) {
		return hasEventMessage(ns, "s", "ShardsAdded", "added shards 2-3 ")
	})
	eventually(t, 10*time.Second, "status of 4 shards", func() (bool, string) {
		s, err := getStream(ns, "s")
		if err != nil {
			return false, err.Error()
		}
		r := condition(s.Status.Conditions, felixv1.ConditionReady)
		if r == nil || s.Status.ObservedGeneration != s.Generation {
			return false, "not observed"
		}
		return strings.HasSuffix(r.Message, "/4 shards ready"), r.Message
	})
}

// hasEventMessage reports an event about object name with the reason and a
// note containing part.
func hasEventMessage(ns, name, reason, part string) (bool, string) {
	var list eventsv1.EventList
	if err := suite.c.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		return false, err.Error()
	}
	var seen []string
	for _, e := range list.Items {
		if e.Regarding.Name == name && e.Reason == reason {
			if strings.Contains(e.Note, part) {
				return true, ""
			}
			seen = append(seen, e.Note)
		}
	}
	return false, fmt.Sprintf("%s notes: %q", reason, seen)
}

func TestIndexRanges(t *testing.T) {
	for _, tc := range []struct {
		in   []int32
		want string
	}{
		{nil, ""},
		{[]int32{4}, "4"},
		{[]int32{4, 5, 6, 7}, "4-7"},
		{[]int32{2, 5, 6}, "2, 5-6"},
		{[]int32{0, 1, 3, 5, 6, 7}, "0-1, 3, 5-7"},
	} {
		if got := controllers.IndexRanges(tc.in); got != tc.want {
			t.Errorf("IndexRanges(%v) = %q; want %q", tc.in, got, tc.want)
		}
	}
}
