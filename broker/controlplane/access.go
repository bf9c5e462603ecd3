package controlplane

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/fields"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/broker/auth"
)

// ErrNotSynced is wrapped by the refusals of AccessWatcher.Authorizer
// before the watch has delivered its first list.
var ErrNotSynced = errors.New("controlplane: access rules not loaded yet")

// ErrStale is wrapped (with ErrNotSynced) by the refusals of
// AccessWatcher.Authorizer once its watch stopped: the table no longer
// follows deletions and revocations, so it is not used.
var ErrStale = errors.New("controlplane: authorization data is stale")

// AccessWatcher keeps an auth.Table current from the control plane: the
// FelixUsers of the broker's namespace whose spec.cluster is the broker's
// cluster (a user's grants, keyed by the FelixUser's name, which is the
// name in its certificate's identity user/<name>), and the broker's
// FelixCluster (spec.security.allowAnonymous and anonymousGrants).
//
// A FelixUser that is deleted, being deleted (deletionTimestamp set) or
// of another cluster is removed from the table, so its certificate is
// refused from the next request on. The table also records each user's
// metadata.uid: a FelixUser deleted and recreated under the same name
// is another uid, and the earlier user's certificates (bound to the old
// uid) stay refused even though the name is known again. A deleted FelixCluster, or one not
// seen yet, allows no anonymous access.
//
// The table is only complete once the first list has arrived
// (WaitForSync, Synced); the broker serves no client before that.
type AccessWatcher struct {
	c     *Client
	cache cache.Cache
	table *auth.Table
	log   logr.Logger

	registered chan struct{} // closed once Run added its handlers
	mu         sync.Mutex
	synced     []toolscache.InformerSynced
	stoppedFns []func() bool // the informers' IsStopped, when they have one
	stopped    atomic.Bool   // Run returned
}

// NewAccessWatcher returns a watcher feeding t; call Run, then
// WaitForSync before serving clients.
func (c *Client) NewAccessWatcher(t *auth.Table) (*AccessWatcher, error) {
	if t == nil {
		return nil, fmt.Errorf("%w: NewAccessWatcher needs a table", ErrConfig)
	}
	ca, err := cache.New(c.cfg.REST, cache.Options{
		Scheme:            NewScheme(),
		DefaultNamespaces: map[string]cache.Config{c.cfg.Namespace: {}},
		ByObject: map[client.Object]cache.ByObject{
			&felixv1.FelixCluster{}: {Field: fields.OneTermEqualSelector("metadata.name", c.cfg.Cluster)},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("controlplane: access cache: %w", err)
	}
	return &AccessWatcher{c: c, cache: ca, table: t, log: c.cfg.Log.WithName("access"), registered: make(chan struct{})}, nil
}

// Table returns the table the watcher feeds.
func (w *AccessWatcher) Table() *auth.Table { return w.table }

// Run watches until ctx ends. Once it has returned (or an informer of
// its stopped), the Authorizer refuses every request with ErrStale.
func (w *AccessWatcher) Run(ctx context.Context) error {
	defer w.stopped.Store(true)
	uinf, err := w.cache.GetInformer(ctx, &felixv1.FelixUser{}, cache.BlockUntilSynced(false))
	if err != nil {
		return err
	}
	ureg, err := uinf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    w.user,
		UpdateFunc: func(_, n any) { w.user(n) },
		DeleteFunc: w.userGone,
	})
	if err != nil {
		return err
	}
	cinf, err := w.cache.GetInformer(ctx, &felixv1.FelixCluster{}, cache.BlockUntilSynced(false))
	if err != nil {
		return err
	}
	creg, err := cinf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    w.cluster,
		UpdateFunc: func(_, n any) { w.cluster(n) },
		DeleteFunc: func(o any) {
			if c := asCluster(o); c == nil || c.Name == w.c.cfg.Cluster {
				w.table.SetAnonymous(nil, false)
				w.log.Info("FelixCluster gone: anonymous access off")
			}
		},
	})
	if err != nil {
		return err
	}
	w.mu.Lock()
	w.synced = []toolscache.InformerSynced{ureg.HasSynced, creg.HasSynced}
	for _, inf := range []any{uinf, cinf} {
		if s, ok := inf.(interface{ IsStopped() bool }); ok {
			w.stoppedFns = append(w.stoppedFns, s.IsStopped)
		}
	}
	w.mu.Unlock()
	close(w.registered)
	return w.cache.Start(ctx)
}

// WaitForSync waits until the first lists of users and of the cluster
// have been applied to the table; false if ctx ended first.
func (w *AccessWatcher) WaitForSync(ctx context.Context) bool {
	select {
	case <-w.registered:
	case <-ctx.Done():
		return false
	}
	w.mu.Lock()
	synced := w.synced
	w.mu.Unlock()
	return toolscache.WaitForCacheSync(ctx.Done(), synced...)
}

// Stale reports whether the watch stopped (Run returned or an informer
// stopped): the table no longer follows the control plane.
func (w *AccessWatcher) Stale() bool {
	if w.stopped.Load() {
		return true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.stoppedFns {
		if s() {
			return true
		}
	}
	return false
}

// Synced reports whether the first lists have been applied and the watch
// is still running (not Stale).
func (w *AccessWatcher) Synced() bool {
	select {
	case <-w.registered:
	default:
		return false
	}
	if w.Stale() {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.synced {
		if !s() {
			return false
		}
	}
	return true
}

// Authorizer returns the table as an auth.Authorizer that refuses every
// request (an error wrapping auth.ErrNotAuthorized and ErrNotSynced,
// which asks the client to retry) and every anonymous connection until
// the watch has synced, and then answers as the table does, until the
// watch stops: from then on every request is refused again (wrapping
// ErrStale too, "authorization data is stale").
func (w *AccessWatcher) Authorizer() auth.Authorizer { return gated{w} }

// gated is the table behind the watch's sync.
type gated struct{ w *AccessWatcher }

var (
	_ auth.Authorizer    = gated{}
	_ auth.AnonymousGate = gated{}
)

func (g gated) Authorize(p auth.Principal, op auth.Operation, stream string) error {
	if g.w.Stale() {
		return fmt.Errorf("%w: %w: %w: the broker's access watch stopped; %s may not %s on stream %q", auth.ErrNotAuthorized, ErrNotSynced, ErrStale, p, op, stream)
	}
	if !g.w.Synced() {
		return fmt.Errorf("%w: %w: %s may not %s on stream %q yet; retry shortly", auth.ErrNotAuthorized, ErrNotSynced, p, op, stream)
	}
	return g.w.table.Authorize(p, op, stream)
}

func (g gated) AnonymousAllowed() bool { return g.w.Synced() && g.w.table.AnonymousAllowed() }

func (w *AccessWatcher) user(o any) {
	u, ok := o.(*felixv1.FelixUser)
	if !ok {
		return
	}
	if u.Spec.Cluster != w.c.cfg.Cluster || u.DeletionTimestamp != nil {
		w.table.Delete(u.Name)
		return
	}
	grants, bad := Grants(u.Spec.Authorization.Grants)
	for _, b := range bad {
		w.log.Info("FelixUser grant names an unknown operation; ignored", "user", u.Name, "operation", b)
	}
	w.table.Set(u.Name, string(u.UID), grants)
	w.log.V(1).Info("user grants", "user", u.Name, "grants", len(grants))
}

func (w *AccessWatcher) userGone(o any) {
	if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	if u, ok := o.(*felixv1.FelixUser); ok {
		w.table.Delete(u.Name)
		w.log.V(1).Info("user removed", "user", u.Name)
	}
}

func asCluster(o any) *felixv1.FelixCluster {
	if d, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	c, _ := o.(*felixv1.FelixCluster)
	return c
}

func (w *AccessWatcher) cluster(o any) {
	c := asCluster(o)
	if c == nil || c.Name != w.c.cfg.Cluster {
		return
	}
	sec := c.Spec.Security
	grants, bad := Grants(sec.AnonymousGrants)
	for _, b := range bad {
		w.log.Info("anonymous grant names an unknown operation; ignored", "operation", b)
	}
	w.table.SetAnonymous(grants, sec.AllowAnonymous)
}

// Grants converts the API's stream grants to the authorizer's: a Stream
// grant matches that name, a Prefix grant every name starting with it.
// An operation the authorizer does not know is left out and returned in
// unknown (the API's validation makes that impossible for stored
// objects); a grant with no operation left allows nothing and is dropped.
func Grants(in []felixv1.StreamGrant) (out []auth.Grant, unknown []string) {
	for _, g := range in {
		ag := auth.Grant{Stream: g.Stream}
		if g.Prefix != "" {
			ag = auth.Grant{Stream: g.Prefix, Prefix: true}
		}
		for _, op := range g.Operations {
			o, err := auth.ParseOperation(string(op))
			if err != nil {
				unknown = append(unknown, string(op))
				continue
			}
			ag.Ops = append(ag.Ops, o)
		}
		if len(ag.Ops) == 0 {
			continue
		}
		out = append(out, ag)
	}
	return out, unknown
}
