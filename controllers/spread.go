package controllers

import (
	"fmt"
	"hash/fnv"
	"sort"
)

// brokerSlot is a broker available for replicas and the zone its pod's
// node is in ("" when unknown).
type brokerSlot struct {
	Name string
	Zone string
}

// errNotEnoughBrokers is returned by spreadReplicas when a stream asks for
// more replicas than the cluster has brokers.
type errNotEnoughBrokers struct {
	Replicas, Brokers int
}

func (e *errNotEnoughBrokers) Error() string {
	return fmt.Sprintf("%d replicas need %d distinct brokers; the cluster has %d", e.Replicas, e.Replicas, e.Brokers)
}

// spreadOrder interleaves brokers across zones: zones sorted by name,
// brokers in each zone sorted by name, then one broker from each zone in
// turn. Any window of consecutive entries then touches as many zones as
// it can (exactly so when zones are balanced).
func spreadOrder(brokers []brokerSlot) []string {
	byZone := map[string][]string{}
	for _, b := range brokers {
		byZone[b.Zone] = append(byZone[b.Zone], b.Name)
	}
	zones := make([]string, 0, len(byZone))
	for z, names := range byZone {
		sort.Strings(names)
		zones = append(zones, z)
	}
	sort.Strings(zones)
	out := make([]string, 0, len(brokers))
	for round := 0; len(out) < len(brokers); round++ {
		for _, z := range zones {
			if round < len(byZone[z]) {
				out = append(out, byZone[z][round])
			}
		}
	}
	return out
}

// spreadReplicas returns the replica set of shard index of a stream with
// the given replication factor: a window of the interleaved order starting
// at the shard's index, so replicas land on distinct brokers (and zones
// when nodes carry zone labels) and the first replica, the first leader,
// rotates across brokers. It is deterministic: the same brokers and index
// give the same set.
func spreadReplicas(brokers []brokerSlot, index int32, replicas int) ([]string, error) {
	if replicas > len(brokers) {
		return nil, &errNotEnoughBrokers{Replicas: replicas, Brokers: len(brokers)}
	}
	order := spreadOrder(brokers)
	out := make([]string, 0, replicas)
	for k := 0; k < replicas; k++ {
		out = append(out, order[(int(index)+k)%len(order)])
	}
	return out, nil
}

// streamOffset is where a stream's shard 0 starts in the interleaved
// broker order: a hash of the stream's name, so that the first shards of
// many streams (each one a preferred leader) spread over the brokers
// instead of all starting on the first. Deterministic, like the sets.
func streamOffset(stream string, brokers int) int32 {
	if brokers <= 0 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(stream))
	return int32(h.Sum32() % uint32(brokers))
}
