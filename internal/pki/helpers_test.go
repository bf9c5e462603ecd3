package pki

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// t0 is the tests' wall clock origin.
var t0 = time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)

// fakeClock is a settable clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock(t time.Time) *fakeClock { return &fakeClock{t: t} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

const year = 365 * 24 * time.Hour

func brokerID(name string) Identity {
	return Identity{Namespace: "prod", Cluster: "logs", Kind: KindBroker, Name: name}
}

func userID(name string) Identity {
	return Identity{Namespace: "prod", Cluster: "logs", Kind: KindUser, Name: name}
}

func mustCA(t *testing.T, cn string) *CA {
	t.Helper()
	ca, err := NewCA(cn, t0, year, nil)
	if err != nil {
		t.Fatalf("NewCA: %v", err)
	}
	return ca
}

// pair is one issued certificate and key, as PEM.
type pair struct{ cert, key []byte }

func mustIssue(t *testing.T, ca *CA, id Identity, now time.Time, validity time.Duration) pair {
	t.Helper()
	c, k, err := ca.Issue(LeafRequest{Identity: id, Now: now, Validity: validity}, nil)
	if err != nil {
		t.Fatalf("Issue %s: %v", id, err)
	}
	return pair{c, k}
}

func mustLeaf(t *testing.T, p pair) *tls.Certificate {
	t.Helper()
	tc, err := ParseLeaf(p.cert, p.key)
	if err != nil {
		t.Fatalf("ParseLeaf: %v", err)
	}
	return &tc
}

// secretDir mimics how the kubelet writes a mounted Secret: each update
// goes into a new ..<timestamp> directory, a ..data symlink is swapped to
// it atomically (rename), and the visible names are symlinks through
// ..data.
type secretDir struct {
	t   *testing.T
	dir string
	gen int
}

func newSecretDir(t *testing.T) *secretDir { return &secretDir{t: t, dir: t.TempDir()} }

func (d *secretDir) files() Files { return DirFiles(d.dir) }

// write publishes one version of the Secret atomically.
func (d *secretDir) write(cert, key, ca []byte) {
	t := d.t
	t.Helper()
	d.gen++
	ts := fmt.Sprintf("..2026_12_02_00_00_%02d.%d", d.gen, d.gen)
	if err := os.Mkdir(filepath.Join(d.dir, ts), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{CertFile: cert, KeyFile: key, CAFile: ca} {
		if err := os.WriteFile(filepath.Join(d.dir, ts, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old, _ := os.Readlink(filepath.Join(d.dir, "..data"))
	tmp := filepath.Join(d.dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(d.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{CertFile, KeyFile, CAFile} {
		link := filepath.Join(d.dir, name)
		if _, err := os.Lstat(link); errors.Is(err, os.ErrNotExist) {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(d.dir, old)); err != nil {
			t.Fatal(err)
		}
	}
}

// handshakeResult is what both ends of one connection saw.
type handshakeResult struct {
	serverErr, clientErr error
	server, client       tls.ConnectionState
}

// handshake runs one TLS connection over loopback. The server writes one
// byte after a successful handshake and the client reads it, so that a
// client certificate refused by the server (which TLS 1.3 reports after
// the client's handshake has returned) shows as a client error too.
func handshake(t *testing.T, serverCfg, clientCfg *tls.Config) handshakeResult {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	deadline := time.Now().Add(20 * time.Second)
	var res handshakeResult
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			res.serverErr = err
			return
		}
		defer c.Close()
		_ = c.SetDeadline(deadline)
		sc := tls.Server(c, serverCfg)
		if err := sc.Handshake(); err != nil {
			res.serverErr = err
			return
		}
		res.server = sc.ConnectionState()
		_, res.serverErr = sc.Write([]byte{1})
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(deadline)
	cc := tls.Client(c, clientCfg)
	if err := cc.Handshake(); err != nil {
		res.clientErr = err
	} else {
		res.client = cc.ConnectionState()
		var b [1]byte
		if _, err := cc.Read(b[:]); err != nil {
			res.clientErr = err
		}
	}
	c.Close()
	<-done
	return res
}

// mustSource starts a Source on d with clock clk.
func mustSource(t *testing.T, d *secretDir, clk *fakeClock, onReload func(error)) *Source {
	t.Helper()
	s, err := NewSource(SourceOptions{Files: d.files(), Now: clk.Now, OnReload: onReload})
	if err != nil {
		t.Fatalf("NewSource: %v", err)
	}
	return s
}

// brokerSource is a Source serving a fresh certificate for id from ca,
// trusting bundle (ca's certificate when nil).
func brokerSource(t *testing.T, ca *CA, id Identity, clk *fakeClock, bundle []byte) (*Source, *secretDir) {
	t.Helper()
	if bundle == nil {
		bundle = ca.CertPEM()
	}
	p := mustIssue(t, ca, id, clk.Now(), 30*24*time.Hour)
	d := newSecretDir(t)
	d.write(p.cert, p.key, bundle)
	return mustSource(t, d, clk, nil), d
}
