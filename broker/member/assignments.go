package member

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/broker/controlplane"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/replica"
	"felix.dev/felix/broker/replication"
)

// shardName is the FelixShard name of a shard: <stream>-<index>.
func shardName(s record.ShardID) string {
	return s.Stream + "-" + strconv.FormatUint(uint64(s.Shard), 10)
}

// ackMode maps the API's ack mode to the core's.
func ackMode(m felixv1.AckMode) replication.AckMode {
	switch m {
	case felixv1.AckLeader:
		return replication.AckLeader
	case felixv1.AckAll:
		return replication.AckAll
	default:
		return replication.AckQuorum
	}
}

// toShardReport renders a core report for FelixShard status.report [RP-6].
// Positions and confirmations are those of the data log; CaughtUp is the
// core's verdict over every log. viewAt is when the pass the report
// describes started (replica.Options.OnReport), the lower bound [CP-1]
// needs; zero leaves ViewAt out.
func toShardReport(r replication.Report, viewAt, now time.Time) felixv1.ShardReport {
	out := felixv1.ShardReport{
		Leader:            string(r.Leader),
		LeaderIncarnation: int64(r.LeaderIncarnation),
		LeaderStorageID:   string(r.LeaderStorageID),
		Epoch:             int64(r.Epoch),
		Position:          int64(r.Position[record.LogData]),
		Committed:         int64(r.Position[record.LogData]),
		TakenAt:           metav1.NewTime(now),
	}
	if !viewAt.IsZero() {
		at := metav1.NewMicroTime(viewAt)
		out.ViewAt = &at
	}
	for _, f := range r.Followers {
		out.Followers = append(out.Followers, felixv1.FollowerReport{
			Name:      string(f.Node),
			StorageID: string(f.StorageID),
			Confirmed: int64(f.Confirmed[record.LogData]),
			CaughtUp:  f.CaughtUp,
		})
	}
	return out
}

// assignmentSync applies the operator's FelixShard assignments to the
// replica manager. Brokers act only on assignments.
type assignmentSync struct {
	mgr       *replica.Manager
	reports   *controlplane.ReportWriter
	cp        *controlplane.Client
	reader    client.Reader
	self      string
	namespace string
	log       logr.Logger
	// floors are the deletion trims made here, shared with the reports.
	floors *deletionFloors

	mu      sync.Mutex
	running map[string]record.ShardID // shard name -> id, shards started here
}

// run re-applies assignments whenever the watch sees a change, and on a
// slow timer as a safety net.
func (s *assignmentSync) run(ctx context.Context, w *controlplane.ShardWatcher) {
	t := time.NewTicker(30 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.Changed():
		case <-t.C:
		}
		if err := s.apply(ctx, w); err != nil && ctx.Err() == nil {
			s.log.Error(err, "applying assignments")
		}
	}
}

// apply brings the replica manager in line with the current assignments.
func (s *assignmentSync) apply(ctx context.Context, w *controlplane.ShardWatcher) error {
	as, err := w.Assignments(ctx)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running == nil {
		s.running = map[string]record.ShardID{}
	}
	seen := map[string]bool{}
	var errs []error
	for _, a := range as {
		seen[a.Shard] = true
		if err := s.applyOne(ctx, a); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", a.Shard, err))
		}
	}
	for name, id := range s.running {
		if !seen[name] {
			s.mgr.RemoveShard(id)
			s.reports.Drop(name)
			if s.floors != nil {
				s.floors.drop(name)
			}
			delete(s.running, name)
			s.log.Info("shard removed", "shard", name)
		}
	}
	return errors.Join(errs...)
}

func (s *assignmentSync) applyOne(ctx context.Context, a controlplane.Assignment) error {
	id := record.ShardID{Stream: a.Stream, Shard: uint32(a.Index)}
	if !a.StreamDeleting && s.floors != nil {
		// A stream recreated under the same name reports no old floor.
		s.floors.drop(a.Shard)
	}
	// The watch's copy of the stream, read with the shards (a pass over
	// many shards costs no request); the API server's when the watch has
	// not seen it yet.
	var stream felixv1.FelixStream
	if a.StreamSpec != nil {
		stream.Spec = *a.StreamSpec
	} else if err := s.reader.Get(ctx, client.ObjectKey{Namespace: s.namespace, Name: a.Stream}, &stream); err != nil {
		return fmt.Errorf("read stream %s: %w", a.Stream, err)
	}
	replicas := make([]replication.NodeID, len(a.Replicas))
	for i, r := range a.Replicas {
		replicas[i] = replication.NodeID(r)
	}
	if err := s.mgr.EnsureShard(id, replicas, ackMode(stream.Spec.Ack), 0); err != nil {
		if !errors.Is(err, replica.ErrReplicaSetChanged) {
			return err
		}
		s.mgr.RemoveShard(id)
		if err := s.mgr.EnsureShard(id, replicas, ackMode(stream.Spec.Ack), 0); err != nil {
			return err
		}
	}
	if _, ok := s.running[a.Shard]; !ok {
		s.log.Info("shard started", "shard", a.Shard, "replicas", a.Replicas)
	}
	s.running[a.Shard] = id
	// Retention and fencing before the epoch: a refusal (fenced stream
	// with retention) is logged and counted by the manager and reported
	// here, but the shard still serves.
	policyErr := s.mgr.SetLogPolicy(id, logPolicy(stream.Spec))
	if err := s.applyAssignment(a, id); err != nil {
		return errors.Join(policyErr, err)
	}
	if a.StreamDeleting {
		return errors.Join(policyErr, s.emptyForDeletion(ctx, a, id))
	}
	return policyErr
}

// logPolicy maps a stream's retention and fencing to its data logs'
// policy. Absent limits are off; a non-positive limit is off too.
func logPolicy(spec felixv1.FelixStreamSpec) replica.LogPolicy {
	p := replica.LogPolicy{Fenced: spec.Fenced}
	if r := spec.Retention; r != nil {
		if r.MaxAge != nil && r.MaxAge.Duration > 0 {
			p.Retention.MaxAge = r.MaxAge.Duration
		}
		if r.MaxBytes != nil && r.MaxBytes.Value() > 0 {
			p.Retention.MaxBytes = r.MaxBytes.Value()
		}
	}
	return p
}

// applyAssignment passes the shard's epoch and assignment to the manager.
func (s *assignmentSync) applyAssignment(a controlplane.Assignment, id record.ShardID) error {
	if a.Epoch <= 0 {
		return nil // not assigned yet: the replica waits, serving nothing
	}
	if err := s.mgr.SetKnownEpoch(id, uint64(a.Epoch)); err != nil {
		return err
	}
	counted := make(map[replication.NodeID]replication.StorageID, len(a.Counted))
	for n, sid := range a.Counted {
		counted[replication.NodeID(n)] = replication.StorageID(sid)
	}
	if err := s.mgr.SetAssignment(id, replication.Assignment{
		Leader: replication.NodeID(a.Leader), Epoch: uint64(a.Epoch),
		LeaderIncarnation: uint64(a.LeaderIncarnation), Counted: counted,
	}); err != nil {
		return err
	}
	if a.Leader != s.self {
		s.reports.Drop(a.Shard)
	} else if a.Report != nil && (a.Report.Leader != s.self || a.Report.LeaderIncarnation != s.cp.Incarnation()) {
		// The stored report is not ours: make sure ours is written.
		s.reports.Invalidate(a.Shard)
	}
	return nil
}

// resolver maps a broker name to the addresses it registered: the
// client address (status.address, for NotLeader hints) and the peer
// address (status.peerAddress, dialled for replication).
type resolver struct {
	reader    client.Reader
	namespace string
	// cluster is this broker's FelixCluster: a name resolves only to a
	// FelixBroker of it. Another cluster of the namespace is never a
	// leader to hint or a peer to dial, whatever name reaches us.
	cluster string
	// insecure: peers replicate over the client address (no peer port).
	insecure bool
	log      logr.Logger
}

// errNoPeerAddress: the broker registered no peer address: it predates
// the peer port (or runs insecure), and a secure member does not dial its
// client port for replication.
// errOtherCluster: the name is a FelixBroker of another cluster of the
// namespace.
var errOtherCluster = errors.New("another cluster's broker")

var errNoPeerAddress = errors.New("registered no peer address (an older or insecure broker): not dialable for replication")

func (r resolver) get(n replication.NodeID) (*felixv1.FelixBroker, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var b felixv1.FelixBroker
	if err := r.reader.Get(ctx, client.ObjectKey{Namespace: r.namespace, Name: string(n)}, &b); err != nil {
		return nil, fmt.Errorf("resolve broker %s: %w", n, err)
	}
	if r.cluster != "" && b.Spec.Cluster != r.cluster {
		return nil, fmt.Errorf("resolve broker %s: %w: it belongs to cluster %q, this broker to %q", n, errOtherCluster, b.Spec.Cluster, r.cluster)
	}
	return &b, nil
}

// clientAddr is the address clients reach n on.
func (r resolver) clientAddr(n replication.NodeID) (string, error) {
	b, err := r.get(n)
	if err != nil {
		return "", err
	}
	if b.Status.Address == "" {
		return "", fmt.Errorf("resolve broker %s: no address registered yet", n)
	}
	return b.Status.Address, nil
}

// resolve is the address replication dials n on: its peer address, or,
// insecure, its client address.
func (r resolver) resolve(n replication.NodeID) (string, error) {
	if r.insecure {
		return r.clientAddr(n)
	}
	b, err := r.get(n)
	if err != nil {
		return "", err
	}
	if b.Status.PeerAddress == "" {
		err := fmt.Errorf("resolve broker %s: %w", n, errNoPeerAddress)
		if b.Status.Address != "" {
			r.log.Info("peer not dialable: it registered a client address but no peer address; upgrade it", "peer", string(n), "address", b.Status.Address)
		}
		return "", err
	}
	return b.Status.PeerAddress, nil
}
