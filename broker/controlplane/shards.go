package controlplane

import (
	"context"
	"fmt"
	"slices"
	"sort"

	"k8s.io/apimachinery/pkg/labels"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	felixv1 "felix.dev/felix/api/v1alpha1"
)

// labelCluster is the FelixShard label naming the cluster (the operator's
// controllers.LabelCluster).
const labelCluster = "felix.dev/cluster"

// Assignment is one shard this broker holds a replica of, with the
// operator's decision of who leads it. A broker acts only on it: it leads
// exactly when Leader is itself at its current incarnation, fencing at
// Epoch first.
type Assignment struct {
	Shard    string
	Stream   string
	Index    int32
	Replicas []string
	// Leader, Epoch and LeaderIncarnation are empty/zero before the
	// operator assigned the shard.
	Leader            string
	Epoch             int64
	LeaderIncarnation int64
	// Counted maps each replica that may count towards the leader's
	// recovery and fence quorums to the storage id it was counted under.
	Counted map[string]string
	// Report is the stored report (nil if none), so a leader can see
	// whether its last write is the one in place.
	Report *felixv1.ShardReport
	// StreamSpec is the spec of the shard's stream as the watch last saw
	// it (ack mode, retention, fencing); nil when the watch has not seen
	// the stream yet (read it from the API server). Shards of one stream
	// share it: read only.
	StreamSpec *felixv1.FelixStreamSpec
	// StreamDeleting: the shard's stream is being deleted (its
	// deletionTimestamp is set; the operator's finalizer keeps it until
	// the shard's leader has trimmed the shard's log empty).
	StreamDeleting bool
}

// ShardWatcher watches the FelixShards of the broker's cluster, and the
// specs of the cluster's FelixStreams (retention and fencing apply to their
// shards).
type ShardWatcher struct {
	c       *Client
	cache   cache.Cache
	changed chan struct{}
}

// NewShardWatcher returns a watcher; call Run, then WaitForSync before
// trusting Assignments (a restarting broker learns the current epochs
// before it accepts any shipping).
func (c *Client) NewShardWatcher() (*ShardWatcher, error) {
	sel := labels.SelectorFromSet(labels.Set{labelCluster: c.cfg.Cluster})
	ca, err := cache.New(c.cfg.REST, cache.Options{
		Scheme:            NewScheme(),
		DefaultNamespaces: map[string]cache.Config{c.cfg.Namespace: {}},
		ByObject:          map[client.Object]cache.ByObject{&felixv1.FelixShard{}: {Label: sel}},
	})
	if err != nil {
		return nil, fmt.Errorf("controlplane: shard cache: %w", err)
	}
	w := &ShardWatcher{c: c, cache: ca, changed: make(chan struct{}, 1)}
	return w, nil
}

// Run watches until ctx ends.
func (w *ShardWatcher) Run(ctx context.Context) error {
	inf, err := w.cache.GetInformer(ctx, &felixv1.FelixShard{}, cache.BlockUntilSynced(false))
	if err != nil {
		return err
	}
	notify := func(any) { w.signal() }
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    notify,
		UpdateFunc: func(_, n any) { w.signal() },
		DeleteFunc: notify,
	}); err != nil {
		return err
	}
	// A stream's spec (retention, fencing, ack mode) applies to its shards:
	// a spec change of a stream of this cluster is a change too.
	sinf, err := w.cache.GetInformer(ctx, &felixv1.FelixStream{}, cache.BlockUntilSynced(false))
	if err != nil {
		return err
	}
	if _, err := sinf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(o any) {
			if w.ours(o) {
				w.signal()
			}
		},
		UpdateFunc: func(o, n any) {
			if w.ours(n) && (specChanged(o, n) || deletionStarted(o, n)) {
				w.signal()
			}
		},
	}); err != nil {
		return err
	}
	return w.cache.Start(ctx)
}

// ours reports whether o is a FelixStream of the broker's cluster.
func (w *ShardWatcher) ours(o any) bool {
	s, ok := o.(*felixv1.FelixStream)
	return ok && s.Spec.Cluster == w.c.cfg.Cluster
}

// specChanged reports whether an update changed the stream's spec (its
// generation); status updates are not changes for the broker.
func specChanged(o, n any) bool {
	a, ok1 := o.(*felixv1.FelixStream)
	b, ok2 := n.(*felixv1.FelixStream)
	return !ok1 || !ok2 || a.Generation != b.Generation
}

// deletionStarted reports whether an update set the stream's
// deletionTimestamp.
func deletionStarted(o, n any) bool {
	a, ok1 := o.(*felixv1.FelixStream)
	b, ok2 := n.(*felixv1.FelixStream)
	return ok1 && ok2 && (a.DeletionTimestamp == nil) != (b.DeletionTimestamp == nil)
}

func (w *ShardWatcher) signal() {
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// WaitForSync waits until the first list has arrived.
func (w *ShardWatcher) WaitForSync(ctx context.Context) bool { return w.cache.WaitForCacheSync(ctx) }

// Changed receives (coalesced) after any shard of the cluster changed, or
// the spec of one of its streams.
func (w *ShardWatcher) Changed() <-chan struct{} { return w.changed }

// Assignments lists the shards whose replica set holds this broker, by
// name.
func (w *ShardWatcher) Assignments(ctx context.Context) ([]Assignment, error) {
	var list felixv1.FelixShardList
	if err := w.cache.List(ctx, &list, client.InNamespace(w.c.cfg.Namespace)); err != nil {
		return nil, err
	}
	var streams felixv1.FelixStreamList
	if err := w.cache.List(ctx, &streams, client.InNamespace(w.c.cfg.Namespace)); err != nil {
		return nil, err
	}
	specs := make(map[string]*felixv1.FelixStreamSpec, len(streams.Items))
	deleting := map[string]bool{}
	for i := range streams.Items {
		specs[streams.Items[i].Name] = &streams.Items[i].Spec
		if streams.Items[i].DeletionTimestamp != nil {
			deleting[streams.Items[i].Name] = true
		}
	}
	var out []Assignment
	for _, s := range list.Items {
		if !slices.Contains(s.Spec.Replicas, w.c.cfg.Broker) {
			continue
		}
		a := Assignment{Shard: s.Name, Stream: s.Spec.Stream, Index: s.Spec.Index, Replicas: slices.Clone(s.Spec.Replicas), Report: s.Status.Report.DeepCopy()}
		a.StreamSpec = specs[s.Spec.Stream]
		a.StreamDeleting = deleting[s.Spec.Stream]
		if as := s.Status.Assignment; as != nil {
			a.Leader, a.Epoch, a.LeaderIncarnation = as.Leader, as.Epoch, as.LeaderIncarnation
			a.Counted = make(map[string]string, len(as.Counted))
			for _, c := range as.Counted {
				a.Counted[c.Name] = c.StorageID
			}
		}
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Shard < out[j].Shard })
	return out, nil
}

// ClusterShards lists the FelixShards of the broker's cluster from the
// watch's cache, whether or not this broker holds a replica of them: of
// the named streams only when any are named. Ordered by stream, then
// index. The objects are copies the caller may keep: the cache's List
// already deep-copies what it returns, so they are filtered in place.
func (w *ShardWatcher) ClusterShards(ctx context.Context, streams []string) ([]felixv1.FelixShard, error) {
	var list felixv1.FelixShardList
	if err := w.cache.List(ctx, &list, client.InNamespace(w.c.cfg.Namespace)); err != nil {
		return nil, err
	}
	out := list.Items[:0]
	for _, s := range list.Items {
		if len(streams) > 0 && !slices.Contains(streams, s.Spec.Stream) {
			continue
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Spec.Stream != out[j].Spec.Stream {
			return out[i].Spec.Stream < out[j].Spec.Stream
		}
		return out[i].Spec.Index < out[j].Spec.Index
	})
	return out, nil
}
