package server

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"felix.dev/felix/broker/client"
	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/wire"
)

// TestGracefulShutdownAnswersInFlight: Shutdown stops accepting, answers a
// follow read that was waiting (with what it has) and closes connections.
func TestGracefulShutdownAnswersInFlight(t *testing.T) {
	b := startBroker(t, Options{})
	c := dial(t, b.addr, client.Options{})
	ctx := ctxT(t)
	if _, err := c.Append(ctx, shardA, recs("a"), nil); err != nil {
		t.Fatal(err)
	}
	if !b.srv.Ready() {
		t.Fatal("serving broker is not ready")
	}
	readDone := make(chan error, 1)
	go func() {
		r, err := c.Read(ctx, wire.ReadRequest{Shard: shardA, From: wire.FromOffset, Offset: 1, WaitMillis: 30000})
		if err == nil && r.Next != 1 {
			err = io.ErrUnexpectedEOF
		}
		readDone <- err
	}()
	// The read is in flight once the broker holds it unanswered. (A
	// describe sent afterwards from this goroutine proves nothing: the
	// read's goroutine may not have sent it yet.)
	deadline := time.Now().Add(10 * time.Second)
	for unanswered(b.srv) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the follow read never reached the broker: %d unanswered", unanswered(b.srv))
		}
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	b.stop()
	if err := <-readDone; err != nil {
		t.Fatalf("in-flight follow read: %v", err)
	}
	if time.Since(start) > 10*time.Second {
		t.Fatalf("shutdown took %v", time.Since(start))
	}
	if b.srv.Ready() {
		t.Fatal("stopped broker reports ready")
	}
	if _, err := net.DialTimeout("tcp", b.addr, time.Second); err == nil {
		t.Fatal("stopped broker still accepts connections")
	}
}

func TestHTTPLiveReadyMetrics(t *testing.T) {
	b := startBroker(t, Options{})
	h := httptest.NewServer(HTTPHandler(b.srv.Ready, b.reg))
	defer h.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(h.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	c := dial(t, b.addr, client.Options{})
	if _, err := c.Append(ctxT(t), shardA, recs("a", "b"), nil); err != nil {
		t.Fatal(err)
	}
	if code, _ := get("/live"); code != 200 {
		t.Fatalf("/live = %d", code)
	}
	if code, _ := get("/ready"); code != 200 {
		t.Fatalf("/ready = %d while serving", code)
	}
	_, metrics := get("/metrics")
	for _, want := range []string{"felix_broker_appends_total 1", "felix_broker_append_records_total 2", "felix_broker_connections 1",
		"felix_broker_append_latency_seconds_bucket", `felix_broker_requests_total{op="append",result="ok"} 1`, "felix_broker_append_bytes_total"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	b.stop()
	if code, _ := get("/ready"); code != 503 {
		t.Fatalf("/ready = %d after shutdown, want 503", code)
	}
	if code, _ := get("/live"); code != 200 {
		t.Fatalf("/live = %d after shutdown", code)
	}
}

// TestSyncFanInMetric: under on-commit, concurrent appends share syncs and
// /metrics reports how many appends each sync acknowledged.
func TestSyncFanInMetric(t *testing.T) {
	b := startBrokerMode(t, logstore.FsyncOnCommit, Options{})
	ctx := ctxT(t)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		c := dial(t, b.addr, client.Options{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 20; j++ {
				if _, err := c.Append(ctx, record.ShardID{Stream: "s", Shard: uint32(i)}, recs("x"), nil); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	families, err := b.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var syncs, fanIn uint64
	var fanInSum float64
	for _, mf := range families {
		switch mf.GetName() {
		case "felix_broker_sync_fan_in":
			fanIn = mf.GetMetric()[0].GetHistogram().GetSampleCount()
			fanInSum = mf.GetMetric()[0].GetHistogram().GetSampleSum()
		case "felix_broker_sync_duration_seconds":
			syncs = mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	if fanIn == 0 || syncs == 0 || fanInSum < 160 {
		t.Fatalf("sync fan-in: %d syncs acknowledging %v appends (want >= 160), %d sync durations", fanIn, fanInSum, syncs)
	}
}

func TestTLS(t *testing.T) {
	cert, pool := selfSigned(t)
	b := startBroker(t, Options{TLS: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}})
	c := dial(t, b.addr, client.Options{TLS: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13}})
	res, err := c.Append(ctxT(t), shardA, recs("secret"), nil)
	if err != nil || res.Tail != 1 {
		t.Fatalf("append over TLS: %+v %v", res, err)
	}
	// A plaintext client gets nothing it can read and is disconnected.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := client.Dial(ctx, b.addr, client.Options{}); err == nil {
		t.Fatal("plaintext client completed a handshake with a TLS broker")
	}
}

func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "felix-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

// unanswered counts the requests srv has read and not yet answered, on
// every connection.
func unanswered(srv *Server) int64 {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	var n int64
	for c := range srv.conns {
		n += c.unanswered.Load()
	}
	return n
}
