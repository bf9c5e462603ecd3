package controllers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	felixv1 "felix.dev/felix/api/v1alpha1"
)

// FelixClusterReconciler runs a cluster's brokers: RBAC, Services,
// ConfigMap, PodDisruptionBudget, and per broker a FelixBroker, a heartbeat
// Lease, a PVC and a Pod, all managed directly (no StatefulSet).
type FelixClusterReconciler struct {
	Client client.Client
	// APIReader reads a broker's PVC uncached before its pod is built
	// (restore bookkeeping, [ID-5]); Client when nil.
	APIReader client.Reader
	Clock     clock.PassiveClock
	Events    events.EventRecorder
	// Rand is the randomness of keys and serials; crypto/rand when nil.
	Rand io.Reader
	// BrokerAuthDelegatorRole, when set, is the ClusterRole whose shipped
	// ClusterRoleBinding of the same name lists each cluster's broker
	// ServiceAccount (brokerauth.go).
	BrokerAuthDelegatorRole string
	// DefaultBrokerImage is the broker image of a cluster without
	// spec.image (brokerImage).
	DefaultBrokerImage string
	// RollWaitTimeout bounds a rolling update's wait for one broker's
	// leaderships to move and shards to catch up; zero means
	// DefaultRollWaitTimeout.
	RollWaitTimeout time.Duration
}

// brokerImage is the image c's broker pods are built from: spec.image;
// else, with felix.dev/follow-operator-image "true", the operator's
// default; else the image resolved before (status.image), so an operator
// upgrade rolls nothing by surprise; else the operator's default. ""
// when nothing names one.
func brokerImage(c *felixv1.FelixCluster, operatorDefault string) string {
	switch {
	case c.Spec.Image != "":
		return c.Spec.Image
	case c.Annotations[felixv1.AnnotationFollowOperatorImage] == "true" && operatorDefault != "":
		return operatorDefault
	case c.Status.Image != "":
		return c.Status.Image
	}
	return operatorDefault
}

// scaleDownRetry is how often a blocked scale-down looks again (the
// FelixShard watch also triggers it).
const scaleDownRetry = 30 * time.Second

// Reconcile brings the cluster's objects to its spec and patches its status
// once.
func (r *FelixClusterReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var c felixv1.FelixCluster
	if err := r.Client.Get(ctx, req.NamespacedName, &c); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, errors.Join(r.deleteBrokerAuthBinding(ctx, req.Namespace, req.Name),
				r.releaseRestorePoint(ctx, req.Namespace, req.Name, func(string) bool { return false }))
		}
		return ctrl.Result{}, err
	}
	if c.DeletionTimestamp != nil {
		return ctrl.Result{}, errors.Join(r.deleteBrokerAuthBinding(ctx, c.Namespace, c.Name),
			r.releaseRestorePoint(ctx, c.Namespace, c.Name, func(string) bool { return false }))
	}
	// The pods are built from the resolved image; this copy of the spec
	// is never written back (only the status is patched).
	c.Spec.Image = brokerImage(&c, r.DefaultBrokerImage)
	if c.Spec.Image == "" {
		return ctrl.Result{}, r.noImage(ctx, &c)
	}
	obs := clusterObservation{
		Desired: c.Spec.Brokers, Blocked: map[string][]string{}, ClaimWaiting: map[string]claimWait{},
		Storage: storageObservation{Size: storageSize(&c), NotExpandable: map[string]string{}, Failed: map[string]string{}},
		classes: map[string]expandable{},
	}
	refused, err := r.recordRestoreEpochs(ctx, &c)
	switch {
	case apierrors.IsConflict(err):
		return ctrl.Result{RequeueAfter: 50 * time.Millisecond}, nil
	case err != nil:
		return ctrl.Result{}, err
	}
	obs.RestoreRefused = refused

	var existing felixv1.FelixBrokerList
	if err := r.Client.List(ctx, &existing, client.InNamespace(c.Namespace), client.MatchingLabels{LabelCluster: c.Name}); err != nil {
		return ctrl.Result{}, err
	}
	// The Role names every broker that exists or is desired, so a broker
	// being removed keeps its rights until it is gone.
	names := map[string]bool{}
	for i := int32(0); i < c.Spec.Brokers; i++ {
		names[BrokerName(c.Name, i)] = true
	}
	for _, b := range existing.Items {
		if b.Spec.Ordinal >= c.Spec.Brokers && b.Status.State != felixv1.BrokerLeft {
			names[b.Name] = true
		}
	}
	roleNames := make([]string, 0, len(names))
	for n := range names {
		roleNames = append(roleNames, n)
	}
	sort.Strings(roleNames)

	if err := r.ensureShared(ctx, &c, roleNames, &obs); err != nil {
		return ctrl.Result{}, err
	}
	// Certificates before pods: a broker's pod is created only once its
	// certificate Secret exists.
	obs.TLS, err = r.ensureTLS(ctx, &c, roleNames)
	switch {
	case errors.Is(err, errCacheLag):
		return ctrl.Result{RequeueAfter: 50 * time.Millisecond}, nil
	case err != nil:
		return ctrl.Result{}, err
	}
	for i := int32(0); i < c.Spec.Brokers; i++ {
		bo, err := r.ensureBroker(ctx, &c, i, &obs)
		switch {
		case errors.Is(err, errCacheLag):
			return ctrl.Result{RequeueAfter: 50 * time.Millisecond}, nil
		case err != nil:
			return ctrl.Result{}, err
		}
		obs.Brokers = append(obs.Brokers, bo)
	}
	inRange := map[string]bool{}
	for _, b := range obs.Brokers {
		inRange[b.Name] = true
	}
	if err := r.releaseRestorePoint(ctx, c.Namespace, c.Name, func(n string) bool { return inRange[n] }); err != nil {
		return ctrl.Result{}, err
	}
	rollAgain, err := r.rollOne(ctx, &c, existing.Items, &obs)
	if err != nil {
		return ctrl.Result{}, err
	}
	requeue, err := r.scaleDown(ctx, &c, existing.Items, &obs)
	if err != nil {
		return ctrl.Result{}, err
	}
	if rollAgain > 0 && (requeue == 0 || rollAgain < requeue) {
		requeue = rollAgain
	}
	if obs.RestoreRefused != "" {
		if prev := meta.FindStatusCondition(c.Status.Conditions, felixv1.ConditionDegraded); prev == nil || prev.Reason != RestoreRefusedReason {
			r.event(&c, corev1.EventTypeWarning, "RestoreRefused", "Restore", "%s", obs.RestoreRefused)
		}
	}
	r.volumeEvents(&c, obs)
	if err := r.patchStatus(ctx, &c, obs); err != nil {
		if apierrors.IsConflict(err) {
			return ctrl.Result{RequeueAfter: 50 * time.Millisecond}, nil
		}
		return ctrl.Result{}, err
	}
	if t := obs.TLS.Requeue; t > 0 && (requeue == 0 || t < requeue) {
		requeue = t
	}
	if len(obs.ClaimWaiting) > 0 && (requeue == 0 || claimRetry < requeue) {
		requeue = claimRetry
	}
	return ctrl.Result{RequeueAfter: requeue}, nil
}

// ensureShared creates or updates the cluster-wide objects.
func (r *FelixClusterReconciler) ensureShared(ctx context.Context, c *felixv1.FelixCluster, brokers []string, obs *clusterObservation) error {
	sa := brokerServiceAccount(c)
	if err := r.upsert(ctx, c, sa, func(existing client.Object) { mergeLabels(existing, sa.Labels) }, obs); err != nil {
		return err
	}
	role := brokerRole(c, brokers)
	if err := r.upsert(ctx, c, role, func(existing client.Object) {
		mergeLabels(existing, role.Labels)
		existing.(*rbacv1.Role).Rules = role.Rules
	}, obs); err != nil {
		return err
	}
	rb := brokerRoleBinding(c)
	if err := r.upsert(ctx, c, rb, func(existing client.Object) {
		mergeLabels(existing, rb.Labels)
		existing.(*rbacv1.RoleBinding).Subjects = rb.Subjects
	}, obs); err != nil {
		return err
	}
	for _, svc := range []*corev1.Service{headlessService(c), clientService(c)} {
		want := svc
		if err := r.upsert(ctx, c, want, func(existing client.Object) {
			e := existing.(*corev1.Service)
			mergeLabels(e, want.Labels)
			e.Spec.Selector = want.Spec.Selector
			e.Spec.Ports = want.Spec.Ports
			e.Spec.PublishNotReadyAddresses = want.Spec.PublishNotReadyAddresses
		}, obs); err != nil {
			return err
		}
	}
	cm := configMap(c)
	if err := r.upsert(ctx, c, cm, func(existing client.Object) {
		mergeLabels(existing, cm.Labels)
		existing.(*corev1.ConfigMap).Data = cm.Data
	}, obs); err != nil {
		return err
	}
	pdb := podDisruptionBudget(c)
	if err := r.upsert(ctx, c, pdb, func(existing client.Object) {
		mergeLabels(existing, pdb.Labels)
		existing.(*policyv1.PodDisruptionBudget).Spec = pdb.Spec
	}, obs); err != nil {
		return err
	}
	if err := r.ensureNetworkPolicy(ctx, c, obs); err != nil {
		return err
	}
	return r.ensureBrokerAuthBinding(ctx, c)
}

// upsert creates want (owned by c) or applies mutate to the existing
// object and updates it when that changed something.
func (r *FelixClusterReconciler) upsert(ctx context.Context, c *felixv1.FelixCluster, want client.Object, mutate func(client.Object), obs *clusterObservation) error {
	existing := want.DeepCopyObject().(client.Object)
	existing.SetResourceVersion("")
	res, err := controllerutil.CreateOrUpdate(ctx, r.Client, existing, func() error {
		if ts := existing.GetCreationTimestamp(); ts.IsZero() {
			return controllerutil.SetControllerReference(c, existing, r.Client.Scheme())
		}
		mutate(existing)
		return controllerutil.SetControllerReference(c, existing, r.Client.Scheme())
	})
	if err != nil {
		return fmt.Errorf("%T %s: %w", want, want.GetName(), err)
	}
	if res == controllerutil.OperationResultCreated {
		obs.Created++
	}
	return nil
}

func mergeLabels(o client.Object, labels map[string]string) {
	l := o.GetLabels()
	if l == nil {
		l = map[string]string{}
	}
	for k, v := range labels {
		l[k] = v
	}
	o.SetLabels(l)
}

// ensureBroker creates what one broker needs, in the order its start
// needs it: the FelixBroker record and its Lease before the pod, the PVC
// before the pod.
func (r *FelixClusterReconciler) ensureBroker(ctx context.Context, c *felixv1.FelixCluster, ordinal int32, obs *clusterObservation) (brokerObservation, error) {
	name := BrokerName(c.Name, ordinal)
	key := types.NamespacedName{Namespace: c.Namespace, Name: name}
	bo := brokerObservation{Name: name}

	var fb felixv1.FelixBroker
	switch err := r.Client.Get(ctx, key, &fb); {
	case apierrors.IsNotFound(err):
		fb = *felixBroker(c, ordinal)
		if err := controllerutil.SetControllerReference(c, &fb, r.Client.Scheme()); err != nil {
			return bo, err
		}
		if err := r.Client.Create(ctx, &fb); err != nil && !apierrors.IsAlreadyExists(err) {
			return bo, fmt.Errorf("create FelixBroker %s: %w", name, err)
		}
		obs.Created++
	case err != nil:
		return bo, err
	}
	bo.State, bo.Incarnation = fb.Status.State, fb.Status.Incarnation

	var lease coordinationv1.Lease
	switch err := r.Client.Get(ctx, key, &lease); {
	case apierrors.IsNotFound(err):
		if fb.UID == "" {
			break // created above; the cache has not seen it yet: next pass
		}
		l := heartbeatLease(c, name, nodeExpirySeconds(c))
		if err := controllerutil.SetControllerReference(&fb, l, r.Client.Scheme()); err != nil {
			return bo, err
		}
		if err := r.Client.Create(ctx, l); err != nil && !apierrors.IsAlreadyExists(err) {
			return bo, fmt.Errorf("create Lease %s: %w", name, err)
		}
		obs.Created++
	case err != nil:
		return bo, err
	}

	var pvc corev1.PersistentVolumeClaim
	claimGoing := false
	switch err := r.Client.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: PVCName(name)}, &pvc); {
	case apierrors.IsNotFound(err):
		p := brokerPVC(c, name)
		snap, wait, err := r.restoreSource(ctx, c, ordinal, fb.Status.Incarnation > 0)
		if err != nil {
			return bo, err
		}
		if wait {
			// Restored cluster: no volume or pod until the backup is Completed.
			obs.RestoreWaiting = c.Spec.Restore.Backup
			return bo, nil
		}
		if snap != "" {
			restorePVC(p, snap)
		}
		if err := controllerutil.SetControllerReference(c, p, r.Client.Scheme()); err != nil {
			return bo, err
		}
		if err := r.Client.Create(ctx, p); err != nil && !apierrors.IsAlreadyExists(err) {
			return bo, fmt.Errorf("create PVC %s: %w", p.Name, err)
		}
		obs.Created++
	case err != nil:
		return bo, err
	case pvc.DeletionTimestamp != nil:
		// The user deleted the claim (disk replacement): no pod is built
		// on it, or the claim's protection and the pod would wait for
		// each other for ever. A new claim comes once it is gone.
		claimGoing = true
	default:
		if err := r.resizeClaim(ctx, c, name, &pvc, &obs.Storage, obs.classes); err != nil {
			return bo, err
		}
	}

	var pod corev1.Pod
	switch err := r.Client.Get(ctx, key, &pod); {
	case apierrors.IsNotFound(err):
		if claimGoing {
			obs.ClaimWaiting[name] = claimWait{}
			return bo, nil
		}
		if !obs.TLS.Ready[name] {
			obs.TLSWaiting = append(obs.TLSWaiting, name)
			return bo, nil
		}
		// The cache may not have seen a deletion of the claim yet.
		switch going, err := r.claimTerminating(ctx, c.Namespace, name); {
		case err != nil:
			return bo, err
		case going:
			obs.ClaimWaiting[name] = claimWait{}
			return bo, nil
		}
		p := brokerPod(c, name)
		switch pending, err := r.restorePointPending(ctx, c.Namespace, name); {
		case err != nil:
			return bo, err
		case pending:
			withRestorePoint(p)
		}
		if err := controllerutil.SetControllerReference(c, p, r.Client.Scheme()); err != nil {
			return bo, err
		}
		if err := r.Client.Create(ctx, p); err != nil && !apierrors.IsAlreadyExists(err) {
			return bo, fmt.Errorf("create Pod %s: %w", name, err)
		}
		obs.Created++
		bo.PodExists = true
		r.event(c, corev1.EventTypeNormal, "BrokerCreated", "Create", "created pod %s", name)
	case err != nil:
		return bo, err
	case claimGoing && pod.DeletionTimestamp == nil && podNotStarted(&pod):
		// A pod built on the claim before it was deleted (by an older
		// operator, or the user deleted the claim first): it never
		// starts, and the claim waits for it. It is deleted; the broker
		// waits for the claim to go.
		if err := r.Client.Delete(ctx, &pod, client.Preconditions{UID: &pod.UID}); err != nil && !apierrors.IsNotFound(err) {
			return bo, fmt.Errorf("delete pod %s on a terminating claim: %w", name, err)
		}
		obs.ClaimWaiting[name] = claimWait{}
		r.event(c, corev1.EventTypeWarning, StuckPodDeletedReason, "ReplaceVolume",
			"deleted pod %s: it had not started and its volume claim %s is being deleted; a new claim and pod follow once the claim is gone", name, PVCName(name))
	case claimGoing:
		// A running broker keeps its claim until its pod is deleted; the
		// operator does not stop it (docs/operator.md, replacing a
		// broker's disk). A pod on its way out loses its restore-point
		// finalizer as usual.
		if err := r.settleRestorePoint(ctx, c, &pod); err != nil {
			return bo, err
		}
		obs.ClaimWaiting[name] = claimWait{PodRunning: pod.DeletionTimestamp == nil}
		bo.PodExists = true
	default:
		if err := r.settleRestorePoint(ctx, c, &pod); err != nil {
			return bo, err
		}
		bo.PodExists = true
		bo.PodReady = podReady(&pod) && pod.DeletionTimestamp == nil
		bo.PodOutdated = pod.Annotations[AnnotationSpecHash] != brokerPod(c, name).Annotations[AnnotationSpecHash]
	}
	return bo, nil
}

// podReady reports the pod's Ready condition (set by the kubelet from the
// broker's /ready, which is up only once it registered and serves).
func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// rollRetry is how soon a rolling update that waits for leaderships to
// move or shards to catch up looks again (it does not watch shards).
const rollRetry = time.Second

// rollOne replaces at most one broker pod whose spec is outdated (image,
// flags, resources), and only while every broker pod is Ready and every
// broker Up, so a rolling update never takes two brokers at once. The
// FelixBroker, Lease and PVC stay: the broker restarts on its own data
// and registers again [ID-4]. A broker whose certificate this reconcile
// could not issue or check (cert-manager missing, the CA Secret missing
// or invalid) is not replaced: its new pod might not start.
//
// A restart is never a failover. Brokers that lead fewer shards go first,
// so leaders roll last; before a pod is deleted, the broker is marked
// draining (felix.dev/drain-leadership) and the shard controller moves
// each of its leaderships to a replica caught up under its registered id
// in a planned promotion; the pod goes once it leads nothing and every
// shard it holds a replica of has all its replicas caught up (so the
// previous restart's broker was copied up again first). Until then the
// roll waits, and the Progressing condition says on what. The mark comes
// off once the broker runs the new spec.
func (r *FelixClusterReconciler) rollOne(ctx context.Context, c *felixv1.FelixCluster, brokers []felixv1.FelixBroker, obs *clusterObservation) (time.Duration, error) {
	var outdated, replaceable []string
	healthy := true
	stale := map[string]bool{}
	for _, b := range obs.Brokers {
		if b.PodOutdated {
			stale[b.Name] = true
			outdated = append(outdated, b.Name)
			if obs.TLS.Issued[b.Name] {
				replaceable = append(replaceable, b.Name)
			}
		}
		if !b.PodExists || !b.PodReady || b.State != felixv1.BrokerUp {
			healthy = false
		}
	}
	// The roll's own marks come off the brokers that run the spec now.
	for i := range brokers {
		b := &brokers[i]
		if b.Annotations[felixv1.AnnotationDrainLeadership] == felixv1.RollingUpdateDrain && !stale[b.Name] {
			if err := r.markDraining(ctx, b, false); err != nil {
				return 0, err
			}
		}
	}
	obs.Outdated = len(outdated)
	if len(outdated) == 0 {
		return 0, nil
	}
	if !healthy || len(replaceable) == 0 {
		obs.RollWaiting = true
		return 0, nil
	}
	var shards felixv1.FelixShardList
	if err := r.Client.List(ctx, &shards, client.InNamespace(c.Namespace), client.MatchingLabels{LabelCluster: c.Name}); err != nil {
		return 0, err
	}
	// A shard with one replica has nowhere to move and nothing to catch
	// up: its restart is downtime whatever the roll does.
	leads := map[string]int{}
	for _, sh := range shards.Items {
		if a := sh.Status.Assignment; a != nil && len(sh.Spec.Replicas) > 1 {
			leads[a.Leader]++
		}
	}
	// Leaders last: the broker leading fewest shards goes first.
	sort.SliceStable(replaceable, func(i, j int) bool { return leads[replaceable[i]] < leads[replaceable[j]] })
	name := replaceable[0]
	var victim *felixv1.FelixBroker
	for i := range brokers {
		if brokers[i].Name == name {
			victim = &brokers[i]
		}
	}
	// The next broker to restart is marked draining from the moment it is
	// chosen: its leaderships move, and none comes back to it meanwhile.
	since := r.Clock.Now()
	if victim != nil {
		if t, err := time.Parse(time.RFC3339, victim.Annotations[AnnotationDrainSince]); err == nil {
			since = t
		} else if victim.Annotations[felixv1.AnnotationDrainLeadership] == "" {
			if err := r.markDraining(ctx, victim, true); err != nil {
				return 0, err
			}
			if n := leads[name]; n > 0 {
				r.event(c, corev1.EventTypeNormal, "MovingLeadership", "RollingUpdate",
					"moving the leadership of %d shards off %s before its pod is replaced (planned promotions, no failover)", n, name)
			}
		}
	}
	var behind []string
	for _, sh := range shards.Items {
		if len(sh.Spec.Replicas) > 1 && slices.Contains(sh.Spec.Replicas, name) && !fullyCaughtUp(&sh) {
			behind = append(behind, sh.Name)
		}
	}
	sort.Strings(behind)
	var waitFor string
	switch n := leads[name]; {
	case n > 0:
		waitFor = fmt.Sprintf("moving the leadership of %d shards off %s before its restart", n, name)
	case len(behind) > 0:
		waitFor = fmt.Sprintf("waiting for every replica of %s to be caught up before %s restarts", listSome(behind, 5), name)
	}
	timeout := r.RollWaitTimeout
	if timeout <= 0 {
		timeout = DefaultRollWaitTimeout
	}
	if waitFor != "" {
		waited := r.Clock.Now().Sub(since)
		if waited < timeout {
			obs.RollStep = waitFor
			return rollRetry, nil
		}
		// Waiting longer would stall the roll for good (a replica that
		// cannot catch up); the restart goes ahead, as a failover where
		// it must, and says so.
		r.event(c, corev1.EventTypeWarning, "RollWaitTimedOut", "RollingUpdate",
			"replacing pod %s after %v although it is still %s", name, waited.Round(time.Second), strings.TrimPrefix(waitFor, "waiting for "))
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: name}}
	if err := r.Client.Delete(ctx, pod); err != nil && !apierrors.IsNotFound(err) {
		return 0, fmt.Errorf("replace pod %s: %w", name, err)
	}
	r.event(c, corev1.EventTypeNormal, "BrokerReplaced", "RollingUpdate", "replacing pod %s to apply the cluster spec (%d outdated)", name, len(outdated))
	return 0, nil
}

// AnnotationDrainSince, on a FelixBroker the rolling update marked
// draining, is when it did (RFC 3339): the roll's waits are counted from
// it.
const AnnotationDrainSince = "felix.dev/drain-since"

// DefaultRollWaitTimeout bounds how long a rolling update waits for a
// broker's leaderships to move and its shards to catch up before it
// restarts the broker anyway (FelixClusterReconciler.RollWaitTimeout).
const DefaultRollWaitTimeout = 5 * time.Minute

// markDraining sets (on) or removes the rolling update's
// felix.dev/drain-leadership mark on b with a merge patch.
func (r *FelixClusterReconciler) markDraining(ctx context.Context, b *felixv1.FelixBroker, on bool) error {
	var v, at *string
	if on {
		s, t := felixv1.RollingUpdateDrain, r.Clock.Now().UTC().Format(time.RFC3339)
		v, at = &s, &t
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]*string{
		felixv1.AnnotationDrainLeadership: v, AnnotationDrainSince: at}}})
	if err != nil {
		return err
	}
	if err := r.Client.Patch(ctx, b, client.RawPatch(types.MergePatchType, patch)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("mark broker %s draining=%v: %w", b.Name, on, err)
	}
	return nil
}

// fullyCaughtUp reports whether sh serves with every replica caught up
// under its registered id (status.caughtUp n/n, Ready).
func fullyCaughtUp(sh *felixv1.FelixShard) bool {
	n := len(sh.Spec.Replicas)
	return sh.Status.CaughtUp == fmt.Sprintf("%d/%d", n, n) && conditionTrue(sh.Status.Conditions, felixv1.ConditionReady)
}

// listSome joins at most n names, saying how many more there are.
func listSome(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
}

// scaleDown removes brokers beyond the desired size that hold no shard
// replica: pod, PVC and Lease go, the FelixBroker stays as the record of
// a broker that Left. Brokers still holding replicas stay and block.
func (r *FelixClusterReconciler) scaleDown(ctx context.Context, c *felixv1.FelixCluster, brokers []felixv1.FelixBroker, obs *clusterObservation) (time.Duration, error) {
	var extra []felixv1.FelixBroker
	for _, b := range brokers {
		if b.Spec.Ordinal >= c.Spec.Brokers && b.Status.State != felixv1.BrokerLeft {
			extra = append(extra, b)
		}
	}
	if len(extra) == 0 {
		return 0, nil
	}
	var shards felixv1.FelixShardList
	if err := r.Client.List(ctx, &shards, client.InNamespace(c.Namespace), client.MatchingLabels{LabelCluster: c.Name}); err != nil {
		return 0, err
	}
	var requeue time.Duration
	for _, b := range extra {
		var held []string
		for _, s := range shards.Items {
			if slices.Contains(s.Spec.Replicas, b.Name) {
				held = append(held, s.Name)
			}
		}
		if len(held) > 0 {
			sort.Strings(held)
			obs.Blocked[b.Name] = held
			requeue = scaleDownRetry
			continue
		}
		obs.Removing++
		removed := false
		for _, o := range []client.Object{
			&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: b.Name}},
			&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: PVCName(b.Name)}},
			&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: b.Name}},
		} {
			err := r.Client.Delete(ctx, o)
			switch {
			case err == nil:
				removed = true
			case !apierrors.IsNotFound(err):
				return 0, fmt.Errorf("remove %s: %w", b.Name, err)
			}
		}
		if err := r.removeBrokerTLS(ctx, c, b.Name); err != nil {
			return 0, err
		}
		if removed {
			r.event(c, corev1.EventTypeNormal, "BrokerRemoved", "ScaleDown", "removed broker %s (it held no shard replica)", b.Name)
		}
	}
	if len(obs.Blocked) > 0 {
		// Once per blocked episode (and when what blocks changes); the
		// condition carries it meanwhile.
		msg := blockedMessage(obs.Blocked)
		if prev := meta.FindStatusCondition(c.Status.Conditions, felixv1.ConditionDegraded); prev == nil || prev.Reason != "ScaleDownBlocked" || prev.Message != msg {
			r.event(c, corev1.EventTypeWarning, "ScaleDownBlocked", "ScaleDown", "%s", msg)
		}
	}
	return requeue, nil
}

// patchStatus computes the status once and patches it when it changed.
func (r *FelixClusterReconciler) patchStatus(ctx context.Context, c *felixv1.FelixCluster, obs clusterObservation) error {
	ready, conds := clusterStatus(obs)
	now := metav1.NewTime(r.Clock.Now())
	st := c.Status.DeepCopy()
	st.ObservedGeneration = c.Generation
	st.ReadyBrokers = ready
	st.Image = c.Spec.Image
	st.Storage = storageStatus(obs.Storage)
	st.Conditions = setConditions(st.Conditions, c.Generation, now, conds...)
	if semanticEqual(*st, c.Status) {
		return nil
	}
	orig := c.DeepCopy()
	wasReady := conditionTrue(c.Status.Conditions, felixv1.ConditionReady)
	c.Status = *st
	if err := r.Client.Status().Patch(ctx, c, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}), client.FieldOwner(OperatorFieldManager)); err != nil {
		return err
	}
	if isReady := conditionTrue(st.Conditions, felixv1.ConditionReady); isReady != wasReady {
		if isReady {
			r.event(c, corev1.EventTypeNormal, "ClusterReady", "Reconcile", "all %d brokers registered and up", ready)
		} else {
			r.event(c, corev1.EventTypeWarning, "ClusterNotReady", "Reconcile", "%d/%d brokers registered and up", ready, c.Spec.Brokers)
		}
	}
	return nil
}

// noImage says, on a cluster without spec.image reconciled by an operator
// without a default broker image, that nothing can be built.
func (r *FelixClusterReconciler) noImage(ctx context.Context, c *felixv1.FelixCluster) error {
	now := metav1.NewTime(r.Clock.Now())
	st := c.Status.DeepCopy()
	st.ObservedGeneration = c.Generation
	st.Conditions = setConditions(st.Conditions, c.Generation, now,
		cond(felixv1.ConditionDegraded, true, "NoImage", "spec.image is empty and the operator has no default broker image (--broker-image): set spec.image"))
	if semanticEqual(*st, c.Status) {
		return nil
	}
	orig := c.DeepCopy()
	c.Status = *st
	return r.Client.Status().Patch(ctx, c, client.MergeFrom(orig), client.FieldOwner(OperatorFieldManager))
}

func (r *FelixClusterReconciler) event(c *felixv1.FelixCluster, typ, reason, action, note string, args ...any) {
	if r.Events != nil {
		r.Events.Eventf(c, nil, typ, reason, action, note, args...)
	}
}

// SetupWithManager registers the reconciler with everything it owns.
func (r *FelixClusterReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("felixcluster").
		For(&felixv1.FelixCluster{}).
		Owns(&felixv1.FelixBroker{}).
		Owns(&corev1.Pod{}).
		Owns(&corev1.PersistentVolumeClaim{}).
		Owns(&corev1.Service{}).
		Owns(&corev1.ConfigMap{}).
		Owns(&corev1.ServiceAccount{}).
		Owns(&rbacv1.Role{}).
		Owns(&rbacv1.RoleBinding{}).
		Owns(&policyv1.PodDisruptionBudget{}).
		// Certificate Secrets: the CA's and the brokers' (including
		// those cert-manager fills), by label.
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(clusterOfSecret)).
		Owns(&networkingv1.NetworkPolicy{}).
		// A shard created or deleted may unblock or block a scale-down.
		// A backup completing lets the clusters restoring from it go on.
		Watches(&felixv1.FelixBackup{}, handler.EnqueueRequestsFromMapFunc(r.clustersRestoringFrom)).
		Watches(&felixv1.FelixShard{}, handler.EnqueueRequestsFromMapFunc(clusterOfShard),
			builder.WithPredicates(predicate.Funcs{UpdateFunc: func(event.UpdateEvent) bool { return false }})).
		Complete(r)
}

// clusterOfShard maps a FelixShard to its cluster by label.
func clusterOfShard(_ context.Context, o client.Object) []reconcile.Request {
	name := o.GetLabels()[LabelCluster]
	if name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
}
