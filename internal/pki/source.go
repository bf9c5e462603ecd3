package pki

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// The file names of a certificate Secret: the kubernetes.io/tls layout
// plus the trust bundle.
const (
	CertFile = "tls.crt"
	KeyFile  = "tls.key"
	CAFile   = "ca.crt"
)

// DefaultMinCheck is how often a Source looks at its files at most when
// SourceOptions.MinCheck is zero.
const DefaultMinCheck = time.Second

// Files is where a broker, user or the operator finds its material.
type Files struct {
	// Cert is the certificate chain, leaf first (tls.crt).
	Cert string
	// Key is the leaf's private key (tls.key).
	Key string
	// CA is the trust bundle: every CA whose leaves are accepted (ca.crt).
	CA string
}

// DirFiles returns the Files of a mounted certificate Secret in dir:
// dir/tls.crt, dir/tls.key, dir/ca.crt.
func DirFiles(dir string) Files {
	return Files{
		Cert: filepath.Join(dir, CertFile),
		Key:  filepath.Join(dir, KeyFile),
		CA:   filepath.Join(dir, CAFile),
	}
}

// SourceOptions configures a Source.
type SourceOptions struct {
	// Files to serve; all three are required.
	Files Files
	// Now is the clock; nil means time.Now. It paces re-reads and is the
	// time peers' certificates are verified at.
	Now func() time.Time
	// MinCheck is the least time between two looks at the files: zero
	// means DefaultMinCheck, negative means on every Current.
	MinCheck time.Duration
	// OnReload, if set, is called after every attempt to load changed
	// content (not for the first load in NewSource, and not when the files
	// were looked at and had not changed): err is nil when the new
	// material is now served, else why the last good material was kept.
	// It is called without the Source's lock held and may call Current;
	// calls made from concurrent Currents are not ordered.
	OnReload func(err error)
}

// material is one consistent, loaded set of files.
type material struct {
	cert  *tls.Certificate
	pool  *x509.CertPool
	roots []*x509.Certificate
	chain []*x509.Certificate // leaf first, as in tls.crt
	self  Identity
}

// fileStamp is what a look at the files compares, before reading them.
type fileStamp [3]os.FileInfo

func (a fileStamp) same(b fileStamp) bool {
	for i := range a {
		if a[i] == nil || b[i] == nil || !os.SameFile(a[i], b[i]) ||
			a[i].Size() != b[i].Size() || !a[i].ModTime().Equal(b[i].ModTime()) {
			return false
		}
	}
	return true
}

// Source serves the current key pair and trust bundle from Files and
// picks up changes without a restart. Kubernetes updates a mounted
// Secret by writing a new timestamped directory and swapping the ..data
// symlink, so every file name stays and its target changes.
//
// Current looks at the files at most once per MinCheck: it stats them
// (following symlinks) and, when anything changed, reads all three and
// compares a hash of their content. Changed content is loaded only if it
// is consistent: the chain and key parse, the key is the leaf's, the
// leaf carries one felix identity and its chain ends at a certificate of
// the trust bundle; and, unlike the first load, the identity is the one
// served so far (ErrIdentityChanged) and every certificate of the chain is
// valid at the Source's clock (ErrLeafNotValid). Otherwise (a half-written update, a bad edit) the
// last good material keeps being served and the failure is counted
// (Failures, LastError) and passed to OnReload; the same bad content is
// not reported twice. A Source is safe for concurrent use.
type Source struct {
	files    Files
	now      func() time.Time
	minCheck time.Duration
	onReload func(error)

	mu        sync.Mutex
	checked   time.Time // last look at the files
	stamp     fileStamp // what that look saw
	goodSum   [32]byte  // content hash of cur
	badSum    [32]byte  // content hash of the last refused content
	retryAt   time.Time // when refused, not yet valid content is tried again
	cur       *material
	reloads   uint64
	failures  uint64
	lastError error
}

// NewSource loads o.Files and returns a Source serving them. It fails if
// that first load fails (errors as for a reload; ErrIncompleteFiles when
// a file name is missing).
func NewSource(o SourceOptions) (*Source, error) {
	if o.Files.Cert == "" || o.Files.Key == "" || o.Files.CA == "" {
		return nil, fmt.Errorf("%w: a Source needs a certificate, a key and a trust bundle", ErrIncompleteFiles)
	}
	s := &Source{files: o.Files, now: o.Now, minCheck: o.MinCheck, onReload: o.OnReload}
	if s.now == nil {
		s.now = time.Now
	}
	if s.minCheck == 0 {
		s.minCheck = DefaultMinCheck
	}
	stamp, _ := s.statFiles()
	data, sum, err := s.readFiles()
	if err != nil {
		return nil, err
	}
	m, err := loadMaterial(data)
	if err != nil {
		return nil, err
	}
	s.cur, s.goodSum, s.stamp, s.checked = m, sum, stamp, s.now()
	return s, nil
}

// Current returns the key pair to present and the trust bundle to
// verify peers against, looking at the files first if MinCheck has
// passed since the last look. A failed reload does not make it fail: it
// keeps returning the last good material. Its error is ErrNoMaterial,
// only for a Source NewSource did not return.
func (s *Source) Current() (*tls.Certificate, *x509.CertPool, error) {
	m, err := s.current()
	if err != nil {
		return nil, nil, err
	}
	return m.cert, m.pool, nil
}

// Self returns the identity of the certificate currently served (the
// zero Identity for a Source NewSource did not return).
func (s *Source) Self() Identity {
	m, err := s.current()
	if err != nil {
		return Identity{}
	}
	return m.self
}

// Now returns the Source's clock reading.
func (s *Source) Now() time.Time {
	if s == nil || s.now == nil {
		return time.Now()
	}
	return s.now()
}

// Reloads returns how many times changed content was loaded since
// NewSource.
func (s *Source) Reloads() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reloads
}

// Failures returns how many times changed content was refused and the
// last good material kept.
func (s *Source) Failures() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failures
}

// LastError returns why the latest attempt to load changed content
// failed, or nil if it succeeded, none was made, or the files went back
// to the content being served.
func (s *Source) LastError() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastError
}

func (s *Source) current() (*material, error) {
	if s == nil {
		return nil, ErrNoMaterial
	}
	s.mu.Lock()
	if s.cur == nil {
		s.mu.Unlock()
		return nil, ErrNoMaterial
	}
	attempted, err := s.maybeReloadLocked()
	m, cb := s.cur, s.onReload
	s.mu.Unlock()
	if attempted && cb != nil {
		cb(err)
	}
	return m, nil
}

// maybeReloadLocked looks at the files if it is time to. attempted
// reports whether changed content was loaded or refused (err says why).
func (s *Source) maybeReloadLocked() (attempted bool, err error) {
	now := s.now()
	if s.minCheck > 0 && !now.Before(s.checked) && now.Sub(s.checked) < s.minCheck {
		return false, nil
	}
	s.checked = now
	// Stat before reading: a change after the stat shows at the next look.
	stamp, statErr := s.statFiles()
	// Refused content that was only not yet valid is tried again once
	// it should be.
	retry := !s.retryAt.IsZero() && !now.Before(s.retryAt)
	if statErr == nil && stamp.same(s.stamp) && !retry {
		return false, nil
	}
	data, sum, err := s.readFiles()
	if err != nil {
		// Unreadable (a file missing mid-update, permissions): the same
		// failure is reported once, keyed by its text.
		sum = sha256.Sum256([]byte("unreadable\x00" + err.Error()))
	}
	switch sum {
	case s.goodSum: // back to (or still) the content being served
		s.stamp, s.badSum, s.lastError = stamp, [32]byte{}, nil
		return false, nil
	case s.badSum: // refused already, and reported
		if !retry {
			s.stamp = stamp
			return false, nil
		}
	}
	s.stamp, s.retryAt = stamp, time.Time{}
	if err == nil {
		var m *material
		if m, err = loadMaterial(data); err == nil {
			if err = acceptReload(s.cur, m, now); err != nil && now.Before(m.cert.Leaf.NotBefore) {
				s.retryAt = m.cert.Leaf.NotBefore
			}
		}
		if err == nil {
			s.cur, s.goodSum, s.badSum = m, sum, [32]byte{}
			s.reloads++
			s.lastError = nil
			return true, nil
		}
	}
	s.badSum = sum
	s.failures++
	s.lastError = err
	return true, err
}

// acceptReload refuses new material that changes the identity served by
// old, or whose chain is not valid at now.
func acceptReload(old, m *material, now time.Time) error {
	if m.self != old.self {
		return fmt.Errorf("%w: serving %s, %s names %s", ErrIdentityChanged, old.self, CertFile, m.self)
	}
	for _, c := range m.chain {
		if now.Before(c.NotBefore) {
			return fmt.Errorf("%w: %s (%q) is valid only from %s", ErrLeafNotValid, CertFile, c.Subject, c.NotBefore.UTC().Format(time.RFC3339))
		}
		if now.After(c.NotAfter) {
			return fmt.Errorf("%w: %s (%q) expired at %s", ErrLeafNotValid, CertFile, c.Subject, c.NotAfter.UTC().Format(time.RFC3339))
		}
	}
	return nil
}

// NotAfter returns the earliest NotAfter of the certificate chain served
// now (the zero time for a Source NewSource did not return): when the
// broker's certificate stops being accepted unless a renewal is loaded.
func (s *Source) NotAfter() time.Time {
	m, err := s.current()
	if err != nil {
		return time.Time{}
	}
	var na time.Time
	for _, c := range m.chain {
		if na.IsZero() || c.NotAfter.Before(na) {
			na = c.NotAfter
		}
	}
	return na
}

// fileData is the content of the three files.
type fileData struct{ cert, key, ca []byte }

func (s *Source) paths() [3]string { return [3]string{s.files.Cert, s.files.Key, s.files.CA} }

// statFiles stats the three files, following symlinks.
func (s *Source) statFiles() (fileStamp, error) {
	var st fileStamp
	for i, p := range s.paths() {
		fi, err := os.Stat(p)
		if err != nil {
			return fileStamp{}, err
		}
		st[i] = fi
	}
	return st, nil
}

// readFiles reads the three files and hashes their content.
func (s *Source) readFiles() (fileData, [32]byte, error) {
	var raw [3][]byte
	h := sha256.New()
	for i, p := range s.paths() {
		b, err := os.ReadFile(p)
		if err != nil {
			return fileData{}, [32]byte{}, fmt.Errorf("pki: read %s: %w", p, err)
		}
		raw[i] = b
		fmt.Fprintf(h, "%d:", len(b))
		h.Write(b)
	}
	var sum [32]byte
	h.Sum(sum[:0])
	return fileData{cert: raw[0], key: raw[1], ca: raw[2]}, sum, nil
}

// loadMaterial parses and cross-checks one set of files.
func loadMaterial(d fileData) (*material, error) {
	tc, err := ParseLeaf(d.cert, d.key)
	if err != nil {
		return nil, fmt.Errorf("%s/%s: %w", CertFile, KeyFile, err)
	}
	self, err := IdentityOf(tc.Leaf)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", CertFile, err)
	}
	roots, err := ParseCertsPEM(d.ca)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", CAFile, err)
	}
	chain := make([]*x509.Certificate, 0, len(tc.Certificate))
	chain = append(chain, tc.Leaf)
	for _, der := range tc.Certificate[1:] {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, fmt.Errorf("%s: %w: %w", CertFile, ErrBadPEM, err)
		}
		chain = append(chain, c)
	}
	if err := chainsToBundle(chain, roots); err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	for _, r := range roots {
		pool.AddCert(r)
	}
	return &material{cert: &tc, pool: pool, roots: roots, chain: chain, self: self}, nil
}

// chainsToBundle checks, without regard to time, that each certificate
// of chain is signed by the next and that one of them is in roots or
// signed by one of them. The bundle may hold an intermediate CA (the CA
// that signs a cluster's certificates, trusted without the root above
// it) while the chain goes on to that root.
func chainsToBundle(chain, roots []*x509.Certificate) error {
	for i := 0; i+1 < len(chain); i++ {
		if err := chain[i].CheckSignatureFrom(chain[i+1]); err != nil {
			return fmt.Errorf("%w: %s certificate %d: %w", ErrNotSignedByBundle, CertFile, i, err)
		}
	}
	top := chain[len(chain)-1]
	for _, c := range chain {
		for _, r := range roots {
			if c.Equal(r) || c.CheckSignatureFrom(r) == nil {
				return nil
			}
		}
	}
	return fmt.Errorf("%w: issuer %q of %s is not in %s", ErrNotSignedByBundle, top.Issuer, CertFile, CAFile)
}
