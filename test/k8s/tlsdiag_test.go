package k8s_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"
)

// tlsDiagnosis describes, for a failed TLS handshake between a client
// holding user's Secret and cluster's brokers, what each side holds: the
// CA the user's Secret trusts, the cluster's CA Secret, each broker's
// certificate Secret, and the certificate each ready endpoint of the
// cluster's Service presents when dialled from the node. It never fails
// the test itself: it is what the failure message carries.
func tlsDiagnosis(t *testing.T, e env, cluster, user string, failure error) string {
	t.Helper()
	var b strings.Builder
	// What scrolls away first comes first: CI keeps the end of the output,
	// so the comparison that decides goes last.
	pods := e.exec("", e.kubectlBin, "-n", appNS, "get", "pods", "-o",
		"custom-columns=NAME:.metadata.name,IP:.status.podIP,PHASE:.status.phase,DELETING:.metadata.deletionTimestamp,CREATED:.metadata.creationTimestamp")
	fmt.Fprintf(&b, "  pods:\n%s\n", pods.out)
	brokers := e.exec("", e.kubectlBin, "-n", appNS, "get", "felixbrokers", "-o",
		`jsonpath={range .items[*]}{.metadata.name} {.status.address}{"\n"}{end}`)
	fmt.Fprintf(&b, "  registered client addresses:\n%s\n", brokers.out)
	secret := func(name, key string) {
		r := e.exec("", e.kubectlBin, "-n", appNS, "get", "secret", name, "-o",
			`jsonpath={.metadata.creationTimestamp} {.metadata.resourceVersion} {.data.`+strings.ReplaceAll(key, ".", `\.`)+`}`)
		if r.err != nil {
			fmt.Fprintf(&b, "  secret %s: %v %s\n", name, r.err, strings.TrimSpace(r.errOut))
			return
		}
		f := strings.Fields(r.out)
		if len(f) != 3 {
			fmt.Fprintf(&b, "  secret %s: %q\n", name, r.out)
			return
		}
		raw, err := base64.StdEncoding.DecodeString(f[2])
		if err != nil {
			fmt.Fprintf(&b, "  secret %s %s: %v\n", name, key, err)
			return
		}
		fmt.Fprintf(&b, "  secret %s (created %s, rv %s) %s: %s\n", name, f[0], f[1], key, describePEM(raw))
	}
	for i := 0; i < 3; i++ {
		secret(fmt.Sprintf("%s-%d-tls", cluster, i), "tls.crt")
	}
	secret(user, "tls.crt")
	eps := e.exec("", e.kubectlBin, "-n", appNS, "get", "endpointslices", "-l", "kubernetes.io/service-name="+cluster, "-o",
		`jsonpath={range .items[*].endpoints[*]}{.addresses[0]} {.targetRef.name} {.conditions.ready}{"\n"}{end}`)
	fmt.Fprintf(&b, "  endpoints of Service %s:\n", cluster)
	for _, line := range strings.Split(strings.TrimSpace(eps.out), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		fmt.Fprintf(&b, "    %s (%s): presents %s\n", f[0], strings.Join(f[1:], " "), presented(net.JoinHostPort(f[0], "7100")))
	}
	svc := e.exec("", e.kubectlBin, "-n", appNS, "get", "service", cluster, "-o", "jsonpath={.spec.clusterIP}")
	if ip := strings.TrimSpace(svc.out); ip != "" {
		fmt.Fprintf(&b, "  Service %s at %s presents %s\n", cluster, ip, presented(net.JoinHostPort(ip, "7100")))
	}
	// The decisive comparison: the CA the client trusted, the cluster's
	// CA, and what the address the client failed on presents now (and
	// which pod holds that address).
	secret(user, "ca.crt")
	secret(cluster+"-ca", "ca.crt")
	if m := handshakeAddr.FindStringSubmatch(failure.Error()); m != nil {
		host, _, _ := net.SplitHostPort(m[1])
		owner := "no pod"
		for _, line := range strings.Split(pods.out, "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[1] == host {
				owner = "pod " + f[0]
			}
		}
		fmt.Fprintf(&b, "  the client failed on %s (%s), which presents %s\n", m[1], owner, presented(m[1]))
	}
	return b.String()
}

// handshakeAddr finds the address in a client's TLS handshake error
// (client.HandshakeError).
var handshakeAddr = regexp.MustCompile(`TLS handshake with ([^ :]+:[0-9]+)`)

// presented dials addr and describes the certificate chain it presents,
// without verifying it.
func presented(addr string) string {
	d := &net.Dialer{Timeout: 5 * time.Second}
	conn, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // a diagnosis reads what is presented
	if err != nil {
		// A broker that requires a client certificate may end the
		// handshake after sending its own; the error says so.
		return "no chain (" + err.Error() + ")"
	}
	defer conn.Close()
	var parts []string
	for _, c := range conn.ConnectionState().PeerCertificates {
		parts = append(parts, describeCert(c))
	}
	return strings.Join(parts, " <- ")
}

// describePEM describes every certificate of a PEM bundle.
func describePEM(raw []byte) string {
	var parts []string
	for {
		var blk *pem.Block
		blk, raw = pem.Decode(raw)
		if blk == nil {
			break
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			parts = append(parts, err.Error())
			continue
		}
		parts = append(parts, describeCert(c))
	}
	return "[" + strings.Join(parts, "; ") + "]"
}

func describeCert(c *x509.Certificate) string {
	return fmt.Sprintf("subject %q issuer %q serial %s key %x by %x valid %s..%s", c.Subject.String(), c.Issuer.String(),
		c.SerialNumber.Text(16), short(c.SubjectKeyId), short(c.AuthorityKeyId), c.NotBefore.UTC().Format(time.RFC3339), c.NotAfter.UTC().Format(time.RFC3339))
}

// short is the first bytes of a key id: enough to tell two CAs apart.
func short(id []byte) []byte {
	return id[:min(len(id), 6)]
}
