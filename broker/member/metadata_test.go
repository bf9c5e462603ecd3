package member

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/replication"
	"felix.dev/felix/broker/wire"
)

type fakeShards []felixv1.FelixShard

func (f fakeShards) ClusterShards(_ context.Context, streams []string) ([]felixv1.FelixShard, error) {
	var out []felixv1.FelixShard
	for _, s := range f {
		if len(streams) == 0 || s.Spec.Stream == streams[0] {
			out = append(out, s)
		}
	}
	return out, nil
}

func fshard(stream string, index int32, replicas []string, leader string, epoch int64) felixv1.FelixShard {
	s := felixv1.FelixShard{ObjectMeta: metav1.ObjectMeta{Name: stream}, Spec: felixv1.FelixShardSpec{Stream: stream, Index: index, Replicas: replicas}}
	if epoch > 0 {
		s.Status.Assignment = &felixv1.Assignment{Leader: leader, Epoch: epoch}
	}
	return s
}

// TestMetadataFromAssignments: shards carry the operator's assignment
// (none before one is made), brokers are every replica named and this
// broker, with their registered addresses; an address that cannot be
// read is empty.
func TestMetadataFromAssignments(t *testing.T) {
	addrs := map[string]string{"b-0": "10.0.0.1:7100", "b-1": "10.0.0.2:7100"}
	m := &metadata{
		shards: fakeShards{
			fshard("orders", 0, []string{"b-0", "b-1"}, "b-1", 3),
			fshard("orders", 1, []string{"b-1", "b-2"}, "", 0),
		},
		self: "b-3",
		addrs: newAddrCache(func(n replication.NodeID) (string, error) {
			if a, ok := addrs[string(n)]; ok {
				return a, nil
			}
			return "", errors.New("not registered")
		}, time.Now),
	}
	ctx := context.Background()
	shards, err := m.Shards(ctx, []string{"orders"})
	if err != nil {
		t.Fatal(err)
	}
	want := []wire.ShardInfo{
		{Shard: record.ShardID{Stream: "orders", Shard: 0}, Leader: "b-1", Epoch: 3, Replicas: []string{"b-0", "b-1"}},
		{Shard: record.ShardID{Stream: "orders", Shard: 1}, Replicas: []string{"b-1", "b-2"}},
	}
	if diff := cmp.Diff(want, shards); diff != "" {
		t.Fatalf("shards (-want +got):\n%s", diff)
	}
	brokers, err := m.Brokers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantB := []wire.BrokerInfo{{Name: "b-0", Address: "10.0.0.1:7100"}, {Name: "b-1", Address: "10.0.0.2:7100"}, {Name: "b-2"}, {Name: "b-3"}}
	if diff := cmp.Diff(wantB, brokers); diff != "" {
		t.Fatalf("brokers (-want +got):\n%s", diff)
	}
}

// TestAddrCacheRereadsAfterItsTTL: an address is read once per addrTTL;
// a failed read keeps the last address known.
func TestAddrCacheRereadsAfterItsTTL(t *testing.T) {
	now := time.Unix(1000, 0)
	reads := 0
	answer, fail := "10.0.0.1:7100", false
	c := newAddrCache(func(replication.NodeID) (string, error) {
		reads++
		if fail {
			return "", errors.New("api down")
		}
		return answer, nil
	}, func() time.Time { return now })
	for _, step := range []struct {
		advance   time.Duration
		answer    string
		fail      bool
		want      string
		wantReads int
	}{
		{0, "10.0.0.1:7100", false, "10.0.0.1:7100", 1},
		{addrTTL / 2, "10.0.0.9:7100", false, "10.0.0.1:7100", 1},
		{addrTTL, "10.0.0.9:7100", false, "10.0.0.9:7100", 2},
		{addrTTL, "", true, "10.0.0.9:7100", 3},
	} {
		now = now.Add(step.advance)
		answer, fail = step.answer, step.fail
		if got := c.get("b-0"); got != step.want || reads != step.wantReads {
			t.Fatalf("after %v: %q with %d reads, want %q with %d", step.advance, got, reads, step.want, step.wantReads)
		}
	}
}

// TestResolverKeepsToItsCluster: a broker name resolves only to a
// FelixBroker of this broker's cluster. Two clusters share a namespace
// (a cluster restored from another's backup beside it): a name of the
// other cluster is never hinted to a client or dialled as a peer, because
// its certificates come from another CA and its data is another log.
func TestResolverKeepsToItsCluster(t *testing.T) {
	fb := func(name, cluster, addr string) *felixv1.FelixBroker {
		return &felixv1.FelixBroker{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
			Spec:       felixv1.FelixBrokerSpec{Cluster: cluster},
			Status:     felixv1.FelixBrokerStatus{Address: addr, PeerAddress: addr},
		}
	}
	scheme := runtime.NewScheme()
	if err := felixv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	cl := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		fb("restored-0", "restored", "10.0.0.1:7100"), fb("demo-1", "demo", "10.0.0.9:7100")).Build()
	r := resolver{reader: cl, namespace: "ns", cluster: "restored", log: logr.Discard()}
	if a, err := r.clientAddr("restored-0"); err != nil || a != "10.0.0.1:7100" {
		t.Fatalf("own broker: %q, %v", a, err)
	}
	for name, get := range map[string]func(replication.NodeID) (string, error){"client": r.clientAddr, "peer": r.resolve} {
		if a, err := get("demo-1"); !errors.Is(err, errOtherCluster) {
			t.Errorf("%s address of another cluster's broker: %q, %v; want errOtherCluster", name, a, err)
		}
	}
}
