package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// tlsFiles are the PEM files of a bench run with --tls: a CA, the
// servers' certificate (client port and routes, for 127.0.0.1) and the
// publishers' client certificate.
type tlsFiles struct {
	ca, serverCert, serverKey, clientCert, clientKey string
}

// writeTLSFiles makes a throw-away CA and two leaves signed by it, ECDSA
// P-256 keys as Felix's pki issues, into dir.
func writeTLSFiles(dir string) (*tlsFiles, error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "natsbench CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	f := &tlsFiles{ca: filepath.Join(dir, "ca.pem")}
	if err := writePEM(f.ca, "CERTIFICATE", caDER); err != nil {
		return nil, err
	}
	leaf := func(serial int64, cn, name string, eku []x509.ExtKeyUsage) (cert, key string, err error) {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return "", "", err
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: eku,
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			return "", "", err
		}
		kder, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			return "", "", err
		}
		cert, key = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
		if err := writePEM(cert, "CERTIFICATE", der); err != nil {
			return "", "", err
		}
		return cert, key, writePEM(key, "PRIVATE KEY", kder)
	}
	// Servers present theirs on the client port and on routes, both ways.
	if f.serverCert, f.serverKey, err = leaf(2, "nats-server", "server",
		[]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}); err != nil {
		return nil, err
	}
	if f.clientCert, f.clientKey, err = leaf(3, "publisher", "client",
		[]x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}); err != nil {
		return nil, err
	}
	return f, nil
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}
