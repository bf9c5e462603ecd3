package controllers

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/internal/pki"
)

// CertificateGVK is cert-manager's Certificate kind. The operator writes
// it as unstructured data: cert-manager is not a Go dependency, and only
// clusters with spec.security.tls.issuerRef need it installed.
var CertificateGVK = schema.GroupVersionKind{Group: "cert-manager.io", Version: "v1", Kind: "Certificate"}

// LabelUser names the FelixUser a Secret belongs to.
const LabelUser = "felix.dev/user"

// certificateSpec is the spec of the cert-manager Certificate for a leaf:
// the same subject (with the object uid as subject.serialNumber, where
// pki.UIDOf reads it, when want.UID is set), SANs and usages Issue would
// give it, a fresh ECDSA
// P-256 key at every renewal, and the Secret labels the operator selects
// on (secretTemplate), so it sees cert-manager fill the Secret.
func certificateSpec(c *felixv1.FelixCluster, secretName string, want leafWant, secretLabels map[string]string) map[string]any {
	ref := c.Spec.Security.TLS.IssuerRef
	kind, group := ref.Kind, ref.Group
	if kind == "" {
		kind = "Issuer"
	}
	if group == "" {
		group = "cert-manager.io"
	}
	usages := []any{"digital signature"}
	for _, u := range pki.ExtKeyUsages(want.Identity.Kind) {
		switch u {
		case x509.ExtKeyUsageServerAuth:
			usages = append(usages, "server auth")
		case x509.ExtKeyUsageClientAuth:
			usages = append(usages, "client auth")
		}
	}
	dns := make([]any, 0, len(want.DNSNames))
	for _, d := range want.DNSNames {
		dns = append(dns, d)
	}
	labels := map[string]any{}
	for k, v := range secretLabels {
		labels[k] = v
	}
	subject := map[string]any{"organizations": []any{"felix:" + want.Identity.Namespace + "/" + want.Identity.Cluster}}
	if want.UID != "" {
		subject["serialNumber"] = want.UID
	}
	spec := map[string]any{
		"secretName":     secretName,
		"secretTemplate": map[string]any{"labels": labels},
		"commonName":     want.Identity.Name,
		"subject":        subject,
		"uris":           []any{want.Identity.URI().String()},
		"usages":         usages,
		"duration":       want.Duration.String(),
		"privateKey":     map[string]any{"algorithm": "ECDSA", "size": int64(256), "rotationPolicy": "Always"},
		"issuerRef":      map[string]any{"name": ref.Name, "kind": kind, "group": group},
	}
	if len(dns) > 0 {
		spec["dnsNames"] = dns
	}
	if want.RenewBefore > 0 {
		spec["renewBefore"] = want.RenewBefore.String()
	}
	return spec
}

// errNoIssuingCA: a certificate Secret names no CA that signed its leaf.
var errNoIssuingCA = errors.New("no CA in the Secret signed its certificate")

// issuingCA returns the CA certificate that signed the leaf of a Secret
// cert-manager filled: the first of tls.crt's further certificates, then
// of ca.crt's, that is a CA and whose key verifies the leaf's signature.
// That is the anchor a cluster trusts, not ca.crt as such, which is the
// top of the issuer's chain and may sign others' certificates too.
func issuingCA(data map[string][]byte) (*x509.Certificate, error) {
	chain, err := pki.ParseCertsPEM(data[SecretKeyTLSCert])
	if err != nil {
		return nil, err
	}
	cands := chain[1:]
	if roots, err := pki.ParseCertsPEM(data[SecretKeyCACert]); err == nil {
		cands = append(cands[:len(cands):len(cands)], roots...)
	}
	for _, x := range cands {
		if x.IsCA && chain[0].CheckSignatureFrom(x) == nil {
			return x, nil
		}
	}
	return nil, errNoIssuingCA
}

// upsertCertificate creates or updates the Certificate name (controlled
// by owner) to have spec. A cluster without the Certificate kind yields
// an error meta.IsNoMatchError recognizes.
func upsertCertificate(ctx context.Context, cl client.Client, owner client.Object, namespace, name string, labels map[string]string, spec map[string]any) (created bool, err error) {
	cur := &unstructured.Unstructured{}
	cur.SetGroupVersionKind(CertificateGVK)
	err = cl.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, cur)
	switch {
	case apierrors.IsNotFound(err):
		obj := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
		obj.SetGroupVersionKind(CertificateGVK)
		obj.SetNamespace(namespace)
		obj.SetName(name)
		obj.SetLabels(labels)
		if err := controllerutil.SetControllerReference(owner, obj, cl.Scheme()); err != nil {
			return false, err
		}
		if err := cl.Create(ctx, obj, client.FieldOwner(OperatorFieldManager)); err != nil {
			return false, fmt.Errorf("create Certificate %s: %w", name, err)
		}
		return true, nil
	case err != nil:
		return false, err
	}
	if !metav1.IsControlledBy(cur, owner) {
		return false, fmt.Errorf("%w: Certificate %s", errNotOurs, name)
	}
	// Compare through a JSON round trip of the same shape: what the API
	// server returns is what we sent plus defaults cert-manager does not
	// add (it has no defaulting webhook for these fields).
	want := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	if equality.Semantic.DeepEqual(normalize(cur.Object["spec"]), normalize(want.Object["spec"])) {
		return false, nil
	}
	cur.Object["spec"] = spec
	if err := cl.Update(ctx, cur, client.FieldOwner(OperatorFieldManager)); err != nil {
		return false, fmt.Errorf("update Certificate %s: %w", name, err)
	}
	return false, nil
}

// deleteCertificate deletes a Certificate; a missing one or a missing
// Certificate kind is not an error.
func deleteCertificate(ctx context.Context, cl client.Client, namespace, name string) error {
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(CertificateGVK)
	obj.SetNamespace(namespace)
	obj.SetName(name)
	err := cl.Delete(ctx, obj)
	if err == nil || apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
		return nil
	}
	return fmt.Errorf("delete Certificate %s: %w", name, err)
}

// normalize makes JSON-ish values comparable: int and int64 and float64
// numbers compare equal.
func normalize(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = normalize(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = normalize(e)
		}
		return out
	case int:
		return float64(x)
	case int64:
		return float64(x)
	case float64:
		return x
	default:
		return v
	}
}

// certificateRetry is how often a cluster or user whose certificates
// cannot be made yet (cert-manager missing, a CA Secret missing or
// invalid) looks again; the watches also trigger it.
const certificateRetry = time.Minute
