// RBAC for certificates, generated into config/rbac/role.yaml.
//
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=felix.dev,resources=felixusers,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=felix.dev,resources=felixusers/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=felix.dev,resources=felixusers/finalizers,verbs=update
// +kubebuilder:rbac:groups=cert-manager.io,resources=certificates,verbs=get;list;watch;create;update;patch;delete

package controllers

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"maps"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/internal/pki"
)

// errNotOurs: an object the operator would write exists and is not
// controlled by the Felix object it would belong to.
var errNotOurs = errors.New("exists and is not managed by the operator for this object")

// errCacheLag: a write met an object the cache had not shown yet (create
// found it existing, update found it changed); the reconcile runs again.
var errCacheLag = errors.New("cache behind the API server")

// tlsSource is where a cluster's certificates come from.
type tlsSource string

const (
	tlsOperatorCA  tlsSource = "OperatorCA"
	tlsCASecret    tlsSource = "CASecret"
	tlsCertManager tlsSource = "CertManager"
)

func sourceOf(c *felixv1.FelixCluster) tlsSource {
	switch tls := c.Spec.Security.TLS; {
	case tls.IssuerRef != nil:
		return tlsCertManager
	case tls.CASecret != nil:
		return tlsCASecret
	}
	return tlsOperatorCA
}

// tlsObservation is what the cluster's certificate step saw and did.
type tlsObservation struct {
	// Ready names the brokers whose certificate Secret exists and is
	// usable: only they get a pod.
	Ready map[string]bool
	// Issued names the brokers whose certificate this step issued or
	// checked to be current (a subset of Ready): only their pods may be
	// replaced by a rolling update, as a replaced pod of another broker
	// might not come back.
	Issued map[string]bool
	// Condition is the cluster's TLSReady condition.
	Condition metav1.Condition
	// Requeue is when the step must run again (next renewal, retry).
	Requeue time.Duration
}

// random returns the reconciler's randomness, crypto/rand when nil.
func random(r io.Reader) io.Reader {
	if r == nil {
		return rand.Reader
	}
	return r
}

// ensureTLS makes the cluster's CA (when the operator manages it) and
// every listed broker's certificate Secret <broker>-tls, or the
// cert-manager Certificates that fill them, and says which brokers are
// ready to start.
func (r *FelixClusterReconciler) ensureTLS(ctx context.Context, c *felixv1.FelixCluster, brokers []string) (tlsObservation, error) {
	obs := tlsObservation{Ready: map[string]bool{}, Issued: map[string]bool{}}
	now := r.Clock.Now()
	duration, renewBefore := certTimes(c)
	src := sourceOf(c)
	prev := meta.FindStatusCondition(c.Status.Conditions, ConditionTLSReady)
	fail := func(reason, msg string, args ...any) (tlsObservation, error) {
		msg = fmt.Sprintf(msg, args...)
		obs.Condition = cond(ConditionTLSReady, false, reason, msg)
		obs.Requeue = certificateRetry
		if prev == nil || prev.Reason != reason {
			r.event(c, corev1.EventTypeWarning, reason, "Certificates", "%s", msg)
		}
		// Brokers whose Secret exists, and is the cluster's, keep running
		// on it; a Secret of the same name that is someone else's (a
		// FelixUser's, say) is never mounted.
		for _, b := range brokers {
			var s corev1.Secret
			if err := r.Client.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: BrokerTLSSecretName(b)}, &s); err == nil && len(s.Data[SecretKeyTLSCert]) > 0 && brokerSecretOfCluster(c, src, b, &s) {
				obs.Ready[b] = true
			}
		}
		return obs, nil
	}

	// Brokers of the cluster's range get a certificate; those beyond it
	// (being removed) keep theirs renewed while they exist.
	inRange := map[string]bool{}
	for i := int32(0); i < c.Spec.Brokers; i++ {
		inRange[BrokerName(c.Name, i)] = true
	}
	if src == tlsCertManager && sharedIssuerRefused(c) {
		return fail("SharedIssuerRefused", "spec.security.tls.issuerRef names ClusterIssuer %s: anyone who may create cert-manager Certificates in any namespace could obtain this cluster's broker identities from it; use an Issuer in namespace %s whose CA signs for this cluster only, or set spec.security.tls.allowClusterIssuer if the ClusterIssuer is dedicated to it", c.Spec.Security.TLS.IssuerRef.Name, c.Namespace)
	}
	if src == tlsCertManager {
		return r.ensureCertManager(ctx, c, brokers, inRange, duration, renewBefore, fail)
	}
	var sg signer
	switch src {
	case tlsOperatorCA:
		s, err := r.ensureCA(ctx, c, now)
		if errors.Is(err, errNotOurs) {
			return fail("SecretConflict", "%v: delete or rename it, or name it in spec.security.tls.caSecret", err)
		}
		if errors.Is(err, errCASecretInvalid) {
			return fail("CASecretInvalid", "Secret %s: %v; the operator does not replace it (that would drop the trust bundle): repair it, or delete it for a new CA (every certificate is reissued)", CASecretName(c.Name), err)
		}
		if err != nil {
			return obs, err
		}
		sg = s
	case tlsCASecret:
		name := c.Spec.Security.TLS.CASecret.Name
		var sec corev1.Secret
		err := r.reader().Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: name}, &sec)
		switch {
		case apierrors.IsNotFound(err):
			return fail("CASecretMissing", "spec.security.tls.caSecret: Secret %s does not exist", name)
		case err != nil:
			return obs, err
		}
		s, err := signerFromSecret(&sec)
		if err != nil {
			return fail("CASecretInvalid", "spec.security.tls.caSecret: %v", err)
		}
		if !s.CA.Cert.NotAfter.After(now) {
			return fail("CASecretInvalid", "spec.security.tls.caSecret: the CA in Secret %s expired at %s", name, s.CA.Cert.NotAfter.UTC().Format(time.RFC3339))
		}
		sg = s
	}
	var next time.Time
	var renewed []string
	for _, b := range brokers {
		want := leafWant{Identity: brokerIdentity(c, b), DNSNames: brokerDNSNames(c, b), Duration: duration, RenewBefore: renewBefore}
		p, err := r.ensureLeaf(ctx, c, BrokerTLSSecretName(b), brokerLabels(c.Name, b), sg, want, now, inRange[b])
		switch {
		case errors.Is(err, errNotOurs):
			return fail("SecretConflict", "%v", err)
		case err != nil:
			return obs, err
		case p.Data == nil:
			continue // a broker being removed, whose Secret is gone
		}
		obs.Ready[b], obs.Issued[b] = true, true
		if next.IsZero() || p.RenewAt.Before(next) {
			next = p.RenewAt
		}
		switch p.Reason {
		case "CertificateIssued":
			r.event(c, corev1.EventTypeNormal, p.Reason, "Certificates", "issued the certificate of broker %s (valid until %s)", b, p.NotAfter.UTC().Format(time.RFC3339))
		case "CertificateRenewed":
			renewed = append(renewed, b)
			r.event(c, corev1.EventTypeNormal, p.Reason, "Certificates", "renewed the certificate of broker %s: %s (valid until %s)", b, p.Why, p.NotAfter.UTC().Format(time.RFC3339))
		}
	}
	if !next.IsZero() {
		obs.Requeue = max(next.Sub(now), time.Second)
	}
	if src == tlsCASecret && (obs.Requeue == 0 || obs.Requeue > 10*time.Minute) {
		// The user's Secret is not watched (it carries no Felix label):
		// look at it every few minutes for a replaced CA.
		obs.Requeue = 10 * time.Minute
	}
	from := "the operator's CA (Secret " + CASecretName(c.Name) + ")"
	if src == tlsCASecret {
		from = "the CA of Secret " + c.Spec.Security.TLS.CASecret.Name
	}
	msg := fmt.Sprintf("%d broker certificates issued from %s", len(brokers), from)
	if len(renewed) > 0 {
		msg += "; renewed " + strings.Join(renewed, ", ")
	}
	if !next.IsZero() {
		msg += "; next renewal " + next.UTC().Format(time.RFC3339)
	}
	obs.Condition = cond(ConditionTLSReady, true, "CertificatesIssued", msg)
	return obs, nil
}

// ensureCA creates or rolls over the operator's CA Secret and returns the
// signer.
func (r *FelixClusterReconciler) ensureCA(ctx context.Context, c *felixv1.FelixCluster, now time.Time) (signer, error) {
	key := types.NamespacedName{Namespace: c.Namespace, Name: CASecretName(c.Name)}
	var sec corev1.Secret
	exists := true
	switch err := r.Client.Get(ctx, key, &sec); {
	case apierrors.IsNotFound(err):
		exists = false
	case err != nil:
		return signer{}, err
	}
	if exists && !metav1.IsControlledBy(&sec, c) {
		return signer{}, fmt.Errorf("%w: Secret %s", errNotOurs, key.Name)
	}
	p, err := planCA(sec.Data, "felix "+c.Namespace+"/"+c.Name+" CA", now, random(r.Rand))
	if err != nil {
		return signer{}, err
	}
	if !p.Changed {
		return p.Signer, nil
	}
	labels := clusterLabels(c.Name)
	labels[LabelComponent] = "ca"
	if err := r.writeSecret(ctx, c, &sec, exists, key, labels, corev1.SecretTypeOpaque, p.Data); err != nil {
		return signer{}, err
	}
	switch p.Reason {
	case "CACreated":
		r.event(c, corev1.EventTypeNormal, p.Reason, "Certificates", "created the cluster CA (Secret %s, valid until %s)", key.Name, p.Signer.CA.Cert.NotAfter.UTC().Format(time.RFC3339))
	case "CARolloverStarted":
		r.event(c, corev1.EventTypeNormal, p.Reason, "Certificates", "added a new CA to the trust bundle; it signs from %s", p.NextCheck.UTC().Format(time.RFC3339))
	case "CARotated":
		r.event(c, corev1.EventTypeNormal, p.Reason, "Certificates", "the new CA signs now; certificates are reissued from it")
	}
	return p.Signer, nil
}

// ensureLeaf keeps the leaf Secret name (owned by c) holding the wanted
// certificate; with create false a missing Secret stays missing (and the
// plan is empty).
func (r *FelixClusterReconciler) ensureLeaf(ctx context.Context, c *felixv1.FelixCluster, name string, labels map[string]string, sg signer, want leafWant, now time.Time, create bool) (leafPlan, error) {
	key := types.NamespacedName{Namespace: c.Namespace, Name: name}
	var sec corev1.Secret
	exists := true
	switch err := r.Client.Get(ctx, key, &sec); {
	case apierrors.IsNotFound(err) && !create:
		return leafPlan{}, nil
	case apierrors.IsNotFound(err):
		exists = false
	case err != nil:
		return leafPlan{}, err
	}
	if exists && !metav1.IsControlledBy(&sec, c) {
		return leafPlan{}, fmt.Errorf("%w: Secret %s", errNotOurs, name)
	}
	p, err := planLeaf(sec.Data, sg, want, now, random(r.Rand))
	if err != nil {
		return p, fmt.Errorf("certificate %s: %w", name, err)
	}
	if !p.Changed && exists {
		return p, nil
	}
	return p, r.writeSecret(ctx, c, &sec, exists, key, labels, corev1.SecretTypeTLS, p.Data)
}

// writeSecret creates the Secret key (owned by c) or updates cur, with
// optimistic concurrency: a stale cache yields errCacheLag.
func (r *FelixClusterReconciler) writeSecret(ctx context.Context, c *felixv1.FelixCluster, cur *corev1.Secret, exists bool, key types.NamespacedName, labels map[string]string, typ corev1.SecretType, data map[string][]byte) error {
	return writeOwnedSecret(ctx, r.Client, r.reader(), c, cur, exists, key, labels, typ, data)
}

// writeOwnedSecret creates the Secret key controlled by owner, or updates
// cur (which must be the existing one) to labels and data.
//
// A create that finds the Secret existing reads it uncached (with
// uncached): a Secret the owner does not control yields errNotOurs (it
// may carry no Felix label, so the cache never showed it), one it does
// errCacheLag.
func writeOwnedSecret(ctx context.Context, cl client.Client, uncached client.Reader, owner client.Object, cur *corev1.Secret, exists bool, key types.NamespacedName, labels map[string]string, typ corev1.SecretType, data map[string][]byte) error {
	if !exists {
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Labels: labels},
			Type:       typ,
			Data:       data,
		}
		if err := controllerutil.SetControllerReference(owner, s, cl.Scheme()); err != nil {
			return err
		}
		err := cl.Create(ctx, s, client.FieldOwner(OperatorFieldManager))
		if apierrors.IsAlreadyExists(err) {
			var other corev1.Secret
			if gerr := uncached.Get(ctx, key, &other); gerr == nil && !metav1.IsControlledBy(&other, owner) {
				return fmt.Errorf("%w: Secret %s", errNotOurs, key.Name)
			}
			return fmt.Errorf("create Secret %s: %w", key.Name, errCacheLag)
		}
		if err != nil {
			return fmt.Errorf("create Secret %s: %w", key.Name, err)
		}
		return nil
	}
	mergeLabels(cur, labels)
	cur.Data = data
	err := cl.Update(ctx, cur, client.FieldOwner(OperatorFieldManager))
	if apierrors.IsConflict(err) {
		return fmt.Errorf("update Secret %s: %w", key.Name, errCacheLag)
	}
	if err != nil {
		return fmt.Errorf("update Secret %s: %w", key.Name, err)
	}
	return nil
}

// ensureCertManager writes a Certificate per broker and reports the
// brokers whose Secret cert-manager filled.
func (r *FelixClusterReconciler) ensureCertManager(ctx context.Context, c *felixv1.FelixCluster, brokers []string, inRange map[string]bool, duration, renewBefore time.Duration,
	fail func(reason, msg string, args ...any) (tlsObservation, error)) (tlsObservation, error) {
	obs := tlsObservation{Ready: map[string]bool{}, Issued: map[string]bool{}}
	var waiting, noIssuer []string
	filled := map[string]*x509.Certificate{}
	for _, b := range brokers {
		want := leafWant{Identity: brokerIdentity(c, b), DNSNames: brokerDNSNames(c, b), Duration: duration, RenewBefore: renewBefore}
		name := BrokerTLSSecretName(b)
		labels := brokerLabels(c.Name, b)
		if !inRange[b] {
			// Being removed: cert-manager keeps renewing what exists.
			var s corev1.Secret
			if err := r.Client.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: name}, &s); err == nil && brokerSecretOfCluster(c, tlsCertManager, b, &s) {
				obs.Ready[b] = true
			}
			continue
		}
		created, err := upsertCertificate(ctx, r.Client, c, c.Namespace, name, labels, certificateSpec(c, name, want, labels))
		switch {
		case errors.Is(err, errNotOurs):
			return fail("SecretConflict", "%v", err)
		case meta.IsNoMatchError(err):
			return fail("CertManagerMissing", "spec.security.tls.issuerRef needs cert-manager, and the cluster has no %s kind: install cert-manager", CertificateGVK.GroupKind())
		case err != nil:
			return obs, err
		}
		if created {
			r.event(c, corev1.EventTypeNormal, "CertificateRequested", "Certificates", "asked cert-manager (%s %s) for the certificate of broker %s", c.Spec.Security.TLS.IssuerRef.Kind, c.Spec.Security.TLS.IssuerRef.Name, b)
		}
		var s corev1.Secret
		err = r.Client.Get(ctx, types.NamespacedName{Namespace: c.Namespace, Name: name}, &s)
		switch {
		case err == nil && len(s.Data[SecretKeyTLSCert]) > 0 && brokerSecretOfCluster(c, tlsCertManager, b, &s):
			iss, err := issuingCA(s.Data)
			if err != nil {
				noIssuer = append(noIssuer, b)
				continue
			}
			filled[b] = iss
		case err == nil || apierrors.IsNotFound(err):
			waiting = append(waiting, b)
		default:
			return obs, err
		}
	}
	if len(filled) > 0 {
		issuers := make([]*x509.Certificate, 0, len(filled))
		for _, b := range brokers {
			if iss := filled[b]; iss != nil {
				issuers = append(issuers, iss)
			}
		}
		err := r.ensureTrustBundle(ctx, c, issuers)
		switch {
		case errors.Is(err, errNotOurs):
			return fail("SecretConflict", "%v", err)
		case err != nil:
			return obs, err
		}
		for b := range filled {
			obs.Ready[b], obs.Issued[b] = true, true
		}
	}
	switch {
	case len(noIssuer) > 0:
		msg := "the certificate Secrets of " + strings.Join(noIssuer, ", ") + " name no CA that signed them (in tls.crt after the leaf, or ca.crt): the trust bundle takes the issuing CA from there"
		obs.Condition = cond(ConditionTLSReady, false, "IssuingCAUnknown", msg)
		obs.Requeue = certificateRetry
		if prev := meta.FindStatusCondition(c.Status.Conditions, ConditionTLSReady); prev == nil || prev.Reason != "IssuingCAUnknown" {
			r.event(c, corev1.EventTypeWarning, "IssuingCAUnknown", "Certificates", "%s", msg)
		}
	case len(waiting) > 0:
		obs.Condition = cond(ConditionTLSReady, false, "WaitingForCertificates", "waiting for cert-manager to fill the certificate Secrets of "+strings.Join(waiting, ", "))
	default:
		obs.Condition = cond(ConditionTLSReady, true, "CertificatesIssued", fmt.Sprintf("%d broker certificates issued by cert-manager; trusted: the CAs that signed them (Secret %s)", len(brokers), TrustBundleSecretName(c.Name)))
	}
	return obs, nil
}

// ensureTrustBundle keeps the Secret <cluster>-trust (controlled by c)
// holding, in ca.crt, the CAs that signed the brokers' certificates
// (issuers) plus those it held already that have not expired, so leaves of
// an issuer that rotated its CA stay trusted until they are replaced.
func (r *FelixClusterReconciler) ensureTrustBundle(ctx context.Context, c *felixv1.FelixCluster, issuers []*x509.Certificate) error {
	key := types.NamespacedName{Namespace: c.Namespace, Name: TrustBundleSecretName(c.Name)}
	var sec corev1.Secret
	exists := true
	switch err := r.Client.Get(ctx, key, &sec); {
	case apierrors.IsNotFound(err):
		exists = false
	case err != nil:
		return err
	}
	if exists && !metav1.IsControlledBy(&sec, c) {
		return fmt.Errorf("%w: Secret %s", errNotOurs, key.Name)
	}
	now := r.Clock.Now()
	var bundle []*x509.Certificate
	add := func(x *x509.Certificate) {
		if x.NotAfter.After(now) && !containsCert(bundle, x) {
			bundle = append(bundle, x)
		}
	}
	for _, x := range issuers {
		add(x)
	}
	if old, err := pki.ParseCertsPEM(sec.Data[SecretKeyCACert]); exists && err == nil {
		for _, x := range old {
			add(x)
		}
	}
	data := map[string][]byte{SecretKeyCACert: pki.EncodeCertsPEM(bundle...)}
	if exists && maps.EqualFunc(sec.Data, data, bytes.Equal) {
		return nil
	}
	labels := clusterLabels(c.Name)
	labels[LabelComponent] = "ca"
	return r.writeSecret(ctx, c, &sec, exists, key, labels, corev1.SecretTypeOpaque, data)
}

// brokerSecretOfCluster reports whether s, found under a broker's
// certificate Secret name, is the cluster's: controlled by it, or (with
// cert-manager, which fills Secrets it creates itself) labelled for the
// broker and for no FelixUser by the Certificate's secretTemplate.
func brokerSecretOfCluster(c *felixv1.FelixCluster, src tlsSource, broker string, s *corev1.Secret) bool {
	if metav1.IsControlledBy(s, c) {
		return true
	}
	l := s.Labels
	return src == tlsCertManager && l[LabelCluster] == c.Name && l[LabelUser] == "" && l[LabelBroker] == broker
}

// sharedIssuerRefused reports whether the cluster names a ClusterIssuer
// without opting in (spec.security.tls.allowClusterIssuer). The CRD's
// validation refuses such a spec; this catches one stored before it.
func sharedIssuerRefused(c *felixv1.FelixCluster) bool {
	tls := c.Spec.Security.TLS
	return tls.IssuerRef != nil && tls.IssuerRef.Kind == "ClusterIssuer" && !tls.AllowClusterIssuer
}

// clusterReservedSecret reports whether name is, or may become, one of
// the cluster's own Secret names: its CA Secret <cluster>-ca, its trust
// bundle <cluster>-trust (cert-manager) or a
// broker's <cluster>-<n>-tls for any ordinal n, present or after a
// scale-up. A FelixUser of the cluster may not take one.
func clusterReservedSecret(cluster, name string) bool {
	if name == CASecretName(cluster) || name == TrustBundleSecretName(cluster) {
		return true
	}
	rest, ok := strings.CutPrefix(name, cluster+"-")
	if !ok {
		return false
	}
	n, ok := strings.CutSuffix(rest, "-tls")
	if !ok || n == "" {
		return false
	}
	for _, d := range n {
		if d < '0' || d > '9' {
			return false
		}
	}
	return true
}

// removeBrokerTLS deletes a removed broker's certificate Secret and
// Certificate.
func (r *FelixClusterReconciler) removeBrokerTLS(ctx context.Context, c *felixv1.FelixCluster, broker string) error {
	name := BrokerTLSSecretName(broker)
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: name}}
	if err := r.Client.Delete(ctx, s); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete Secret %s: %w", name, err)
	}
	if sourceOf(c) == tlsCertManager {
		return deleteCertificate(ctx, r.Client, c.Namespace, name)
	}
	return nil
}

// clusterOfSecret maps a certificate Secret (the CA's, a broker's, or one
// cert-manager filled for a broker) to its cluster by label.
func clusterOfSecret(_ context.Context, o client.Object) []reconcile.Request {
	l := o.GetLabels()
	name := l[LabelCluster]
	if name == "" || l[LabelUser] != "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
}
