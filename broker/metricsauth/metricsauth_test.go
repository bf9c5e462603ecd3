package metricsauth

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type fakeAPI struct {
	mu       sync.Mutex
	tokens   map[string]string // token -> user
	allowed  map[string]bool   // user -> may get /metrics
	reviews  int
	accesses int
	fail     error
}

func (f *fakeAPI) tokenReviewer() TokenReviewer { return tokenFunc(f.review) }
func (f *fakeAPI) accessReviewer() AccessReviewer {
	return accessFunc(f.access)
}

type tokenFunc func(*authnv1.TokenReview) (*authnv1.TokenReview, error)

func (t tokenFunc) Create(_ context.Context, r *authnv1.TokenReview, _ metav1.CreateOptions) (*authnv1.TokenReview, error) {
	return t(r)
}

type accessFunc func(*authzv1.SubjectAccessReview) (*authzv1.SubjectAccessReview, error)

func (a accessFunc) Create(_ context.Context, r *authzv1.SubjectAccessReview, _ metav1.CreateOptions) (*authzv1.SubjectAccessReview, error) {
	return a(r)
}

func (f *fakeAPI) review(r *authnv1.TokenReview) (*authnv1.TokenReview, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reviews++
	if f.fail != nil {
		return nil, f.fail
	}
	out := r.DeepCopy()
	if u, ok := f.tokens[r.Spec.Token]; ok {
		out.Status = authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: u, Groups: []string{"g"}}}
	}
	return out, nil
}

func (f *fakeAPI) access(r *authzv1.SubjectAccessReview) (*authzv1.SubjectAccessReview, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.accesses++
	out := r.DeepCopy()
	na := r.Spec.NonResourceAttributes
	out.Status.Allowed = na != nil && na.Path == "/metrics" && na.Verb == "get" && f.allowed[r.Spec.User]
	return out, nil
}

func (f *fakeAPI) counts() (int, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reviews, f.accesses
}

func get(t *testing.T, h http.Handler, token string, cs *tls.ConnectionState) int {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	r.TLS = cs
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code
}

func TestFilterTokenAndAccessReviews(t *testing.T) {
	api := &fakeAPI{tokens: map[string]string{"good": "prom", "other": "nobody"}, allowed: map[string]bool{"prom": true}}
	now := time.Unix(1000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	f := New(Options{Tokens: api.tokenReviewer(), Access: api.accessReviewer(), Now: clock})
	h := f.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("metrics")) }))

	for _, tc := range []struct {
		token string
		want  int
	}{{"", 401}, {"bad", 401}, {"other", 403}, {"good", 200}} {
		if got := get(t, h, tc.token, nil); got != tc.want {
			t.Fatalf("token %q: %d, want %d", tc.token, got, tc.want)
		}
	}
	r0, a0 := api.counts()
	for range 5 {
		if got := get(t, h, "good", nil); got != 200 {
			t.Fatalf("cached: %d", got)
		}
	}
	if r, a := api.counts(); r != r0 || a != a0 {
		t.Fatalf("reviews %d->%d, access reviews %d->%d within the TTL; want cached", r0, r, a0, a)
	}
	// After the TTL, a revoked binding is seen.
	api.mu.Lock()
	api.allowed["prom"] = false
	api.mu.Unlock()
	mu.Lock()
	now = now.Add(DefaultTTL + time.Second)
	mu.Unlock()
	if got := get(t, h, "good", nil); got != 403 {
		t.Fatalf("after TTL with binding removed: %d, want 403", got)
	}
	// API failures are 500 and not cached.
	api.mu.Lock()
	api.fail = errors.New("down")
	api.mu.Unlock()
	if got := get(t, h, "new-token", nil); got != 500 {
		t.Fatalf("API down: %d, want 500", got)
	}
}

func TestFilterCertificate(t *testing.T) {
	errRefused := errors.New("refused")
	f := New(Options{Certificate: func(cs *tls.ConnectionState) error {
		if cs.PeerCertificates[0].Subject.CommonName == "broker-0" {
			return nil
		}
		return errRefused
	}})
	h := f.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	cert := func(cn string) *tls.ConnectionState {
		c := &x509.Certificate{}
		c.Subject.CommonName = cn
		return &tls.ConnectionState{PeerCertificates: []*x509.Certificate{c}}
	}
	if got := get(t, h, "", cert("broker-0")); got != 200 {
		t.Fatalf("accepted certificate: %d", got)
	}
	if got := get(t, h, "", cert("user")); got != 401 {
		t.Fatalf("refused certificate: %d, want 401", got)
	}
	if got := get(t, h, "tok", cert("user")); got != 401 {
		t.Fatalf("refused certificate, token with no reviewer: %d, want 401", got)
	}
}

func TestCacheBounded(t *testing.T) {
	c := newTTLCache[bool](3)
	now := time.Unix(0, 0)
	for i := range 10 {
		c.put(fmt.Sprint(i), true, true, now.Add(time.Duration(i)*time.Second), now)
	}
	if len(c.entries) != 3 {
		t.Fatalf("%d entries, want 3", len(c.entries))
	}
	if _, _, found := c.get("9", now); !found {
		t.Fatal("newest entry evicted")
	}
}

// TestJunkTokensArePacedAndSpareRealScrapers [M5]: a flood of distinct junk
// tokens costs at most the review burst (then 429 without asking the API
// server), and never evicts a real scraper's cached answer.
func TestJunkTokensArePacedAndSpareRealScrapers(t *testing.T) {
	api := &fakeAPI{tokens: map[string]string{"good": "prom"}, allowed: map[string]bool{"prom": true}}
	now := time.Unix(1000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	f := New(Options{Tokens: api.tokenReviewer(), Access: api.accessReviewer(), Now: clock,
		MaxEntries: 4, NegativeEntries: 4, ReviewRate: 1, ReviewBurst: 5})
	h := f.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	if got := get(t, h, "good", nil); got != 200 {
		t.Fatalf("real scraper: %d", got)
	}
	r0, _ := api.counts() // 1 token review, and 1 access review: 2 of the burst of 5
	codes := map[int]int{}
	for i := range 100 {
		codes[get(t, h, fmt.Sprintf("junk-%d", i), nil)]++
	}
	r1, _ := api.counts()
	if r1-r0 != 3 || codes[401] != 3 || codes[429] != 97 {
		t.Fatalf("100 junk tokens: %d token reviews, answers %v; want 3 reviews (the rest of the burst), 3×401, 97×429", r1-r0, codes)
	}
	// The real scraper is still answered from its cache.
	if got := get(t, h, "good", nil); got != 200 {
		t.Fatalf("real scraper after the flood: %d", got)
	}
	// A refused token is answered from the negative cache.
	if got := get(t, h, "junk-0", nil); got != 401 {
		t.Fatalf("cached junk: %d", got)
	}
	if r, _ := api.counts(); r != r1 {
		t.Fatalf("reviews %d after cached answers, want %d", r, r1)
	}
	// The budget refills with the clock.
	mu.Lock()
	now = now.Add(2 * time.Second)
	mu.Unlock()
	if got := get(t, h, "junk-99", nil); got != 401 {
		t.Fatalf("after refill: %d, want 401", got)
	}
}

// blockingReviewer counts TokenReviews and holds each until released.
type blockingReviewer struct {
	calls   chan struct{}
	release chan struct{}
}

func (b *blockingReviewer) Create(ctx context.Context, r *authnv1.TokenReview, _ metav1.CreateOptions) (*authnv1.TokenReview, error) {
	b.calls <- struct{}{}
	<-b.release
	return r.DeepCopy(), nil // not authenticated
}

// TestOneReviewInFlightPerToken [M5]: concurrent requests with the same
// new token share one TokenReview.
func TestOneReviewInFlightPerToken(t *testing.T) {
	br := &blockingReviewer{calls: make(chan struct{}, 100), release: make(chan struct{})}
	api := &fakeAPI{}
	f := New(Options{Tokens: br, Access: api.accessReviewer()})
	h := f.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	const n = 10
	codes := make(chan int, n)
	for range n {
		go func() {
			r := httptest.NewRequest(http.MethodGet, "/metrics", nil)
			r.Header.Set("Authorization", "Bearer same")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			codes <- w.Code
		}()
	}
	<-br.calls // the first review is in flight: the others join it
	key := "t\x00" + func() string { s := sha256.Sum256([]byte("same")); return string(s[:]) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		f.mu.Lock()
		w := 0
		if fl := f.flights[key]; fl != nil {
			w = fl.waiters
		}
		f.mu.Unlock()
		if w == n-1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d requests waiting for the review in flight, want %d", w, n-1)
		}
		time.Sleep(time.Millisecond)
	}
	close(br.release)
	for range n {
		if c := <-codes; c != 401 {
			t.Fatalf("answer %d, want 401", c)
		}
	}
	if extra := len(br.calls); extra != 0 {
		t.Fatalf("%d more TokenReviews for the same token, want none", extra)
	}
}
