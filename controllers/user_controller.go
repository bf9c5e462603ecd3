package controllers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/internal/pki"
)

// FelixUserReconciler issues each FelixUser a client certificate of its
// cluster's CA, in the Secret named like the user (tls.crt, tls.key,
// ca.crt; owned by the FelixUser, so deleting the user deletes it), or
// has cert-manager issue it (a Certificate owned by the FelixUser), and
// renews it before it expires. The certificate's identity is
// felix://<namespace>/<cluster>/user/<name>, for client authentication
// only, and it is bound to the FelixUser's metadata.uid (subject
// serialNumber, pki.LeafRequest.UID): brokers refuse it once the
// FelixUser is gone, even when another FelixUser of the same name (a new
// uid) was created since. A certificate of another uid, or of none, is
// reissued; a Secret left over from an earlier FelixUser of the same
// name (waiting for garbage collection) is taken over and reissued.
// Brokers read the user's grants from the FelixUser itself.
type FelixUserReconciler struct {
	Client client.Client
	// APIReader reads Secrets the operator did not make (a user's CA
	// Secret, a conflicting Secret); Client when nil.
	APIReader client.Reader
	Clock     clock.PassiveClock
	Events    events.EventRecorder
	// Rand is the randomness of keys and serials; crypto/rand when nil.
	Rand io.Reader
}

// userObservation is what one FelixUser reconcile saw and did; the status
// is computed from it once.
type userObservation struct {
	Ready      metav1.Condition
	SecretName string
	Identity   string
	NotAfter   *metav1.Time
	Requeue    time.Duration
}

// Reconcile issues or renews the user's certificate and patches its
// status once.
func (r *FelixUserReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var u felixv1.FelixUser
	if err := r.Client.Get(ctx, req.NamespacedName, &u); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if u.DeletionTimestamp != nil {
		return ctrl.Result{}, nil
	}
	obs, err := r.ensure(ctx, &u)
	switch {
	case errors.Is(err, errCacheLag):
		return ctrl.Result{RequeueAfter: 50 * time.Millisecond}, nil
	case err != nil:
		return ctrl.Result{}, err
	}
	if err := r.patchStatus(ctx, &u, obs); err != nil {
		if apierrors.IsConflict(err) {
			return ctrl.Result{RequeueAfter: 50 * time.Millisecond}, nil
		}
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: obs.Requeue}, nil
}

// ensure does the user's certificate work and returns what it saw.
func (r *FelixUserReconciler) ensure(ctx context.Context, u *felixv1.FelixUser) (userObservation, error) {
	id := userIdentity(u)
	obs := userObservation{SecretName: UserSecretName(u.Name), Identity: id.String()}
	notReady := func(reason, msg string, args ...any) (userObservation, error) {
		obs.Ready = cond(felixv1.ConditionReady, false, reason, fmt.Sprintf(msg, args...))
		obs.NotAfter = u.Status.NotAfter
		if reason != "ClusterNotFound" && reason != "CANotReady" {
			obs.Requeue = certificateRetry
		}
		if prev := meta.FindStatusCondition(u.Status.Conditions, felixv1.ConditionReady); prev == nil || prev.Reason != reason {
			r.event(u, corev1.EventTypeWarning, reason, "Certificates", obs.Ready.Message)
		}
		return obs, nil
	}
	if err := id.Validate(); err != nil {
		return notReady("InvalidName", "the user's name cannot be a certificate identity: %v", err)
	}
	if clusterReservedSecret(u.Spec.Cluster, UserSecretName(u.Name)) {
		return notReady("NameConflict", "Secret %s is reserved for cluster %s's own certificates (%s, %s): rename the FelixUser", UserSecretName(u.Name), u.Spec.Cluster, CASecretName(u.Spec.Cluster), BrokerTLSSecretName(BrokerName(u.Spec.Cluster, 0))+", …")
	}
	var c felixv1.FelixCluster
	switch err := r.Client.Get(ctx, types.NamespacedName{Namespace: u.Namespace, Name: u.Spec.Cluster}, &c); {
	case apierrors.IsNotFound(err):
		return notReady("ClusterNotFound", "FelixCluster %s does not exist in namespace %s", u.Spec.Cluster, u.Namespace)
	case err != nil:
		return obs, err
	}
	duration, renewBefore := certTimes(&c)
	want := leafWant{Identity: id, UID: string(u.UID), Duration: duration, RenewBefore: renewBefore}
	if err := pki.ValidateUID(want.UID); err != nil {
		return notReady("InvalidUID", "the user's uid cannot be written into a certificate: %v", err)
	}
	labels := clusterLabels(c.Name)
	labels[LabelComponent] = "user"
	labels[LabelUser] = u.Name
	key := types.NamespacedName{Namespace: u.Namespace, Name: obs.SecretName}
	now := r.Clock.Now()

	var sg signer
	switch sourceOf(&c) {
	case tlsCertManager:
		if sharedIssuerRefused(&c) {
			return notReady("SharedIssuerRefused", "cluster %s names ClusterIssuer %s without spec.security.tls.allowClusterIssuer", c.Name, c.Spec.Security.TLS.IssuerRef.Name)
		}
		created, err := upsertCertificate(ctx, r.Client, u, u.Namespace, obs.SecretName, labels, certificateSpec(&c, obs.SecretName, want, labels))
		switch {
		case meta.IsNoMatchError(err):
			return notReady("CertManagerMissing", "cluster %s uses spec.security.tls.issuerRef, and the cluster has no %s kind: install cert-manager", c.Name, CertificateGVK.GroupKind())
		case errors.Is(err, errNotOurs):
			return notReady("SecretConflict", "Certificate %s exists and does not belong to this FelixUser", obs.SecretName)
		case err != nil:
			return obs, err
		}
		if created {
			r.event(u, corev1.EventTypeNormal, "CertificateRequested", "Certificates", "asked cert-manager for the user's certificate")
		}
		var s corev1.Secret
		err = r.Client.Get(ctx, key, &s)
		if apierrors.IsNotFound(err) || err == nil && len(s.Data[SecretKeyTLSCert]) == 0 {
			return notReady("WaitingForCertificate", "waiting for cert-manager to fill Secret %s", obs.SecretName)
		}
		if err != nil {
			return obs, err
		}
		certs, err := pki.ParseCertsPEM(s.Data[SecretKeyTLSCert])
		if err != nil {
			return notReady("CertificateInvalid", "Secret %s: %v", obs.SecretName, err)
		}
		if got := pki.UIDOf(certs[0]); got != want.UID {
			// Brokers refuse it; cert-manager reissues once it sees the
			// Certificate's subject.serialNumber differ, unless the issuer
			// drops the attribute (then this stays not Ready).
			return notReady("CertificateNotBound", "the certificate in Secret %s carries uid %q, not this FelixUser's %q: waiting for cert-manager to reissue it (the issuer must keep spec.subject.serialNumber)", obs.SecretName, got, want.UID)
		}
		obs.NotAfter = &metav1.Time{Time: certs[0].NotAfter}
		obs.Ready = cond(felixv1.ConditionReady, true, "CertificateIssued", "certificate issued by cert-manager, valid until "+certs[0].NotAfter.UTC().Format(time.RFC3339))
		return obs, nil
	case tlsCASecret:
		name := c.Spec.Security.TLS.CASecret.Name
		var sec corev1.Secret
		err := r.reader().Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: name}, &sec)
		switch {
		case apierrors.IsNotFound(err):
			return notReady("CASecretMissing", "the CA Secret %s of cluster %s does not exist", name, c.Name)
		case err != nil:
			return obs, err
		}
		s, err := signerFromSecret(&sec)
		if err != nil {
			return notReady("CASecretInvalid", "cluster %s: %v", c.Name, err)
		}
		sg = s
	default:
		var sec corev1.Secret
		err := r.Client.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: CASecretName(c.Name)}, &sec)
		if apierrors.IsNotFound(err) {
			return notReady("CANotReady", "cluster %s has no CA yet (Secret %s)", c.Name, CASecretName(c.Name))
		}
		if err != nil {
			return obs, err
		}
		s, err := signerFromSecret(&sec)
		if err != nil {
			return notReady("CANotReady", "cluster %s: %v", c.Name, err)
		}
		sg = s
	}

	var sec corev1.Secret
	exists := true
	switch err := r.Client.Get(ctx, key, &sec); {
	case apierrors.IsNotFound(err):
		exists = false
	case err != nil:
		return obs, err
	}
	tookOver := false
	if exists && !metav1.IsControlledBy(&sec, u) {
		if tookOver = takeOverEarlierUsersSecret(&sec, u); !tookOver {
			return notReady("SecretConflict", "Secret %s exists and does not belong to this FelixUser", obs.SecretName)
		}
		// Left over from an earlier FelixUser of this name: its
		// certificate is bound to the old uid, so planLeaf reissues it.
		r.event(u, corev1.EventTypeNormal, "SecretTakenOver", "Certificates", "Secret "+obs.SecretName+" of an earlier FelixUser of this name is replaced")
	}
	p, err := planLeaf(sec.Data, sg, want, now, random(r.Rand))
	if err != nil {
		return obs, fmt.Errorf("certificate of FelixUser %s: %w", u.Name, err)
	}
	if p.Changed || !exists || tookOver {
		err := writeOwnedSecret(ctx, r.Client, r.reader(), u, &sec, exists, key, labels, corev1.SecretTypeTLS, p.Data)
		if errors.Is(err, errNotOurs) {
			return notReady("SecretConflict", "Secret %s exists and does not belong to this FelixUser", obs.SecretName)
		}
		if err != nil {
			return obs, err
		}
	}
	switch p.Reason {
	case "CertificateIssued":
		r.event(u, corev1.EventTypeNormal, p.Reason, "Certificates", "issued the user's certificate (valid until "+p.NotAfter.UTC().Format(time.RFC3339)+")")
	case "CertificateRenewed":
		r.event(u, corev1.EventTypeNormal, p.Reason, "Certificates", "renewed the user's certificate: "+p.Why+" (valid until "+p.NotAfter.UTC().Format(time.RFC3339)+")")
	}
	obs.NotAfter = &metav1.Time{Time: p.NotAfter}
	obs.Requeue = max(p.RenewAt.Sub(now), time.Second)
	if sourceOf(&c) == tlsCASecret && obs.Requeue > 10*time.Minute {
		obs.Requeue = 10 * time.Minute // the user's CA Secret is not watched
	}
	obs.Ready = cond(felixv1.ConditionReady, true, "CertificateIssued", "certificate valid until "+p.NotAfter.UTC().Format(time.RFC3339)+"; renewed from "+p.RenewAt.UTC().Format(time.RFC3339))
	return obs, nil
}

// takeOverEarlierUsersSecret makes u the controller of s when s is the
// Secret of an earlier FelixUser of the same name, deleted since and
// waiting for garbage collection: s is labelled for the user, and its
// controller is a FelixUser of u's name and another uid (names are
// unique in a namespace, so that FelixUser no longer exists). The
// earlier owner reference is dropped, so garbage collection keeps s. It
// reports whether it did; s is only changed in memory.
func takeOverEarlierUsersSecret(s *corev1.Secret, u *felixv1.FelixUser) bool {
	ctl := metav1.GetControllerOf(s)
	if ctl == nil || s.Labels[LabelUser] != u.Name || ctl.Kind != "FelixUser" || ctl.Name != u.Name || ctl.UID == u.UID ||
		ctl.APIVersion != felixv1.GroupVersion.String() {
		return false
	}
	refs := make([]metav1.OwnerReference, 0, len(s.OwnerReferences))
	for _, o := range s.OwnerReferences {
		if o.UID != ctl.UID {
			refs = append(refs, o)
		}
	}
	t, f := true, true
	refs = append(refs, metav1.OwnerReference{APIVersion: felixv1.GroupVersion.String(), Kind: "FelixUser", Name: u.Name, UID: u.UID,
		Controller: &t, BlockOwnerDeletion: &f})
	s.OwnerReferences = refs
	return true
}

// patchStatus computes the status once and patches it when it changed.
func (r *FelixUserReconciler) patchStatus(ctx context.Context, u *felixv1.FelixUser, obs userObservation) error {
	now := metav1.NewTime(r.Clock.Now())
	st := u.Status.DeepCopy()
	st.ObservedGeneration = u.Generation
	st.SecretName = obs.SecretName
	st.Identity = obs.Identity
	st.NotAfter = obs.NotAfter
	if st.NotAfter != nil {
		t := metav1.NewTime(st.NotAfter.Time.Truncate(time.Second))
		st.NotAfter = &t
	}
	st.Conditions = setConditions(st.Conditions, u.Generation, now, obs.Ready)
	if semanticEqual(*st, u.Status) {
		return nil
	}
	orig := u.DeepCopy()
	u.Status = *st
	return r.Client.Status().Patch(ctx, u, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}), client.FieldOwner(OperatorFieldManager))
}

func (r *FelixUserReconciler) reader() client.Reader {
	if r.APIReader != nil {
		return r.APIReader
	}
	return r.Client
}

func (r *FelixUserReconciler) event(u *felixv1.FelixUser, typ, reason, action, note string) {
	if r.Events != nil {
		r.Events.Eventf(u, nil, typ, reason, action, "%s", note)
	}
}

// SetupWithManager registers the reconciler: FelixUsers, their Secrets,
// and the clusters and CA Secrets they depend on.
func (r *FelixUserReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("felixuser").
		For(&felixv1.FelixUser{}).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.usersOfSecret)).
		Watches(&felixv1.FelixCluster{}, handler.EnqueueRequestsFromMapFunc(r.usersOfCluster)).
		Complete(r)
}

// usersOfSecret maps a user's Secret to the user, and a cluster's CA
// Secret to the cluster's users.
func (r *FelixUserReconciler) usersOfSecret(ctx context.Context, o client.Object) []reconcile.Request {
	l := o.GetLabels()
	if name := l[LabelUser]; name != "" {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
	}
	if cl := l[LabelCluster]; cl != "" && o.GetName() == CASecretName(cl) {
		return r.users(ctx, o.GetNamespace(), cl)
	}
	return nil
}

// usersOfCluster maps a FelixCluster to its users.
func (r *FelixUserReconciler) usersOfCluster(ctx context.Context, o client.Object) []reconcile.Request {
	return r.users(ctx, o.GetNamespace(), o.GetName())
}

func (r *FelixUserReconciler) users(ctx context.Context, ns, cluster string) []reconcile.Request {
	var list felixv1.FelixUserList
	if err := r.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return nil
	}
	var out []reconcile.Request
	for _, u := range list.Items {
		if u.Spec.Cluster == cluster {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: u.Name}})
		}
	}
	return out
}
