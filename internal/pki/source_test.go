package pki

import (
	"errors"
	"os"
	"testing"
	"time"
)

// reloadLog collects OnReload calls.
type reloadLog struct{ errs []error }

func (l *reloadLog) record(err error) { l.errs = append(l.errs, err) }

func TestSourceReloadsAfterSymlinkSwap(t *testing.T) {
	ca := mustCA(t, "ca")
	clk := newClock(t0)
	d := newSecretDir(t)
	first := mustIssue(t, ca, brokerID("b-0"), t0, time.Hour)
	d.write(first.cert, first.key, ca.CertPEM())
	var log reloadLog
	s := mustSource(t, d, clk, log.record)
	serial := func() string {
		t.Helper()
		c, p, err := s.Current()
		if err != nil || c == nil || p == nil {
			t.Fatalf("Current: %v", err)
		}
		return c.Leaf.SerialNumber.String()
	}
	s1 := serial()
	if s.Self() != brokerID("b-0") {
		t.Fatalf("Self = %s", s.Self())
	}

	second := mustIssue(t, ca, brokerID("b-0"), t0, time.Hour)
	d.write(second.cert, second.key, ca.CertPEM())
	// Not looked at again before MinCheck has passed.
	clk.Advance(DefaultMinCheck - time.Millisecond)
	if got := serial(); got != s1 {
		t.Fatal("re-read before MinCheck")
	}
	clk.Advance(time.Millisecond)
	s2 := serial()
	if s2 == s1 {
		t.Fatal("new certificate not picked up after the ..data swap")
	}
	if s.Reloads() != 1 || s.Failures() != 0 || len(log.errs) != 1 || log.errs[0] != nil {
		t.Fatalf("reloads %d failures %d callbacks %v", s.Reloads(), s.Failures(), log.errs)
	}
	// Nothing changed: no reload, no callback.
	clk.Advance(time.Hour)
	if serial() != s2 || s.Reloads() != 1 || len(log.errs) != 1 {
		t.Fatal("reloaded unchanged files")
	}

	// A new identity is refused [M3]: the broker keeps being b-0.
	third := mustIssue(t, ca, brokerID("b-1"), clk.Now(), time.Hour)
	d.write(third.cert, third.key, ca.CertPEM())
	clk.Advance(time.Second)
	if s.Self() != brokerID("b-0") || serial() != s2 {
		t.Fatalf("Self = %s after a reload naming b-1", s.Self())
	}
	if s.Failures() != 1 || !errors.Is(s.LastError(), ErrIdentityChanged) {
		t.Fatalf("failures %d last %v, want one ErrIdentityChanged", s.Failures(), s.LastError())
	}
}

// TestSourceRetriesNotYetValid [M3]: a renewal whose NotBefore is still
// ahead is refused, and taken once the clock reaches it.
func TestSourceRetriesNotYetValid(t *testing.T) {
	ca := mustCA(t, "ca")
	clk := newClock(t0)
	d := newSecretDir(t)
	good := mustIssue(t, ca, brokerID("b-0"), t0, 4*time.Hour)
	d.write(good.cert, good.key, ca.CertPEM())
	s := mustSource(t, d, clk, nil)
	early := mustIssue(t, ca, brokerID("b-0"), t0.Add(2*time.Hour), 4*time.Hour)
	d.write(early.cert, early.key, ca.CertPEM())
	clk.Advance(time.Second)
	c, _, _ := s.Current()
	if !c.Leaf.Equal(mustCerts(t, good.cert)[0]) || !errors.Is(s.LastError(), ErrLeafNotValid) || s.Failures() != 1 {
		t.Fatalf("not yet valid leaf: failures %d last %v", s.Failures(), s.LastError())
	}
	clk.Advance(time.Minute)
	s.Current()
	if s.Failures() != 1 {
		t.Fatalf("refusal counted again: %d", s.Failures())
	}
	clk.Advance(2 * time.Hour)
	c, _, _ = s.Current()
	if !c.Leaf.Equal(mustCerts(t, early.cert)[0]) || s.LastError() != nil {
		t.Fatalf("renewal not taken once valid: last %v", s.LastError())
	}
	if want := mustCerts(t, early.cert)[0].NotAfter; !s.NotAfter().Equal(want) {
		t.Fatalf("NotAfter = %v, want %v", s.NotAfter(), want)
	}
}

func TestSourceKeepsLastGood(t *testing.T) {
	ca := mustCA(t, "ca")
	other := mustCA(t, "other")
	good := mustIssue(t, ca, brokerID("b-0"), t0, time.Hour)
	next := mustIssue(t, ca, brokerID("b-0"), t0, time.Hour)
	foreign := mustIssue(t, other, brokerID("b-0"), t0, time.Hour)
	otherID := mustIssue(t, ca, brokerID("b-1"), t0, time.Hour)
	expired := mustIssue(t, ca, brokerID("b-0"), t0.Add(-3*time.Hour), time.Hour)
	notYet := mustIssue(t, ca, brokerID("b-0"), t0.Add(2*time.Hour), time.Hour)
	for _, tc := range []struct {
		name          string
		cert, key, ca []byte
		want          error
	}{
		{"cert key mismatch", next.cert, good.key, ca.CertPEM(), ErrKeyMismatch},
		{"truncated cert", next.cert[:len(next.cert)/2], next.key, ca.CertPEM(), ErrBadPEM},
		{"empty key", next.cert, nil, ca.CertPEM(), ErrBadKey},
		{"empty bundle", next.cert, next.key, nil, ErrNoCertificates},
		{"other CA's leaf", foreign.cert, foreign.key, ca.CertPEM(), ErrNotSignedByBundle},
		{"CA cert as leaf", ca.CertPEM(), mustKeyPEM(t, ca), ca.CertPEM(), ErrNoIdentity},
		{"another identity", otherID.cert, otherID.key, ca.CertPEM(), ErrIdentityChanged},
		{"expired leaf", expired.cert, expired.key, ca.CertPEM(), ErrLeafNotValid},
		{"not yet valid leaf", notYet.cert, notYet.key, ca.CertPEM(), ErrLeafNotValid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock(t0)
			d := newSecretDir(t)
			d.write(good.cert, good.key, ca.CertPEM())
			var log reloadLog
			s := mustSource(t, d, clk, log.record)
			c0, _, _ := s.Current()

			d.write(tc.cert, tc.key, tc.ca)
			clk.Advance(time.Second)
			c, p, err := s.Current()
			if err != nil || p == nil || c.Leaf.SerialNumber.Cmp(c0.Leaf.SerialNumber) != 0 {
				t.Fatalf("Current after a bad update: %v (kept the old certificate: %v)", err, c != nil && c == c0)
			}
			if s.Failures() != 1 || !errors.Is(s.LastError(), tc.want) || len(log.errs) != 1 || !errors.Is(log.errs[0], tc.want) {
				t.Fatalf("failures %d last %v callbacks %v; want one %v", s.Failures(), s.LastError(), log.errs, tc.want)
			}
			// The same bad content is not reported again.
			clk.Advance(time.Second)
			s.Current()
			if s.Failures() != 1 || len(log.errs) != 1 {
				t.Fatalf("bad content reported again: failures %d", s.Failures())
			}
			// The completed update is picked up.
			d.write(next.cert, next.key, ca.CertPEM())
			clk.Advance(time.Second)
			c, _, _ = s.Current()
			if !c.Leaf.Equal(mustCerts(t, next.cert)[0]) {
				t.Fatal("fixed update not picked up")
			}
			if s.LastError() != nil || len(log.errs) != 2 || log.errs[1] != nil {
				t.Fatalf("last error %v callbacks %v", s.LastError(), log.errs)
			}
		})
	}
}

func mustKeyPEM(t *testing.T, ca *CA) []byte {
	t.Helper()
	k, err := ca.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// Files written one by one in place (not through ..data): the half
// written state (new cert, old key) is refused, the completed one taken.
func TestSourceInPlaceWrites(t *testing.T) {
	ca := mustCA(t, "ca")
	a := mustIssue(t, ca, brokerID("b-0"), t0, time.Hour)
	b := mustIssue(t, ca, brokerID("b-0"), t0, time.Hour)
	f := DirFiles(t.TempDir())
	write := func(name string, data []byte) {
		t.Helper()
		if err := os.WriteFile(name, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(f.Cert, a.cert)
	write(f.Key, a.key)
	write(f.CA, ca.CertPEM())
	clk := newClock(t0)
	s, err := NewSource(SourceOptions{Files: f, Now: clk.Now, MinCheck: -1})
	if err != nil {
		t.Fatal(err)
	}
	write(f.Cert, b.cert)
	if c, _, _ := s.Current(); !c.Leaf.Equal(mustCerts(t, a.cert)[0]) || !errors.Is(s.LastError(), ErrKeyMismatch) {
		t.Fatalf("half-written update: last error %v", s.LastError())
	}
	write(f.Key, b.key)
	if c, _, _ := s.Current(); !c.Leaf.Equal(mustCerts(t, b.cert)[0]) || s.LastError() != nil {
		t.Fatalf("completed update: last error %v", s.LastError())
	}
	// A file disappearing is a failure, and the material is kept.
	if err := os.Remove(f.Key); err != nil {
		t.Fatal(err)
	}
	if c, _, err := s.Current(); err != nil || !c.Leaf.Equal(mustCerts(t, b.cert)[0]) || !errors.Is(s.LastError(), os.ErrNotExist) {
		t.Fatalf("missing key: %v, last error %v", err, s.LastError())
	}
}

func TestNewSourceFails(t *testing.T) {
	ca := mustCA(t, "ca")
	a := mustIssue(t, ca, brokerID("b-0"), t0, time.Hour)
	b := mustIssue(t, ca, brokerID("b-0"), t0, time.Hour)
	if _, err := NewSource(SourceOptions{Files: Files{Cert: "x", Key: "y"}}); !errors.Is(err, ErrIncompleteFiles) {
		t.Fatalf("no CA file: %v", err)
	}
	if _, err := NewSource(SourceOptions{Files: DirFiles(t.TempDir())}); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing files: %v", err)
	}
	d := newSecretDir(t)
	d.write(a.cert, b.key, ca.CertPEM())
	if _, err := NewSource(SourceOptions{Files: d.files()}); !errors.Is(err, ErrKeyMismatch) {
		t.Fatalf("mismatch: %v", err)
	}
	var zero *Source
	if _, _, err := zero.Current(); !errors.Is(err, ErrNoMaterial) {
		t.Fatalf("nil Source: %v", err)
	}
	if _, _, err := new(Source).Current(); !errors.Is(err, ErrNoMaterial) {
		t.Fatalf("zero Source: %v", err)
	}
}

// Concurrent handshake-path readers and a reload do not race (run with
// -race).
func TestSourceConcurrentCurrent(t *testing.T) {
	ca := mustCA(t, "ca")
	clk := newClock(t0)
	d := newSecretDir(t)
	a := mustIssue(t, ca, brokerID("b-0"), t0, time.Hour)
	b := mustIssue(t, ca, brokerID("b-0"), t0, time.Hour)
	d.write(a.cert, a.key, ca.CertPEM())
	s, err := NewSource(SourceOptions{Files: d.files(), Now: clk.Now, MinCheck: -1, OnReload: func(error) {}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	for range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for range 50 {
				if c, p, err := s.Current(); err != nil || c == nil || p == nil {
					t.Errorf("Current: %v", err)
					return
				}
				_ = s.Self()
			}
		}()
	}
	d.write(b.cert, b.key, ca.CertPEM())
	for range 4 {
		<-done
	}
	if c, _, _ := s.Current(); !c.Leaf.Equal(mustCerts(t, b.cert)[0]) {
		t.Fatal("update not picked up")
	}
}
