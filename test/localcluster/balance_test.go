package localcluster_test

import (
	"fmt"
	"slices"
	"strings"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	felixv1 "felix.dev/felix/api/v1alpha1"
)

// scenarioLeaderBalance: a 5-broker cluster whose brokers start at
// different times, and a 10-shard stream on it. Within a bounded time
// every shard is led by its preferred replica and no broker leads more
// than ceil(10/5)+1 = 3 shards; after the broker that leads the most is
// frozen past its expiry its shards fail over, and once it is thawed and
// caught up it leads them again, through planned promotions (Switchover
// events).
func scenarioLeaderBalance(tn *tenant) {
	t := tn.t
	const shards, stream = 10, "spread"
	limit := (shards+tn.brokers-1)/tn.brokers + 1
	var c felixv1.FelixCluster
	if err := tn.get(tn.cluster, &c); err != nil {
		t.Fatal(err)
	}
	c.Spec.LeaderBalance = felixv1.LeaderBalanceSpec{Mode: felixv1.LeaderBalancePreferred, SettleTime: &metav1.Duration{Duration: 3 * time.Second}}
	if err := tn.c.Update(tn.ctx, &c); err != nil {
		t.Fatal(err)
	}
	// Replica sets are drawn from the FelixBrokers that exist when the
	// stream is placed; wait for all five (registered or not: those not
	// yet up are why first leaders pile up on the early brokers).
	eventually(t, "every FelixBroker created", 2*time.Minute, func() (bool, string) {
		var list felixv1.FelixBrokerList
		if err := tn.c.List(tn.ctx, &list, client.InNamespace(tn.ns)); err != nil {
			return false, err.Error()
		}
		return len(list.Items) == tn.brokers, fmt.Sprintf("%d FelixBrokers", len(list.Items))
	})
	if err := tn.c.Create(tn.ctx, &felixv1.FelixStream{ObjectMeta: metav1.ObjectMeta{Name: stream, Namespace: tn.ns},
		Spec: felixv1.FelixStreamSpec{Cluster: tn.cluster, Shards: shards, Replicas: 3, Ack: felixv1.AckQuorum}}); err != nil {
		t.Fatal(err)
	}
	// leaders counts each broker's led shards, and says whether every
	// shard is led by its preferred replica.
	leaders := func() (map[string]int, bool, string) {
		var list felixv1.FelixShardList
		if err := tn.c.List(tn.ctx, &list, client.InNamespace(tn.ns), client.MatchingLabels{"felix.dev/stream": stream}); err != nil {
			return nil, false, err.Error()
		}
		led := map[string]int{}
		preferred := len(list.Items) == shards
		var state []string
		for _, s := range list.Items {
			a := s.Status.Assignment
			if a == nil {
				preferred = false
				state = append(state, s.Name+": unassigned")
				continue
			}
			led[a.Leader]++
			preferred = preferred && a.Leader == s.Spec.Replicas[0]
			state = append(state, fmt.Sprintf("%s: %s@%d %s (preferred %s)", s.Name, a.Leader, a.Epoch, s.Status.CaughtUp, s.Spec.Replicas[0]))
		}
		slices.Sort(state)
		return led, preferred, fmt.Sprintf("led %v; %s", led, strings.Join(state, ", "))
	}
	balanced := func(extra func(map[string]int) bool) func() (bool, string) {
		return func() (bool, string) {
			led, preferred, state := leaders()
			ok := preferred
			for _, n := range led {
				ok = ok && n <= limit
			}
			return ok && (extra == nil || extra(led)), state
		}
	}
	start := time.Now()
	eventually(t, "every shard led by its preferred replica after the start", 3*time.Minute, balanced(nil))
	led, _, state := leaders()
	t.Logf("after the start (%s): %s", time.Since(start).Round(time.Second), state)

	victim, most := "", 0
	for n, k := range led {
		if k > most || (k == most && n < victim) {
			victim, most = n, k
		}
	}
	before, err := tn.events("Switchover")
	if err != nil {
		t.Fatal(err)
	}
	// Frozen past its expiry, the victim loses its shards to failovers;
	// thawed, it is Up again at the same incarnation and, once its new
	// leaders' reports count it caught up, leads its shards again.
	if err := tn.lc.Runner.Freeze(tn.ns, victim); err != nil {
		t.Fatal(err)
	}
	thawed := false
	defer func() {
		if !thawed {
			_ = tn.lc.Runner.Thaw(tn.ns, victim)
		}
	}()
	eventually(t, victim+"'s shards failed over", 2*time.Minute, func() (bool, string) {
		led, _, state := leaders()
		return led[victim] == 0, state
	})
	if err := tn.lc.Runner.Thaw(tn.ns, victim); err != nil {
		t.Fatal(err)
	}
	thawed = true
	back := time.Now()
	eventually(t, victim+" leads again, every shard led by its preferred replica", 3*time.Minute,
		balanced(func(led map[string]int) bool { return led[victim] > 0 }))
	_, _, state = leaders()
	t.Logf("%s (led %d) frozen past its expiry, its shards failed over; balanced again %s after it thawed: %s", victim, most,
		time.Since(back).Round(time.Second), state)
	eventually(t, "Switchover events for the thawed broker's shards", time.Minute, func() (bool, string) {
		n, err := tn.events("Switchover")
		return err == nil && n > before, fmt.Sprintf("%d (before the freeze %d), %v", n, before, err)
	})
}

// events counts the events of the tenant's namespace with reason.
func (tn *tenant) events(reason string) (int, error) {
	var list eventsv1.EventList
	if err := tn.c.List(tn.ctx, &list, client.InNamespace(tn.ns)); err != nil {
		return 0, err
	}
	n := 0
	for _, e := range list.Items {
		if e.Reason == reason {
			n++
		}
	}
	return n, nil
}
