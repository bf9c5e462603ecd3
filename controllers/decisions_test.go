package controllers

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/broker/controlplane"
)

func TestID4_GrantOnlyAtSeenIncarnation(t *testing.T) {
	const idA, idB = "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"
	req := func(id string, seen int64) *felixv1.RegistrationRequest {
		return &felixv1.RegistrationRequest{StorageID: id, SeenIncarnation: seen, Address: "a:1", PeerAddress: "a:2"}
	}
	tests := []struct {
		name    string
		st      felixv1.FelixBrokerStatus
		action  grantAction
		inc     int64
		rotated bool
	}{
		{"no request", felixv1.FelixBrokerStatus{Incarnation: 3}, grantNone, 0, false},
		{"first registration", felixv1.FelixBrokerStatus{RegistrationRequest: req(idA, 0)}, grantAccept, 1, false},
		{"restart keeps id", felixv1.FelixBrokerStatus{Incarnation: 4, StorageID: idA, RegistrationRequest: req(idA, 4)}, grantAccept, 5, false},
		{"id rotated", felixv1.FelixBrokerStatus{Incarnation: 4, StorageID: idA, RegistrationRequest: req(idB, 4)}, grantAccept, 5, true},
		{"saw an older incarnation", felixv1.FelixBrokerStatus{Incarnation: 5, StorageID: idA, RegistrationRequest: req(idB, 4)}, grantRefuse, 0, false},
		{"saw a newer incarnation", felixv1.FelixBrokerStatus{Incarnation: 5, StorageID: idA, RegistrationRequest: req(idB, 6)}, grantRefuse, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := decideRegistration(tt.st)
			if g.Action != tt.action || g.Incarnation != tt.inc || g.Rotated != tt.rotated {
				t.Fatalf("got %+v; want action %d incarnation %d rotated %v", g, tt.action, tt.inc, tt.rotated)
			}
			if g.Action == grantAccept && g.StorageID != tt.st.RegistrationRequest.StorageID {
				t.Fatalf("granted id %s", g.StorageID)
			}
			if g.Action == grantAccept && (g.Address != "a:1" || g.PeerAddress != "a:2") {
				t.Fatalf("granted addresses %q, %q; want the request's", g.Address, g.PeerAddress)
			}
		})
	}
}

func TestHeartbeat_DecideLiveness(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	hb := Heartbeat{ObservedAt: t0}
	tests := []struct {
		name    string
		now     time.Time
		renewed bool
		removed bool
		want    felixv1.BrokerState
		recheck bool
	}{
		{"never renewed", t0, false, false, felixv1.BrokerDown, false},
		{"just renewed", t0, true, false, felixv1.BrokerUp, true},
		{"at the expiry", t0.Add(10 * time.Second), true, false, felixv1.BrokerUp, true},
		{"past the expiry", t0.Add(10*time.Second + time.Millisecond), true, false, felixv1.BrokerDown, false},
		{"removed", t0, true, true, felixv1.BrokerLeft, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lv := decideLiveness(tt.now, hb, tt.renewed, tt.removed, 10*time.Second)
			if lv.State != tt.want || (lv.RecheckAfter > 0) != tt.recheck {
				t.Fatalf("got %+v; want %s recheck %v", lv, tt.want, tt.recheck)
			}
			if tt.recheck && tt.now.Add(lv.RecheckAfter).Before(t0.Add(10*time.Second)) {
				t.Fatalf("recheck at %s is before the expiry", tt.now.Add(lv.RecheckAfter))
			}
		})
	}
}

// TestHeartbeat_OperatorClockDecides: a renewal counts from when the
// operator saw it, whatever renewTime the broker's clock wrote; a renewal
// seen again does not extend liveness.
func TestHeartbeat_OperatorClockDecides(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(t0)
	h := NewHeartbeats(clk)
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "n", Name: "b-0", Annotations: map[string]string{
		controlplane.LeaseAnnotationIncarnation: "7", controlplane.LeaseAnnotationReports: controlplane.ReportsCurrent,
	}}}
	if _, ok := h.Observe(lease); ok {
		t.Fatal("a lease never renewed counts as a heartbeat")
	}
	future := metav1.NewMicroTime(t0.Add(time.Hour)) // broker clock an hour ahead
	lease.Spec.RenewTime = &future
	hb, ok := h.Observe(lease)
	if !ok || !hb.ObservedAt.Equal(t0) || hb.Incarnation != 7 || !hb.AttestedAt.Equal(t0) || hb.AttestedIncarnation != 7 {
		t.Fatalf("first observation %+v", hb)
	}
	clk.Step(20 * time.Second)
	if hb, _ := h.Observe(lease); !hb.ObservedAt.Equal(t0) {
		t.Fatalf("the same renewal seen again moved ObservedAt to %s", hb.ObservedAt)
	}
	if lv := decideLiveness(clk.Now(), hb, true, false, 10*time.Second); lv.State != felixv1.BrokerDown {
		t.Fatalf("skewed renewTime kept the broker %s", lv.State)
	}
	// A renewal that says its reports are behind does not attest.
	next := metav1.NewMicroTime(future.Add(time.Second))
	lease.Spec.RenewTime = &next
	lease.Annotations[controlplane.LeaseAnnotationReports] = controlplane.ReportsBehind
	hb, _ = h.Observe(lease)
	if !hb.ObservedAt.Equal(clk.Now()) || !hb.AttestedAt.Equal(t0) {
		t.Fatalf("behind renewal: %+v", hb)
	}
	if got, _ := h.Get(types.NamespacedName{Namespace: "n", Name: "b-0"}); got != hb {
		t.Fatalf("Get = %+v", got)
	}
}

func TestSpread_DistinctBrokersZonesAndRotatingLeaders(t *testing.T) {
	slots := []brokerSlot{{"c-0", "a"}, {"c-1", "a"}, {"c-2", "b"}, {"c-3", "b"}, {"c-4", "c"}, {"c-5", "c"}}
	zone := map[string]string{}
	for _, s := range slots {
		zone[s.Name] = s.Zone
	}
	firsts := map[string]int{}
	for i := int32(0); i < 12; i++ {
		set, err := spreadReplicas(slots, i, 3)
		if err != nil {
			t.Fatal(err)
		}
		zones := map[string]bool{}
		names := map[string]bool{}
		for _, n := range set {
			zones[zone[n]], names[n] = true, true
		}
		if len(names) != 3 || len(zones) != 3 {
			t.Fatalf("shard %d: %v spans %d brokers and %d zones; want 3 and 3", i, set, len(names), len(zones))
		}
		again, _ := spreadReplicas(slots, i, 3)
		if strings.Join(again, ",") != strings.Join(set, ",") {
			t.Fatalf("not deterministic: %v then %v", set, again)
		}
		firsts[set[0]]++
	}
	for _, s := range slots {
		if firsts[s.Name] != 2 {
			t.Fatalf("first replicas (leaders) %v; want each broker twice", firsts)
		}
	}
	// Without zone labels it still spreads over distinct brokers.
	plain := []brokerSlot{{"x-2", ""}, {"x-0", ""}, {"x-1", ""}}
	if set, _ := spreadReplicas(plain, 1, 3); strings.Join(set, ",") != "x-1,x-2,x-0" {
		t.Fatalf("no zones: %v", set)
	}
	var short *errNotEnoughBrokers
	if _, err := spreadReplicas(plain, 0, 5); !errors.As(err, &short) || short.Brokers != 3 {
		t.Fatalf("5 replicas on 3 brokers: %v", err)
	}
}

// TestSpread_StreamsStartAtDifferentBrokers: the first shards of many
// single-shard streams, the preferred leaders, spread over the brokers
// rather than all landing on the first; at most ceil(streams/brokers)+1
// per broker for this fixed set of names.
func TestSpread_StreamsStartAtDifferentBrokers(t *testing.T) {
	slots := []brokerSlot{{"c-0", ""}, {"c-1", ""}, {"c-2", ""}, {"c-3", ""}, {"c-4", ""}}
	firsts := map[string]int{}
	const streams = 50
	for i := 0; i < streams; i++ {
		name := fmt.Sprintf("orders-%d", i)
		set, err := spreadReplicas(slots, streamOffset(name, len(slots)), 3)
		if err != nil {
			t.Fatal(err)
		}
		firsts[set[0]]++
	}
	limit := (streams+len(slots)-1)/len(slots) + 1
	for _, s := range slots {
		if firsts[s.Name] == 0 || firsts[s.Name] > limit+3 {
			t.Fatalf("first replicas of %d streams per broker %v; want every broker near %d", streams, firsts, streams/len(slots))
		}
	}
	for n := 1; n <= 7; n++ {
		if o := streamOffset("events", n); o < 0 || int(o) >= n {
			t.Fatalf("streamOffset(events, %d) = %d, outside [0, %d)", n, o, n)
		}
	}
	if streamOffset("x", 0) != 0 {
		t.Fatal("streamOffset with no brokers is not 0")
	}
}

func TestCluster_StatusConditions(t *testing.T) {
	up := func(n string) brokerObservation {
		return brokerObservation{Name: n, State: felixv1.BrokerUp, Incarnation: 1}
	}
	tests := []struct {
		name                    string
		obs                     clusterObservation
		ready, progressing, deg bool
		reason                  string
	}{
		{"all up", clusterObservation{Desired: 2, Brokers: []brokerObservation{up("a"), up("b")}}, true, false, false, "Reconciled"},
		{"creating", clusterObservation{Desired: 2, Created: 3, Brokers: []brokerObservation{up("a"), {Name: "b"}}}, false, true, false, "CreatingBrokers"},
		{"unregistered", clusterObservation{Desired: 2, Brokers: []brokerObservation{up("a"), {Name: "b", State: felixv1.BrokerUp}}}, false, true, false, "WaitingForRegistration"},
		{"one down", clusterObservation{Desired: 2, Brokers: []brokerObservation{up("a"), {Name: "b", State: felixv1.BrokerDown, Incarnation: 2}}}, false, false, true, "Reconciled"},
		{"scale-down blocked", clusterObservation{Desired: 1, Brokers: []brokerObservation{up("a")}, Blocked: map[string][]string{"b": {"s-0"}}}, false, false, true, "ScaleDownBlocked"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, conds := clusterStatus(tt.obs)
			got := map[string]metav1.Condition{}
			for _, c := range conds {
				got[c.Type] = c
			}
			check := func(typ string, want bool) {
				if (got[typ].Status == metav1.ConditionTrue) != want {
					t.Errorf("%s = %s (%s); want %v", typ, got[typ].Status, got[typ].Message, want)
				}
			}
			check(felixv1.ConditionReady, tt.ready)
			check(felixv1.ConditionProgressing, tt.progressing)
			check(felixv1.ConditionDegraded, tt.deg)
			if got[felixv1.ConditionProgressing].Reason != tt.reason {
				t.Errorf("Progressing reason %s; want %s", got[felixv1.ConditionProgressing].Reason, tt.reason)
			}
		})
	}
}

func TestCP1_CaughtUpCountsOnlyRegisteredIDs(t *testing.T) {
	ids := map[string]string{"a": "aa", "b": "bb", "c": "cc", "d": "dd"}
	shard := func(rep *felixv1.ShardReport) *felixv1.FelixShard {
		return &felixv1.FelixShard{
			Spec:   felixv1.FelixShardSpec{Replicas: []string{"a", "b", "c"}},
			Status: felixv1.FelixShardStatus{Assignment: &felixv1.Assignment{Leader: "a", Epoch: 2}, Report: rep},
		}
	}
	f := func(n, id string, up bool) felixv1.FollowerReport {
		return felixv1.FollowerReport{Name: n, StorageID: id, CaughtUp: up}
	}
	tests := []struct {
		name string
		rep  *felixv1.ShardReport
		want int
	}{
		{"no report", nil, 0},
		{"old epoch", &felixv1.ShardReport{Leader: "a", LeaderStorageID: "aa", Epoch: 1, Followers: []felixv1.FollowerReport{f("b", "bb", true)}}, 0},
		{"other leader", &felixv1.ShardReport{Leader: "b", LeaderStorageID: "bb", Epoch: 2}, 0},
		{"leader only", &felixv1.ShardReport{Leader: "a", LeaderStorageID: "aa", Epoch: 2}, 1},
		{"all matching", &felixv1.ShardReport{Leader: "a", LeaderStorageID: "aa", Epoch: 2, Followers: []felixv1.FollowerReport{f("b", "bb", true), f("c", "cc", true)}}, 3},
		{"different id", &felixv1.ShardReport{Leader: "a", LeaderStorageID: "aa", Epoch: 2, Followers: []felixv1.FollowerReport{f("b", "bb", true), f("c", "old", true)}}, 2},
		{"missing id", &felixv1.ShardReport{Leader: "a", LeaderStorageID: "aa", Epoch: 2, Followers: []felixv1.FollowerReport{f("b", "", true)}}, 1},
		{"not caught up", &felixv1.ShardReport{Leader: "a", LeaderStorageID: "aa", Epoch: 2, Followers: []felixv1.FollowerReport{f("b", "bb", false)}}, 1},
		{"leader wiped since", &felixv1.ShardReport{Leader: "a", LeaderStorageID: "old", Epoch: 2, Followers: []felixv1.FollowerReport{f("b", "bb", true), f("c", "cc", true)}}, 0},
		{"leader id missing", &felixv1.ShardReport{Leader: "a", Epoch: 2, Followers: []felixv1.FollowerReport{f("b", "bb", true)}}, 0},
		{"not a replica", &felixv1.ShardReport{Leader: "a", LeaderStorageID: "aa", Epoch: 2, Followers: []felixv1.FollowerReport{f("d", "dd", true)}}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := caughtUpCount(shard(tt.rep), ids); got != tt.want {
				t.Fatalf("caughtUpCount = %d; want %d", got, tt.want)
			}
		})
	}
}

// TestCP2_ReportTimeAttestedOnlyByItsLeader: a leader's "current" renewal
// vouches for its report (keeps it alive) only when it is the assigned
// leader at the assigned epoch and attested at the report's incarnation,
// after the write; it never moves the time the view was taken.
func TestCP2_ReportTimeAttestedOnlyByItsLeader(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	written := metav1.NewTime(t0)
	mk := func(repLeader string, repEpoch, repInc int64) *felixv1.FelixShard {
		return &felixv1.FelixShard{
			ObjectMeta: metav1.ObjectMeta{ManagedFields: []metav1.ManagedFieldsEntry{{Manager: controlplane.FieldManager, Subresource: "status", Time: &written}}},
			Status: felixv1.FelixShardStatus{
				Assignment: &felixv1.Assignment{Leader: "a", Epoch: 3, LeaderIncarnation: 5},
				Report:     &felixv1.ShardReport{Leader: repLeader, Epoch: repEpoch, LeaderIncarnation: repInc, TakenAt: metav1.NewTime(t0.Add(-time.Hour))},
			},
		}
	}
	later := t0.Add(time.Minute)
	hb := Heartbeat{AttestedAt: later, AttestedIncarnation: 5}
	tests := []struct {
		name string
		sh   *felixv1.FelixShard
		hb   Heartbeat
		ok   bool
		want time.Time
	}{
		{"attested", mk("a", 3, 5), hb, true, later},
		{"no heartbeat seen", mk("a", 3, 5), hb, false, time.Time{}},
		{"old epoch", mk("a", 2, 5), hb, true, time.Time{}},
		{"not the assigned leader", mk("b", 3, 5), hb, true, time.Time{}},
		{"other incarnation", mk("a", 3, 4), hb, true, time.Time{}},
		{"attested before the write", mk("a", 3, 5), Heartbeat{AttestedAt: t0.Add(-time.Second), AttestedIncarnation: 5}, true, time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := reportVouchedAt(tt.sh, tt.hb, tt.ok); !got.Equal(tt.want) {
				t.Fatalf("reportVouchedAt = %s; want %s", got, tt.want)
			}
			if got := reportWrittenAt(tt.sh); !got.Equal(t0) {
				t.Fatalf("reportWrittenAt = %s; want the write's time %s whatever the renewals", got, t0)
			}
		})
	}
}

// TestCP1_RegistrationTimeRoundsUp: API times are whole seconds, so a
// registration stored at second s happened before s+1; a report written
// in the same second is not known to be taken after it.
func TestCP1_RegistrationTimeRoundsUp(t *testing.T) {
	s := time.Date(2026, 1, 1, 0, 0, 7, 0, time.UTC)
	b := &felixv1.FelixBroker{Status: felixv1.FelixBrokerStatus{RegisteredAt: &metav1.Time{Time: s}}}
	got := registryEntry(b, Heartbeat{}, false).RegisteredAt
	if !got.Equal(s.Add(time.Second)) {
		t.Fatalf("RegisteredAt = %s; want the end of its second %s", got, s.Add(time.Second))
	}
	sameSecond := s // a report written in the registration's second
	if !sameSecond.Before(got) {
		t.Fatalf("a report written in the registration's second counts as taken after it")
	}
}

func TestTR7_FencedStreamRefusesRetention(t *testing.T) {
	day := &metav1.Duration{Duration: 24 * time.Hour}
	tests := []struct {
		name   string
		spec   felixv1.FelixStreamSpec
		refuse bool
	}{
		{"fenced, retention off", felixv1.FelixStreamSpec{Fenced: true}, false},
		{"fenced, empty retention", felixv1.FelixStreamSpec{Fenced: true, Retention: &felixv1.RetentionSpec{}}, false},
		{"fenced, max age", felixv1.FelixStreamSpec{Fenced: true, Retention: &felixv1.RetentionSpec{MaxAge: day}}, true},
		{"not fenced, max age", felixv1.FelixStreamSpec{Retention: &felixv1.RetentionSpec{MaxAge: day}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := fencedWithRetention(&felixv1.FelixStream{Spec: tt.spec}); got != tt.refuse {
				t.Fatalf("fencedWithRetention = %v; want %v", got, tt.refuse)
			}
		})
	}
}
