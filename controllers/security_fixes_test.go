package controllers_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/controllers"
	"felix.dev/felix/internal/pki"
)

// TestTLS_SharedIssuerRefused: a ClusterIssuer is refused by the CRD
// unless spec.security.tls.allowClusterIssuer is set, and by the operator
// (TLSReady=False SharedIssuerRefused) for a spec stored before the rule.
func TestTLS_SharedIssuerRefused(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	fc := fastCluster(ns, "si", 1)
	fc.Spec.Security.TLS.IssuerRef = &felixv1.IssuerReference{Name: "shared", Kind: "ClusterIssuer"}
	if err := suite.c.Create(ctx, fc.DeepCopy()); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "allowClusterIssuer") {
		t.Fatalf("create with a ClusterIssuer and no opt-in: %v; want refused", err)
	}
	ok := fc.DeepCopy()
	ok.Name = "si-ok"
	ok.Spec.Security.TLS.AllowClusterIssuer = true
	create(t, ok)
	is := fc.DeepCopy()
	is.Name = "si-ns"
	is.Spec.Security.TLS.IssuerRef.Kind = "Issuer"
	create(t, is)

	reason, ready, err := controllers.ClusterTLSCondition(ctx, suite.c, fc, time.Now())
	if err != nil || reason != "SharedIssuerRefused" || len(ready) != 0 {
		t.Errorf("operator on a stored ClusterIssuer spec without opt-in: %q %v %v; want SharedIssuerRefused", reason, ready, err)
	}
}

// TestTLS_UserCannotTakeBrokerSecretName: a FelixUser named like a
// broker Secret the cluster will need after a scale-up is refused
// (NameConflict), and a Secret of that name the cluster does not control
// is never counted as the broker's certificate: its pod does not start.
func TestTLS_UserCannotTakeBrokerSecretName(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	create(t, fastCluster(ns, "nc", 1))
	waitSecret(t, ns, "nc-0-tls")
	create(t, &felixv1.FelixUser{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nc-1-tls"}, Spec: felixv1.FelixUserSpec{Cluster: "nc"}})
	eventually(t, 20*time.Second, "user nc-1-tls NameConflict", func() (bool, string) {
		var u felixv1.FelixUser
		if err := suite.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "nc-1-tls"}, &u); err != nil {
			return false, err.Error()
		}
		c := condition(u.Status.Conditions, felixv1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == "NameConflict", "not yet"
	})
	if getSecret(ns, "nc-1-tls") != nil {
		t.Fatal("the refused user got a Secret")
	}
	for _, name := range []string{"nc-ca", "nc-0-tls", "nc-7-tls"} {
		u := &felixv1.FelixUser{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: felixv1.FelixUserSpec{Cluster: "nc"}}
		if reason, _, err := controllers.EnsureUserCertificate(ctx, suite.c, u, time.Now()); err != nil || reason != "NameConflict" {
			t.Errorf("user %s: %q %v; want NameConflict", name, reason, err)
		}
	}

	// A Secret of the name made before the check (a user's, say), with a
	// certificate: the scale-up reports the conflict and starts no pod on it.
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nc-1-tls"}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{"tls.crt": []byte("someone's"), "tls.key": []byte("key")}})
	c := getCluster(t, ns, "nc")
	orig := c.DeepCopy()
	c.Spec.Brokers = 2
	if err := suite.c.Patch(ctx, c, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	waitClusterCondition(t, ns, "nc", controllers.ConditionTLSReady, metav1.ConditionFalse, "SecretConflict")
	waitClusterCondition(t, ns, "nc", felixv1.ConditionProgressing, metav1.ConditionTrue, "WaitingForCertificates")
	var p corev1.Pod
	if err := suite.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "nc-1"}, &p); !apierrors.IsNotFound(err) {
		t.Errorf("pod nc-1 was created on a Secret the cluster does not control (%v)", err)
	}
}

// TestTLS_InvalidOperatorCAIsReported: the operator's CA Secret turned
// unusable is reported (TLSReady=False CASecretInvalid, an event), not
// replaced with a new CA.
func TestTLS_InvalidOperatorCAIsReported(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	create(t, fastCluster(ns, "ic", 1))
	waitSecret(t, ns, "ic-0-tls")
	waitClusterCondition(t, ns, "ic", controllers.ConditionTLSReady, metav1.ConditionTrue, "CertificatesIssued")
	ca := waitSecret(t, ns, "ic-ca")
	ca.Data["ca.crt"] = []byte("junk")
	if err := suite.c.Update(ctx, ca); err != nil {
		t.Fatal(err)
	}
	waitClusterCondition(t, ns, "ic", controllers.ConditionTLSReady, metav1.ConditionFalse, "CASecretInvalid")
	eventually(t, 10*time.Second, "CASecretInvalid event", func() (bool, string) { return hasEvent(ns, "ic", "CASecretInvalid") })
	if s := getSecret(ns, "ic-ca"); s == nil || string(s.Data["ca.crt"]) != "junk" {
		t.Error("the operator replaced the unusable CA Secret")
	}
}

// TestCluster_RollSkipsBrokersWithoutCertificate: a rolling update does
// not replace the pod of a broker whose certificate cannot be issued (its
// CA Secret is gone), and goes on once it can.
func TestCluster_RollSkipsBrokersWithoutCertificate(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	sec, _ := userCA(t, ns, "rt-ca-src")
	create(t, sec.DeepCopy())
	fc := fastCluster(ns, "rt", 1)
	fc.Spec.Security.TLS.CASecret = &felixv1.SecretReference{Name: "rt-ca-src"}
	create(t, fc)
	waitForBrokers(t, ns, "rt", 1)
	startBroker(t, ns, "rt", 0)
	eventually(t, 20*time.Second, "pod rt-0", func() (bool, string) { return podImage(ns, "rt-0") != "", "missing" })
	markPodReady(t, ns, "rt-0")
	eventually(t, 20*time.Second, "broker rt-0 Up", func() (bool, string) {
		b := getBroker(t, ns, "rt-0")
		return b.Status.State == felixv1.BrokerUp, string(b.Status.State)
	})

	if err := suite.c.Delete(ctx, getSecret(ns, "rt-ca-src")); err != nil {
		t.Fatal(err)
	}
	touch(t, getCluster(t, ns, "rt"))
	waitClusterCondition(t, ns, "rt", controllers.ConditionTLSReady, metav1.ConditionFalse, "CASecretMissing")
	c := getCluster(t, ns, "rt")
	orig := c.DeepCopy()
	c.Spec.Image = "felix:v2"
	if err := suite.c.Patch(ctx, c, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "roll waiting", func() (bool, string) {
		c := getCluster(t, ns, "rt")
		p := condition(c.Status.Conditions, felixv1.ConditionProgressing)
		if p == nil {
			return false, "no Progressing condition"
		}
		return c.Status.ObservedGeneration == c.Generation && p.Reason == "RollingUpdate" && strings.Contains(p.Message, "certificates"), p.Reason + ": " + p.Message
	})
	if img := podImage(ns, "rt-0"); img != "felix:test" {
		t.Fatalf("pod rt-0 replaced (image %q) while its certificate cannot be issued", img)
	}

	create(t, sec.DeepCopy())
	touch(t, getCluster(t, ns, "rt"))
	eventually(t, 20*time.Second, "pod rt-0 on the new spec", func() (bool, string) {
		img := podImage(ns, "rt-0")
		return img == "felix:v2", img
	})
}

// intermediateCA makes a CA signed by parent, as an issuer's CA under a
// shared root is.
func intermediateCA(t *testing.T, parent *pki.CA, cn string) *pki.CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent.Cert, key.Public(), parent.Key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &pki.CA{Cert: cert, Key: key}
}

// TestTLS_CertManagerTrustsTheIssuingCA: with cert-manager the brokers
// trust the CA that signed their certificates (from the issued chain, in
// the Secret <cluster>-trust their pods mount as ca.crt), not the root
// cert-manager writes into ca.crt: a certificate of the cluster's
// identity from another CA under the same root is not trusted.
func TestTLS_CertManagerTrustsTheIssuingCA(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	if _, err := envtest.InstallCRDs(suite.env.Config, envtest.CRDInstallOptions{Paths: []string{"testdata/certificate-crd.yaml"}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("install Certificate CRD: %v", err)
	}
	fc := fastCluster(ns, "ta", 1)
	fc.Spec.Security.TLS.IssuerRef = &felixv1.IssuerReference{Name: "ta-issuer"}
	create(t, fc)
	root, err := pki.NewCA("shared root", time.Now(), 24*time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	issuer, other := intermediateCA(t, root, "ta issuer"), intermediateCA(t, root, "someone else's issuer")
	id := pki.Identity{Namespace: ns, Cluster: "ta", Kind: pki.KindBroker, Name: "ta-0"}
	crt, key, err := issuer.Issue(pki.LeafRequest{Identity: id, Now: time.Now(), Validity: time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	forged, _, err := other.Issue(pki.LeafRequest{Identity: id, Now: time.Now(), Validity: time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var labels map[string]string
	eventually(t, 20*time.Second, "Certificate ta-0-tls", func() (bool, string) {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(controllers.CertificateGVK)
		if err := suite.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "ta-0-tls"}, u); err != nil {
			return false, err.Error()
		}
		labels, _, _ = unstructured.NestedStringMap(u.Object, "spec", "secretTemplate", "labels")
		return true, ""
	})
	// As cert-manager fills it: the chain up to the root in tls.crt, the
	// root in ca.crt.
	create(t, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ta-0-tls", Labels: labels},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{"tls.crt": append(crt, root.CertPEM()...), "tls.key": key, "ca.crt": root.CertPEM()},
	})
	waitClusterCondition(t, ns, "ta", controllers.ConditionTLSReady, metav1.ConditionTrue, "CertificatesIssued")
	trust := waitSecret(t, ns, controllers.TrustBundleSecretName("ta"))
	if !ownedBy(trust, "FelixCluster", "ta") {
		t.Errorf("trust bundle owners %+v", trust.OwnerReferences)
	}
	anchors, err := pki.ParseCertsPEM(trust.Data["ca.crt"])
	if err != nil || len(anchors) != 1 || !anchors[0].Equal(issuer.Cert) {
		t.Fatalf("trust bundle holds %d certificates (%v); want the issuing CA only", len(anchors), err)
	}
	var p corev1.Pod
	eventually(t, 20*time.Second, "pod ta-0", func() (bool, string) {
		err := suite.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "ta-0"}, &p)
		return err == nil, errString(err)
	})
	mounted := map[string]string{}
	for _, v := range p.Spec.Volumes {
		if v.Name == "tls" && v.Projected != nil {
			for _, s := range v.Projected.Sources {
				for _, it := range s.Secret.Items {
					mounted[it.Path] = s.Secret.Name
				}
			}
		}
	}
	if mounted["ca.crt"] != "ta-trust" || mounted["tls.crt"] != "ta-0-tls" || mounted["tls.key"] != "ta-0-tls" {
		t.Errorf("broker pod mounts %v; want tls.crt and tls.key of ta-0-tls, ca.crt of ta-trust", mounted)
	}

	// What the broker loads: its own certificate verifies, the forged one
	// (same identity, same root, another CA) does not.
	dir := t.TempDir()
	for name, b := range map[string][]byte{"tls.crt": append(crt, root.CertPEM()...), "tls.key": key, "ca.crt": trust.Data["ca.crt"]} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	src, err := pki.NewSource(pki.SourceOptions{Files: pki.DirFiles(dir)})
	if err != nil {
		t.Fatalf("the broker refuses its mounted files: %v", err)
	}
	_, pool, err := src.Current()
	if err != nil {
		t.Fatal(err)
	}
	verify := func(chain []byte) error {
		certs, err := pki.ParseCertsPEM(chain)
		if err != nil {
			return err
		}
		inter := x509.NewCertPool()
		for _, c := range certs[1:] {
			inter.AddCert(c)
		}
		_, err = certs[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
		return err
	}
	if err := verify(crt); err != nil {
		t.Errorf("the cluster's own certificate: %v", err)
	}
	if err := verify(append(forged, root.CertPEM()...)); err == nil {
		t.Error("a certificate of another CA under the same root is trusted")
	}
}
