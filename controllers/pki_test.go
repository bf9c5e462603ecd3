package controllers_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"fmt"
	"slices"
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

func getSecret(ns, name string) *corev1.Secret {
	var s corev1.Secret
	if err := suite.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &s); err != nil {
		return nil
	}
	return &s
}

func waitSecret(t *testing.T, ns, name string) *corev1.Secret {
	t.Helper()
	var s *corev1.Secret
	eventually(t, 20*time.Second, "Secret "+name, func() (bool, string) {
		s = getSecret(ns, name)
		return s != nil, "missing"
	})
	return s
}

func getCluster(t *testing.T, ns, name string) *felixv1.FelixCluster {
	t.Helper()
	var c felixv1.FelixCluster
	if err := suite.c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &c); err != nil {
		t.Fatalf("get cluster %s: %v", name, err)
	}
	return &c
}

// waitClusterCondition waits for the cluster's condition typ to have
// status and reason.
func waitClusterCondition(t *testing.T, ns, name, typ string, status metav1.ConditionStatus, reason string) {
	t.Helper()
	eventually(t, 20*time.Second, typ+"="+string(status)+" "+reason, func() (bool, string) {
		c := getCluster(t, ns, name)
		got := condition(c.Status.Conditions, typ)
		if got == nil {
			return false, "no condition"
		}
		return got.Status == status && got.Reason == reason, got.Reason + ": " + got.Message
	})
}

// touch changes an annotation of o so its reconciler runs now.
func touch(t *testing.T, o client.Object) {
	t.Helper()
	patch := []byte(`{"metadata":{"annotations":{"test.felix.dev/touch":"` + randHex(4) + `"}}}`)
	if err := suite.c.Patch(context.Background(), o, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatalf("touch %s: %v", o.GetName(), err)
	}
}

// verifyLeaf checks the Secret's certificate: key matches, chains to
// bundle for usage, and carries id. It returns the leaf.
func verifyLeaf(t *testing.T, s *corev1.Secret, bundle []byte, usage x509.ExtKeyUsage, id pki.Identity) *x509.Certificate {
	t.Helper()
	tc, err := pki.ParseLeaf(s.Data["tls.crt"], s.Data["tls.key"])
	if err != nil {
		t.Fatalf("Secret %s: %v", s.Name, err)
	}
	// Now, or (for a certificate issued on a test's stepped clock) its
	// first valid moment.
	at := time.Now()
	if start := tc.Leaf.NotBefore.Add(pki.ClockSkew); start.After(at) {
		at = start
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(bundle) {
		t.Fatalf("no CA in bundle")
	}
	inter := x509.NewCertPool()
	for _, raw := range tc.Certificate[1:] {
		c, _ := x509.ParseCertificate(raw)
		inter.AddCert(c)
	}
	if _, err := tc.Leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}, CurrentTime: at}); err != nil {
		t.Errorf("Secret %s: certificate does not verify for %v: %v", s.Name, usage, err)
	}
	got, err := pki.IdentityOf(tc.Leaf)
	if err != nil || got != id {
		t.Errorf("Secret %s: identity %v (%v), want %v", s.Name, got, err, id)
	}
	return tc.Leaf
}

func ownedBy(o metav1.Object, kind, name string) bool {
	for _, r := range o.GetOwnerReferences() {
		if r.Kind == kind && r.Name == name && r.Controller != nil && *r.Controller {
			return true
		}
	}
	return false
}

// TestTLS_OperatorCA: a cluster gets a CA Secret and per broker a
// certificate Secret with the broker's identity, DNS names and server and
// client usage, mounted in its pod with the TLS flags; past the renewal
// time the leaf is reissued and the CA stays.
func TestTLS_OperatorCA(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	create(t, fastCluster(ns, "sec", 2))

	caSec := waitSecret(t, ns, "sec-ca")
	ca, err := pki.ParseCA(caSec.Data["ca.crt"], caSec.Data["ca.key"])
	if err != nil {
		t.Fatalf("CA Secret: %v", err)
	}
	if !ownedBy(caSec, "FelixCluster", "sec") {
		t.Errorf("CA Secret owners %+v", caSec.OwnerReferences)
	}
	if life := ca.Cert.NotAfter.Sub(ca.Cert.NotBefore); life < 4*365*24*time.Hour {
		t.Errorf("CA lifetime %s", life)
	}
	leafSec := waitSecret(t, ns, "sec-0-tls")
	if leafSec.Type != corev1.SecretTypeTLS || !ownedBy(leafSec, "FelixCluster", "sec") {
		t.Errorf("broker Secret type %s owners %+v", leafSec.Type, leafSec.OwnerReferences)
	}
	if !bytes.Equal(leafSec.Data["ca.crt"], caSec.Data["ca.crt"]) {
		t.Error("broker ca.crt is not the cluster's trust bundle")
	}
	id := pki.Identity{Namespace: ns, Cluster: "sec", Kind: pki.KindBroker, Name: "sec-0"}
	leaf := verifyLeaf(t, leafSec, caSec.Data["ca.crt"], x509.ExtKeyUsageServerAuth, id)
	verifyLeaf(t, leafSec, caSec.Data["ca.crt"], x509.ExtKeyUsageClientAuth, id)
	wantDNS := []string{
		"sec-0.sec-brokers." + ns + ".svc", "sec-0.sec-brokers." + ns + ".svc.cluster.local",
		"sec." + ns + ".svc", "sec." + ns + ".svc.cluster.local", "sec-brokers." + ns + ".svc",
	}
	if !slices.Equal(leaf.DNSNames, wantDNS) || len(leaf.IPAddresses) != 0 {
		t.Errorf("DNS SANs %v IPs %v, want %v and no IPs", leaf.DNSNames, leaf.IPAddresses, wantDNS)
	}
	if life := leaf.NotAfter.Sub(leaf.NotBefore); life < 2160*time.Hour || life > 2161*time.Hour {
		t.Errorf("leaf lifetime %s, want the 2160h default", life)
	}
	waitClusterCondition(t, ns, "sec", controllers.ConditionTLSReady, metav1.ConditionTrue, "CertificatesIssued")
	eventually(t, 10*time.Second, "CertificateIssued event", func() (bool, string) { return hasEvent(ns, "sec", "CertificateIssued") })

	// The pod mounts its Secret and gets the TLS flags and ports.
	var pod corev1.Pod
	eventually(t, 20*time.Second, "pod sec-0", func() (bool, string) {
		err := suite.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "sec-0"}, &pod)
		return err == nil, errString(err)
	})
	var vol *corev1.Volume
	for i := range pod.Spec.Volumes {
		if v := &pod.Spec.Volumes[i]; v.Secret != nil && v.Secret.SecretName == "sec-0-tls" {
			vol = v
		}
	}
	if vol == nil || vol.Secret.DefaultMode == nil || *vol.Secret.DefaultMode&0o007 != 0 {
		t.Fatalf("pod has no Secret volume sec-0-tls without world access: %+v", pod.Spec.Volumes)
	}
	ctr := pod.Spec.Containers[0]
	mounted := slices.ContainsFunc(ctr.VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name == vol.Name && m.MountPath == controllers.TLSDir && m.ReadOnly
	})
	if !mounted {
		t.Errorf("no read-only mount of %s at %s: %+v", vol.Name, controllers.TLSDir, ctr.VolumeMounts)
	}
	if pod.Spec.SecurityContext.FSGroup == nil || *pod.Spec.SecurityContext.FSGroup != *pod.Spec.SecurityContext.RunAsGroup {
		t.Errorf("the broker's group must own the mounted files: %+v", pod.Spec.SecurityContext)
	}
	args := strings.Join(ctr.Args, " ")
	for _, want := range []string{"--tls-dir /etc/felix/tls", "--peer-listen :7102", "--advertise-peer $(POD_IP):7102", "--metrics-listen :7103", "--listen :7100", "--http :7101", "--advertise $(POD_IP):7100"} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %q", args, want)
		}
	}
	ports := map[string]int32{}
	for _, p := range ctr.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports["peer"] != 7102 || ports["metrics"] != 7103 || ports["felix"] != 7100 || ports["http"] != 7101 {
		t.Errorf("container ports %v", ports)
	}

	// Renewal: at the renewal time the leaf is reissued, the CA kept.
	fc := getCluster(t, ns, "sec")
	later := pki.RenewAt(leaf, 0).Add(time.Minute)
	ready, err := controllers.EnsureClusterTLS(ctx, suite.c, fc, later)
	if err != nil || !ready["sec-0"] || !ready["sec-1"] {
		t.Fatalf("renewal pass: ready %v err %v", ready, err)
	}
	renewed := getSecret(ns, "sec-0-tls")
	if bytes.Equal(renewed.Data["tls.crt"], leafSec.Data["tls.crt"]) || bytes.Equal(renewed.Data["tls.key"], leafSec.Data["tls.key"]) {
		t.Fatal("certificate and key not renewed past RenewAt")
	}
	newLeaf, err := pki.ParseLeaf(renewed.Data["tls.crt"], renewed.Data["tls.key"])
	if err != nil || !newLeaf.Leaf.NotAfter.After(leaf.NotAfter) {
		t.Fatalf("renewed leaf: %v", err)
	}
	if err := newLeaf.Leaf.CheckSignatureFrom(ca.Cert); err != nil {
		t.Errorf("renewed leaf not signed by the unchanged CA: %v", err)
	}
	if caNow := getSecret(ns, "sec-ca"); caNow.ResourceVersion != caSec.ResourceVersion {
		t.Error("the CA Secret changed on a leaf renewal")
	}
	// The operator on its own clock leaves the renewed certificate alone.
	rv := renewed.ResourceVersion
	touch(t, fc)
	waitClusterCondition(t, ns, "sec", controllers.ConditionTLSReady, metav1.ConditionTrue, "CertificatesIssued")
	if s := getSecret(ns, "sec-0-tls"); s.ResourceVersion != rv {
		t.Error("the operator rewrote a certificate that was not due")
	}
}

// userCA makes a CA a user brings, as a Secret with tls.crt and tls.key
// (the layout cert-manager gives a CA).
func userCA(t *testing.T, ns, name string) (*corev1.Secret, *pki.CA) {
	t.Helper()
	ca, err := pki.NewCA("user CA", time.Now(), 24*365*time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ca.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{"tls.crt": ca.CertPEM(), "tls.key": key},
	}
	return s, ca
}

// TestTLS_BringYourOwnCA: a cluster naming a missing CA Secret says so and
// starts no pod; once the Secret exists its leaves chain to it, the
// operator makes no CA of its own and never writes the user's Secret.
func TestTLS_BringYourOwnCA(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	fc := fastCluster(ns, "byo", 1)
	fc.Spec.Security.TLS.CASecret = &felixv1.SecretReference{Name: "my-ca"}
	create(t, fc)
	waitClusterCondition(t, ns, "byo", controllers.ConditionTLSReady, metav1.ConditionFalse, "CASecretMissing")
	eventually(t, 10*time.Second, "CASecretMissing event", func() (bool, string) { return hasEvent(ns, "byo", "CASecretMissing") })
	waitClusterCondition(t, ns, "byo", felixv1.ConditionProgressing, metav1.ConditionTrue, "WaitingForCertificates")
	var pods corev1.PodList
	if err := suite.c.List(ctx, &pods, client.InNamespace(ns)); err != nil || len(pods.Items) != 0 {
		t.Fatalf("a pod started without its certificate: %d (%v)", len(pods.Items), err)
	}

	sec, ca := userCA(t, ns, "my-ca")
	create(t, sec)
	touch(t, fc)
	leafSec := waitSecret(t, ns, "byo-0-tls")
	verifyLeaf(t, leafSec, ca.CertPEM(), x509.ExtKeyUsageServerAuth, pki.Identity{Namespace: ns, Cluster: "byo", Kind: pki.KindBroker, Name: "byo-0"})
	if !bytes.Equal(leafSec.Data["ca.crt"], ca.CertPEM()) {
		t.Error("ca.crt is not the user's CA")
	}
	waitClusterCondition(t, ns, "byo", controllers.ConditionTLSReady, metav1.ConditionTrue, "CertificatesIssued")
	eventually(t, 20*time.Second, "pod byo-0", func() (bool, string) {
		var p corev1.Pod
		err := suite.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "byo-0"}, &p)
		return err == nil, errString(err)
	})
	if getSecret(ns, "byo-ca") != nil {
		t.Error("the operator made a CA of its own for a cluster that brings one")
	}
	got := getSecret(ns, "my-ca")
	if got.ResourceVersion != sec.ResourceVersion || len(got.OwnerReferences) != 0 || len(got.Labels) != 0 {
		t.Errorf("the user's CA Secret was modified: %+v", got.ObjectMeta)
	}

	// An invalid CA Secret is reported; the running broker keeps its Secret.
	bad := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bad-ca"}, Data: map[string][]byte{"ca.crt": []byte("junk"), "ca.key": []byte("junk")}}
	create(t, bad)
	fc = getCluster(t, ns, "byo")
	orig := fc.DeepCopy()
	fc.Spec.Security.TLS.CASecret.Name = "bad-ca"
	if err := suite.c.Patch(ctx, fc, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	waitClusterCondition(t, ns, "byo", controllers.ConditionTLSReady, metav1.ConditionFalse, "CASecretInvalid")
	if s := getSecret(ns, "byo-0-tls"); s == nil || s.ResourceVersion != leafSec.ResourceVersion {
		t.Error("the broker's Secret changed while the CA Secret is invalid")
	}
}

// TestTLS_CertManager: with an issuerRef the operator says when
// cert-manager is missing; once the Certificate kind exists it writes a
// Certificate per broker and per FelixUser (no operator-signed leaf, no
// CA), and a pod starts once its Secret was filled.
func TestTLS_CertManager(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	fc := fastCluster(ns, "cm", 1)
	fc.Spec.Security.TLS.IssuerRef = &felixv1.IssuerReference{Name: "felix-issuer", Kind: "ClusterIssuer"}
	fc.Spec.Security.TLS.AllowClusterIssuer = true
	fc.Spec.Security.TLS.RenewBefore = &metav1.Duration{Duration: 240 * time.Hour}
	create(t, fc)
	certOf := func(name string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(controllers.CertificateGVK)
		if err := suite.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, u); err != nil {
			return nil
		}
		return u
	}
	// The suite's API server has no cert-manager until this test adds
	// the Certificate kind.
	waitClusterCondition(t, ns, "cm", controllers.ConditionTLSReady, metav1.ConditionFalse, "CertManagerMissing")
	eventually(t, 10*time.Second, "CertManagerMissing event", func() (bool, string) { return hasEvent(ns, "cm", "CertManagerMissing") })
	if _, err := envtest.InstallCRDs(suite.env.Config, envtest.CRDInstallOptions{Paths: []string{"testdata/certificate-crd.yaml"}}); err != nil {
		t.Fatalf("install Certificate CRD: %v", err)
	}
	touch(t, fc)
	var cert *unstructured.Unstructured
	eventually(t, 20*time.Second, "Certificate cm-0-tls", func() (bool, string) {
		cert = certOf("cm-0-tls")
		return cert != nil, "missing"
	})
	if !ownedBy(cert, "FelixCluster", "cm") {
		t.Errorf("Certificate owners %+v", cert.GetOwnerReferences())
	}
	spec, _ := cert.Object["spec"].(map[string]any)
	str := func(path ...string) string {
		v, _, _ := unstructured.NestedString(spec, path...)
		return v
	}
	list := func(path ...string) []string {
		v, _, _ := unstructured.NestedStringSlice(spec, path...)
		return v
	}
	if str("secretName") != "cm-0-tls" || str("issuerRef", "name") != "felix-issuer" || str("issuerRef", "kind") != "ClusterIssuer" ||
		str("issuerRef", "group") != "cert-manager.io" || str("duration") != "2160h0m0s" || str("renewBefore") != "240h0m0s" ||
		str("commonName") != "cm-0" || str("privateKey", "algorithm") != "ECDSA" {
		t.Errorf("Certificate spec %v", spec)
	}
	if uris := list("uris"); !slices.Equal(uris, []string{"felix://" + ns + "/cm/broker/cm-0"}) {
		t.Errorf("uris %v", uris)
	}
	if dns := list("dnsNames"); len(dns) != 5 || dns[0] != "cm-0.cm-brokers."+ns+".svc" {
		t.Errorf("dnsNames %v", dns)
	}
	if u := list("usages"); !slices.Equal(u, []string{"digital signature", "server auth", "client auth"}) {
		t.Errorf("usages %v", u)
	}
	labels, _, _ := unstructured.NestedStringMap(spec, "secretTemplate", "labels")
	if labels[controllers.LabelCluster] != "cm" {
		t.Errorf("secretTemplate labels %v", labels)
	}
	waitClusterCondition(t, ns, "cm", controllers.ConditionTLSReady, metav1.ConditionFalse, "WaitingForCertificates")
	if getSecret(ns, "cm-0-tls") != nil || getSecret(ns, "cm-ca") != nil {
		t.Fatal("the operator signed a certificate or made a CA although cert-manager issues them")
	}
	var pods corev1.PodList
	if err := suite.c.List(ctx, &pods, client.InNamespace(ns)); err != nil || len(pods.Items) != 0 {
		t.Fatalf("a pod started before cert-manager filled its Secret: %d (%v)", len(pods.Items), err)
	}

	// A FelixUser of the cluster gets a Certificate too, client usage only.
	create(t, &felixv1.FelixUser{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "carol"}, Spec: felixv1.FelixUserSpec{Cluster: "cm"}})
	eventually(t, 20*time.Second, "Certificate carol", func() (bool, string) {
		cert = certOf("carol")
		return cert != nil, "missing"
	})
	if !ownedBy(cert, "FelixUser", "carol") {
		t.Errorf("user Certificate owners %+v", cert.GetOwnerReferences())
	}
	spec, _ = cert.Object["spec"].(map[string]any)
	if u := list("usages"); !slices.Equal(u, []string{"digital signature", "client auth"}) || str("secretName") != "carol" {
		t.Errorf("user Certificate spec %v", spec)
	}
	if _, ok := spec["dnsNames"]; ok {
		t.Errorf("user Certificate has DNS names: %v", spec)
	}
	var carol felixv1.FelixUser
	if err := suite.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "carol"}, &carol); err != nil {
		t.Fatal(err)
	}
	if sn := str("subject", "serialNumber"); sn == "" || sn != string(carol.UID) {
		t.Errorf("user Certificate subject.serialNumber %q, want the FelixUser's uid %q", sn, carol.UID)
	}
	if _, ok, _ := unstructured.NestedString(certOf("cm-0-tls").Object, "spec", "subject", "serialNumber"); ok {
		t.Error("a broker Certificate carries a uid")
	}

	// cert-manager fills the Secret (with the template's labels): the pod starts.
	sec, ca := userCA(t, ns, "unused")
	cmCA, err := pki.ParseCA(sec.Data["tls.crt"], sec.Data["tls.key"])
	if err != nil {
		t.Fatal(err)
	}
	crt, key, err := cmCA.Issue(pki.LeafRequest{Identity: pki.Identity{Namespace: ns, Cluster: "cm", Kind: pki.KindBroker, Name: "cm-0"}, Now: time.Now(), Validity: time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	create(t, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm-0-tls", Labels: labels},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{"tls.crt": crt, "tls.key": key, "ca.crt": ca.CertPEM()},
	})
	eventually(t, 20*time.Second, "pod cm-0", func() (bool, string) {
		var p corev1.Pod
		err := suite.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "cm-0"}, &p)
		return err == nil, errString(err)
	})
	waitClusterCondition(t, ns, "cm", controllers.ConditionTLSReady, metav1.ConditionTrue, "CertificatesIssued")
	if s := getSecret(ns, "cm-0-tls"); !bytes.Equal(s.Data["tls.crt"], crt) {
		t.Error("the operator rewrote the Secret cert-manager filled")
	}

	// A user certificate not bound to carol's uid (an issuer that drops
	// subject.serialNumber, or one left from an earlier carol) is not
	// Ready; once it carries the uid, carol is.
	carolReason := func() (string, string) {
		var u felixv1.FelixUser
		if err := suite.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "carol"}, &u); err != nil {
			return "", err.Error()
		}
		c := condition(u.Status.Conditions, felixv1.ConditionReady)
		if c == nil {
			return "", "no condition"
		}
		return c.Reason, c.Message
	}
	userLabels, _, _ := unstructured.NestedStringMap(certOf("carol").Object, "spec", "secretTemplate", "labels")
	uc, uk, err := cmCA.Issue(pki.LeafRequest{Identity: pki.Identity{Namespace: ns, Cluster: "cm", Kind: pki.KindUser, Name: "carol"}, Now: time.Now(), Validity: time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	carolSecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "carol", Labels: userLabels}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{"tls.crt": uc, "tls.key": uk, "ca.crt": ca.CertPEM()}}
	create(t, carolSecret)
	eventually(t, 20*time.Second, "carol CertificateNotBound", func() (bool, string) {
		r, m := carolReason()
		return r == "CertificateNotBound", r + ": " + m
	})
	uc, uk, err = cmCA.Issue(pki.LeafRequest{Identity: pki.Identity{Namespace: ns, Cluster: "cm", Kind: pki.KindUser, Name: "carol"}, UID: string(carol.UID), Now: time.Now(), Validity: time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	carolSecret.Data = map[string][]byte{"tls.crt": uc, "tls.key": uk, "ca.crt": ca.CertPEM()}
	if err := suite.c.Update(ctx, carolSecret); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "carol CertificateIssued", func() (bool, string) {
		r, m := carolReason()
		return r == "CertificateIssued", r + ": " + m
	})
}

// TestUser_Certificate: a FelixUser of a missing cluster is not Ready
// (ClusterNotFound) until the cluster exists; then it gets a Secret named
// like it, owned by it, whose certificate has identity user/<name>,
// client usage only and chains to the cluster's CA, and a status naming
// all that.
func TestUser_Certificate(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	u := &felixv1.FelixUser{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "alice"}, Spec: felixv1.FelixUserSpec{Cluster: "uc"}}
	create(t, u)
	getUser := func() *felixv1.FelixUser {
		var got felixv1.FelixUser
		if err := suite.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "alice"}, &got); err != nil {
			t.Fatal(err)
		}
		return &got
	}
	waitUser := func(status metav1.ConditionStatus, reason string) *felixv1.FelixUser {
		t.Helper()
		var got *felixv1.FelixUser
		eventually(t, 20*time.Second, "user Ready="+string(status)+" "+reason, func() (bool, string) {
			got = getUser()
			c := condition(got.Status.Conditions, felixv1.ConditionReady)
			if c == nil {
				return false, "no condition"
			}
			return c.Status == status && c.Reason == reason, c.Reason + ": " + c.Message
		})
		return got
	}
	waitUser(metav1.ConditionFalse, "ClusterNotFound")

	create(t, fastCluster(ns, "uc", 1))
	got := waitUser(metav1.ConditionTrue, "CertificateIssued")
	sec := waitSecret(t, ns, "alice")
	caSec := waitSecret(t, ns, "uc-ca")
	id := pki.Identity{Namespace: ns, Cluster: "uc", Kind: pki.KindUser, Name: "alice"}
	leaf := verifyLeaf(t, sec, caSec.Data["ca.crt"], x509.ExtKeyUsageClientAuth, id)
	if !slices.Equal(leaf.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) || len(leaf.DNSNames) != 0 {
		t.Errorf("user certificate EKU %v DNS %v, want client auth only and no DNS names", leaf.ExtKeyUsage, leaf.DNSNames)
	}
	if uid := pki.UIDOf(leaf); uid == "" || uid != string(got.UID) {
		t.Errorf("user certificate bound to uid %q, want the FelixUser's %q", uid, got.UID)
	}
	if !bytes.Equal(sec.Data["ca.crt"], caSec.Data["ca.crt"]) || sec.Type != corev1.SecretTypeTLS {
		t.Errorf("user Secret ca.crt/type %s", sec.Type)
	}
	if got.Status.SecretName != "alice" || got.Status.Identity != id.String() || got.Status.NotAfter == nil ||
		!got.Status.NotAfter.Time.Equal(leaf.NotAfter) || got.Status.ObservedGeneration != got.Generation {
		t.Errorf("status %+v (leaf NotAfter %s)", got.Status, leaf.NotAfter)
	}
	// Deleting the user deletes the Secret by garbage collection (not run
	// by envtest): the Secret is controlled by the user.
	if !ownedBy(sec, "FelixUser", "alice") || sec.OwnerReferences[0].UID != got.UID {
		t.Errorf("user Secret owners %+v", sec.OwnerReferences)
	}
	eventually(t, 10*time.Second, "CertificateIssued event", func() (bool, string) { return hasEvent(ns, "alice", "CertificateIssued") })

	// Renewal: past RenewAt the user gets a new certificate and key.
	reason, notAfter, err := controllers.EnsureUserCertificate(ctx, suite.c, got, pki.RenewAt(leaf, 0).Add(time.Minute))
	if err != nil || reason != "CertificateIssued" || !notAfter.After(leaf.NotAfter) {
		t.Fatalf("renewal pass: %s %s %v", reason, notAfter, err)
	}
	renewed := getSecret(ns, "alice")
	if bytes.Equal(renewed.Data["tls.key"], sec.Data["tls.key"]) {
		t.Fatal("user key not renewed past RenewAt")
	}
	verifyLeaf(t, renewed, caSec.Data["ca.crt"], x509.ExtKeyUsageClientAuth, id)

	// A Secret of the user's name that is not the user's is left alone.
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bob"}, Data: map[string][]byte{"x": []byte("y")}})
	create(t, &felixv1.FelixUser{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bob"}, Spec: felixv1.FelixUserSpec{Cluster: "uc"}})
	eventually(t, 20*time.Second, "bob SecretConflict", func() (bool, string) {
		var b felixv1.FelixUser
		if err := suite.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "bob"}, &b); err != nil {
			return false, err.Error()
		}
		c := condition(b.Status.Conditions, felixv1.ConditionReady)
		if c == nil {
			return false, "no condition"
		}
		return c.Reason == "SecretConflict", c.Reason
	})
	if s := getSecret(ns, "bob"); string(s.Data["x"]) != "y" || len(s.Data) != 1 {
		t.Error("the operator wrote a Secret that is not its own")
	}
	if err := suite.c.Delete(ctx, u); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}

// TestUser_RecreatedGetsNewCertificate: a FelixUser deleted and created
// again under the same name is another object (a new uid). Its Secret,
// left over from the earlier user (envtest runs no garbage collector; in
// a cluster the collector may not have run yet either), is taken over:
// controlled by the new user, with a certificate bound to the new uid,
// so that the earlier user's certificate, bound to the old uid, is
// refused by brokers.
func TestUser_RecreatedGetsNewCertificate(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	create(t, fastCluster(ns, "rc", 1))
	newUser := func() *felixv1.FelixUser {
		return &felixv1.FelixUser{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "dave"}, Spec: felixv1.FelixUserSpec{Cluster: "rc"}}
	}
	// boundTo waits until dave's Secret holds a certificate bound to uid,
	// controlled by that FelixUser, and dave is Ready.
	boundTo := func(uid types.UID) *x509.Certificate {
		t.Helper()
		var leaf *x509.Certificate
		eventually(t, 20*time.Second, "dave's certificate bound to "+string(uid), func() (bool, string) {
			s := getSecret(ns, "dave")
			if s == nil {
				return false, "no Secret"
			}
			tc, err := pki.ParseLeaf(s.Data["tls.crt"], s.Data["tls.key"])
			if err != nil {
				return false, err.Error()
			}
			ctl := metav1.GetControllerOf(s)
			if ctl == nil || ctl.UID != uid || len(s.OwnerReferences) != 1 {
				return false, fmt.Sprintf("owners %+v", s.OwnerReferences)
			}
			var u felixv1.FelixUser
			if err := suite.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "dave"}, &u); err != nil {
				return false, err.Error()
			}
			c := condition(u.Status.Conditions, felixv1.ConditionReady)
			if c == nil || c.Reason != "CertificateIssued" {
				return false, fmt.Sprintf("condition %+v", c)
			}
			leaf = tc.Leaf
			return pki.UIDOf(tc.Leaf) == string(uid), "uid " + pki.UIDOf(tc.Leaf)
		})
		return leaf
	}
	first := newUser()
	create(t, first)
	oldLeaf := boundTo(first.UID)

	if err := suite.c.Delete(ctx, first); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "dave gone", func() (bool, string) {
		var u felixv1.FelixUser
		err := suite.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "dave"}, &u)
		return apierrors.IsNotFound(err), errString(err)
	})
	if getSecret(ns, "dave") == nil {
		t.Fatal("the test needs the earlier user's Secret to be left over")
	}
	second := newUser()
	create(t, second)
	if second.UID == first.UID {
		t.Fatal("recreated user has the same uid")
	}
	newLeaf := boundTo(second.UID)
	if newLeaf.SerialNumber.Cmp(oldLeaf.SerialNumber) == 0 {
		t.Fatal("certificate not reissued")
	}
	eventually(t, 10*time.Second, "SecretTakenOver event", func() (bool, string) { return hasEvent(ns, "dave", "SecretTakenOver") })
}

// TestTLS_ForeignSecretIsNotTouched: a Secret named like the cluster's CA
// that the operator did not make is reported, not overwritten.
func TestTLS_ForeignSecretIsNotTouched(t *testing.T) {
	ns := namespace(t)
	foreign := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fs-ca"}, Data: map[string][]byte{"x": []byte("y")}}
	create(t, foreign)
	create(t, fastCluster(ns, "fs", 1))
	waitClusterCondition(t, ns, "fs", controllers.ConditionTLSReady, metav1.ConditionFalse, "SecretConflict")
	if s := getSecret(ns, "fs-ca"); s.ResourceVersion != foreign.ResourceVersion {
		t.Error("the operator wrote a Secret it does not own")
	}
	if getSecret(ns, "fs-0-tls") != nil {
		t.Error("a certificate was issued without the cluster's CA")
	}
}
