package placement

import (
	"math/rand"
	"reflect"
	"testing"
	"testing/quick"
	"time"
)

type randomInput struct{ In Input }

// Generate builds small shards with ids that often match, differ or are
// missing, reports of any age and leaders in any state.
func (randomInput) Generate(r *rand.Rand, _ int) reflect.Value {
	names := []string{"a", "b", "c", "d", "e"}[:3+2*r.Intn(2)]
	ids := []string{"", "X", "Y"}
	in := Input{Replicas: names, Brokers: map[string]Broker{}, Now: t0.Add(time.Duration(r.Intn(60)) * time.Second),
		NodeExpiry: expiry, Heartbeat: hb}
	for _, n := range names {
		if r.Intn(8) == 0 {
			continue // unregistered
		}
		in.Brokers[n] = Broker{StorageID: n + ids[r.Intn(3)], Incarnation: uint64(1 + r.Intn(3)),
			RegisteredAt: t0.Add(time.Duration(r.Intn(20)-10) * time.Second), State: BrokerState(1 + r.Intn(3)),
			LastHeartbeat: t0.Add(time.Duration(r.Intn(40)) * time.Second)}
		if b := in.Brokers[n]; b.StorageID == n {
			b.StorageID = ""
			in.Brokers[n] = b
		}
	}
	if r.Intn(6) == 0 {
		return reflect.ValueOf(randomInput{in})
	}
	leader := names[r.Intn(len(names))]
	in.Assignment = &Assignment{Leader: leader, Epoch: uint64(1 + r.Intn(5)), LeaderIncarnation: uint64(1 + r.Intn(3)),
		Counted: map[string]string{}}
	for _, n := range names {
		if r.Intn(2) == 0 {
			in.Assignment.Counted[n] = n + ids[1+r.Intn(2)]
		}
	}
	if r.Intn(5) != 0 {
		rep := &Report{Leader: leader, LeaderIncarnation: uint64(1 + r.Intn(3)), LeaderStorageID: leader + ids[r.Intn(3)],
			Epoch: in.Assignment.Epoch, TakenAt: t0, Position: 10}
		if r.Intn(4) != 0 { // else an older broker's report, without ViewAt
			rep.ViewAt = t0.Add(-time.Duration(r.Intn(3000)) * time.Millisecond)
		}
		in.MaxClockSkew = time.Duration(r.Intn(3)) * 500 * time.Millisecond
		if r.Intn(2) == 0 {
			rep.VouchedAt = t0.Add(time.Duration(r.Intn(40)-5) * time.Second)
		}
		for _, n := range names {
			if n != leader && r.Intn(4) != 0 {
				rep.Followers = append(rep.Followers, FollowerReport{Broker: n, StorageID: n + ids[r.Intn(3)],
					CaughtUp: r.Intn(3) != 0, Confirmed: uint64(r.Intn(20))})
			}
		}
		for i := range rep.Followers {
			if rep.Followers[i].StorageID == rep.Followers[i].Broker {
				rep.Followers[i].StorageID = ""
			}
		}
		in.Report = rep
	}
	return reflect.ValueOf(randomInput{in})
}

// TestCP_DecisionProperties checks, over random inputs, what every
// decision must respect: a promoted leader is an Up replica at its current
// incarnation, the epoch is the next one, a promoted follower's reported id
// is its registered id when both are present, never missing from the
// report when registered, and when the registry has none the report was
// taken at its current incarnation and is fresh [CP-1], every counted id is the replica's registered id, the
// counted replicas are a quorum (else the new leader could never fence),
// a wait has a reason [CP-3], and the decision is deterministic.
func TestCP_DecisionProperties(t *testing.T) {
	f := func(ri randomInput) bool {
		in := ri.In
		d := Decide(in)
		if !reflect.DeepEqual(d, Decide(in)) {
			t.Log("not deterministic")
			return false
		}
		switch d.Action {
		case Wait:
			return in.Assignment == nil || d.Reason != ReasonNone
		case Keep:
			b, ok := in.Brokers[d.Leader]
			return in.Assignment != nil && ok && b.State == Up && b.Incarnation == in.Assignment.LeaderIncarnation
		}
		b, ok := in.Brokers[d.Leader]
		if !ok || b.State != Up || d.LeaderIncarnation != b.Incarnation {
			t.Logf("promoted a replica that is not Up at its incarnation: %+v", d)
			return false
		}
		for n, id := range d.Counted {
			if rb, ok := in.Brokers[n]; !ok || rb.StorageID != id {
				t.Logf("counted %s under %q, registered %+v", n, id, rb)
				return false
			}
		}
		if holding(in, d.Counted) < quorum(in.Replicas) {
			t.Logf("promoted %s counting %v, fewer than a quorum: it could never fence", d.Leader, d.Counted)
			return false
		}
		if in.Assignment == nil {
			return d.Epoch == 1
		}
		if d.Epoch != in.Assignment.Epoch+1 {
			return false
		}
		if rep := in.Report; rep != nil && d.Leader != rep.Leader && d.Reason != ReasonLeaderRestarted {
			for _, f := range rep.Followers {
				if f.Broker != d.Leader {
					continue
				}
				if b.StorageID != "" && f.StorageID != "" && f.StorageID != b.StorageID {
					t.Logf("promoted %s reported under %q, registered %q", d.Leader, f.StorageID, b.StorageID)
					return false
				}
				if b.StorageID != "" && f.StorageID == "" {
					t.Logf("promoted %s registered under %q, its report names no id", d.Leader, b.StorageID)
					return false
				}
				vouched := rep.TakenAt
				if rep.VouchedAt.After(vouched) {
					vouched = rep.VouchedAt
				}
				if (b.StorageID == "" || f.StorageID == "") &&
					(rep.TakenAt.Before(b.RegisteredAt) || in.Now.Sub(vouched) > ReportExpiry(in.NodeExpiry, in.Heartbeat) ||
						rep.ViewAt.IsZero() || rep.ViewAt.Add(-in.MaxClockSkew).Before(b.RegisteredAt)) {
					t.Logf("promoted %s (id missing on a side) from a report not fresh at its incarnation: %+v", d.Leader, rep)
					return false
				}
			}
		}
		return true
	}
	if err := quick.Check(f, &quick.Config{MaxCount: 20000, Rand: rand.New(rand.NewSource(7))}); err != nil {
		t.Fatal(err)
	}
}
