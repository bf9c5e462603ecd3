// Package metricsauth decides whether an HTTP request may read a
// broker's /metrics: a scraper proves who it is with a Kubernetes bearer
// token (checked with a TokenReview) and must be allowed `get` on the
// non-resource URL /metrics (checked with a SubjectAccessReview), as the
// Kubernetes components and controller-runtime's secure metrics serve
// theirs; or it presents a client certificate the broker accepts (of its
// own cluster's CA, with a broker or operator identity).
//
// Both reviews are cached for a TTL (default one minute) in a bounded
// cache, so a scraper costs the API server two requests per minute, and a
// token that is revoked or a binding that is removed stops working within
// the TTL. Failed API calls are not cached.
//
// Junk tokens cannot make the broker a TokenReview amplifier nor push
// real scrapers out: reviews (of both kinds) are paced by one token bucket
// (ReviewRate per second, ReviewBurst at once; over it the request is
// answered 429 Too Many Requests without asking the API server), a token
// being reviewed is reviewed once however many requests carry it, and
// refused tokens are kept in a negative cache of their own
// (NegativeEntries), so they never evict a positive answer.
package metricsauth

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/time/rate"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Defaults for Options fields left zero.
const (
	DefaultTTL        = time.Minute
	DefaultMaxEntries = 1024
	DefaultTimeout    = 10 * time.Second
	// DefaultReviewRate and DefaultReviewBurst pace the reviews sent to
	// the API server.
	DefaultReviewRate  = 10
	DefaultReviewBurst = 20
	// DefaultNegativeEntries bounds the cache of refused tokens.
	DefaultNegativeEntries = 256
)

// TokenReviewer creates TokenReviews (client-go's
// AuthenticationV1().TokenReviews()).
type TokenReviewer interface {
	Create(ctx context.Context, r *authnv1.TokenReview, opts metav1.CreateOptions) (*authnv1.TokenReview, error)
}

// AccessReviewer creates SubjectAccessReviews (client-go's
// AuthorizationV1().SubjectAccessReviews()).
type AccessReviewer interface {
	Create(ctx context.Context, r *authzv1.SubjectAccessReview, opts metav1.CreateOptions) (*authzv1.SubjectAccessReview, error)
}

// Options configures a Filter.
type Options struct {
	// Tokens and Access reach the API server; nil refuses every bearer
	// token (only certificates are then accepted).
	Tokens TokenReviewer
	Access AccessReviewer
	// Certificate, when set, is asked about a request that came with a
	// client certificate (the TLS state of the request); nil error admits
	// the request without a token. Nil: certificates are not enough.
	Certificate func(cs *tls.ConnectionState) error
	// Path is the non-resource URL the SubjectAccessReview asks about
	// (default "/metrics"); the verb is always "get".
	Path string
	// TTL is how long a review's answer is reused (DefaultTTL when 0), and
	// MaxEntries how many answers of each kind are kept
	// (DefaultMaxEntries when 0).
	TTL        time.Duration
	MaxEntries int
	// Timeout bounds one review (DefaultTimeout when 0).
	Timeout time.Duration
	// ReviewRate (per second) and ReviewBurst pace the TokenReviews and
	// SubjectAccessReviews of all requests together (DefaultReviewRate,
	// DefaultReviewBurst when 0); a request whose review does not fit is
	// refused with ErrTooManyReviews (429).
	ReviewRate  float64
	ReviewBurst int
	// NegativeEntries bounds the cache of tokens the TokenReview refused
	// (DefaultNegativeEntries when 0), kept apart from the MaxEntries
	// positive answers.
	NegativeEntries int
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// Log receives refusals at V(1) and API failures.
	Log logr.Logger
}

// Filter wraps a handler with the check. Safe for concurrent use.
type Filter struct {
	o       Options
	tokens  *ttlCache[authnv1.UserInfo] // authenticated tokens
	refused *ttlCache[struct{}]         // tokens the review refused
	access  *ttlCache[bool]
	limiter *rate.Limiter // reviews sent, at the Options clock

	mu      sync.Mutex
	flights map[string]*flight // reviews in flight, by cache key
}

// flight is one review in flight; requests that need the same answer wait
// for it instead of asking again.
type flight struct {
	done chan struct{}
	user authnv1.UserInfo // the TokenReview's user, or
	ok   bool             // authenticated / allowed
	err  error
	// waiters counts the requests waiting for it (under Filter.mu).
	waiters int
}

// New returns a Filter.
func New(o Options) *Filter {
	if o.Path == "" {
		o.Path = "/metrics"
	}
	if o.TTL <= 0 {
		o.TTL = DefaultTTL
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = DefaultMaxEntries
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log.GetSink() == nil {
		o.Log = logr.Discard()
	}
	if o.ReviewRate <= 0 {
		o.ReviewRate = DefaultReviewRate
	}
	if o.ReviewBurst <= 0 {
		o.ReviewBurst = DefaultReviewBurst
	}
	if o.NegativeEntries <= 0 {
		o.NegativeEntries = DefaultNegativeEntries
	}
	return &Filter{o: o, tokens: newTTLCache[authnv1.UserInfo](o.MaxEntries), refused: newTTLCache[struct{}](o.NegativeEntries),
		access: newTTLCache[bool](o.MaxEntries), limiter: rate.NewLimiter(rate.Limit(o.ReviewRate), o.ReviewBurst),
		flights: map[string]*flight{}}
}

// once runs review for key unless a review for key is in flight, whose
// answer it then waits for (or for ctx). The review runs only if the
// review budget allows it now; else ErrTooManyReviews.
func (f *Filter) once(ctx context.Context, key string, review func() (authnv1.UserInfo, bool, error)) (authnv1.UserInfo, bool, error) {
	f.mu.Lock()
	if fl := f.flights[key]; fl != nil {
		fl.waiters++
		f.mu.Unlock()
		select {
		case <-fl.done:
			return fl.user, fl.ok, fl.err
		case <-ctx.Done():
			return authnv1.UserInfo{}, false, ctx.Err()
		}
	}
	fl := &flight{done: make(chan struct{})}
	f.flights[key] = fl
	f.mu.Unlock()
	if f.limiter.AllowN(f.o.Now(), 1) {
		fl.user, fl.ok, fl.err = review()
	} else {
		fl.err = ErrTooManyReviews
	}
	f.mu.Lock()
	delete(f.flights, key)
	f.mu.Unlock()
	close(fl.done)
	return fl.user, fl.ok, fl.err
}

// Errors of Check; ErrUnauthenticated is answered 401, ErrForbidden 403.
var (
	ErrUnauthenticated = errors.New("metricsauth: no valid bearer token or client certificate")
	ErrForbidden       = errors.New("metricsauth: not allowed to get /metrics")
	// ErrTooManyReviews: the request needed a review and the review budget
	// (Options.ReviewRate, ReviewBurst) is spent; answered 429.
	ErrTooManyReviews = errors.New("metricsauth: too many reviews; retry later")
)

// Wrap returns h behind the check: 401 without valid credentials, 403
// when the reviewed user may not get the path, 429 when a review was
// needed and the review budget is spent, 500 when the API server could
// not answer.
func (f *Filter) Wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch err := f.Check(r); {
		case err == nil:
			h.ServeHTTP(w, r)
		case errors.Is(err, ErrUnauthenticated):
			w.Header().Set("WWW-Authenticate", `Bearer realm="felix-broker"`)
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
		case errors.Is(err, ErrForbidden):
			http.Error(w, "Forbidden", http.StatusForbidden)
		case errors.Is(err, ErrTooManyReviews):
			w.Header().Set("Retry-After", "1")
			http.Error(w, "Too Many Requests", http.StatusTooManyRequests)
		default:
			f.o.Log.Error(err, "metrics request not reviewed")
			http.Error(w, "Internal Server Error", http.StatusInternalServerError)
		}
	})
}

// Check decides about r: nil, or an error wrapping ErrUnauthenticated,
// ErrForbidden, ErrTooManyReviews, or the API server's failure.
func (f *Filter) Check(r *http.Request) error {
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 && f.o.Certificate != nil {
		if err := f.o.Certificate(r.TLS); err == nil {
			return nil
		} else if bearer(r) == "" {
			f.o.Log.V(1).Info("metrics client certificate refused", "error", err.Error())
			return errors.Join(ErrUnauthenticated, err)
		}
	}
	token := bearer(r)
	if token == "" || f.o.Tokens == nil || f.o.Access == nil {
		return ErrUnauthenticated
	}
	now := f.o.Now()
	sum := sha256.Sum256([]byte(token))
	tkey := string(sum[:])
	user, ok, found := f.tokens.get(tkey, now)
	if !found {
		if _, _, found = f.refused.get(tkey, now); found {
			ok = false
		}
	}
	if !found {
		var err error
		user, ok, err = f.once(r.Context(), "t\x00"+tkey, func() (authnv1.UserInfo, bool, error) {
			ctx, cancel := context.WithTimeout(r.Context(), f.o.Timeout)
			defer cancel()
			res, err := f.o.Tokens.Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
			if err != nil {
				return authnv1.UserInfo{}, false, err
			}
			user, ok := res.Status.User, res.Status.Authenticated && res.Status.Error == ""
			if ok {
				f.tokens.put(tkey, user, true, now.Add(f.o.TTL), now)
			} else {
				f.refused.put(tkey, struct{}{}, false, now.Add(f.o.TTL), now)
			}
			return user, ok, nil
		})
		if err != nil {
			return err
		}
	}
	if !ok {
		f.o.Log.V(1).Info("metrics token not authenticated")
		return ErrUnauthenticated
	}
	akey := userKey(user)
	allowed, _, found := f.access.get(akey, now)
	if !found {
		var err error
		_, allowed, err = f.once(r.Context(), "a\x00"+akey, func() (authnv1.UserInfo, bool, error) {
			sar := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
				User: user.Username, UID: user.UID, Groups: user.Groups, Extra: extra(user.Extra),
				NonResourceAttributes: &authzv1.NonResourceAttributes{Path: f.o.Path, Verb: "get"},
			}}
			ctx, cancel := context.WithTimeout(r.Context(), f.o.Timeout)
			defer cancel()
			res, err := f.o.Access.Create(ctx, sar, metav1.CreateOptions{})
			if err != nil {
				return authnv1.UserInfo{}, false, err
			}
			allowed := res.Status.Allowed && !res.Status.Denied
			f.access.put(akey, allowed, true, now.Add(f.o.TTL), now)
			return authnv1.UserInfo{}, allowed, nil
		})
		if err != nil {
			return err
		}
	}
	if !allowed {
		f.o.Log.V(1).Info("metrics scraper not allowed", "user", user.Username)
		return ErrForbidden
	}
	return nil
}

// bearer returns the request's bearer token, or "".
func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	const p = "bearer "
	if len(h) <= len(p) || !strings.EqualFold(h[:len(p)], p) {
		return ""
	}
	return strings.TrimSpace(h[len(p):])
}

// userKey is a canonical rendering of everything a SubjectAccessReview
// is asked about the user.
func userKey(u authnv1.UserInfo) string {
	var b strings.Builder
	w := func(s string) { b.WriteString(s); b.WriteByte(0) }
	w(u.Username)
	w(u.UID)
	gs := append([]string(nil), u.Groups...)
	sort.Strings(gs)
	for _, g := range gs {
		w("g:" + g)
	}
	keys := make([]string, 0, len(u.Extra))
	for k := range u.Extra {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		w("x:" + k)
		for _, v := range u.Extra[k] {
			w(v)
		}
	}
	return b.String()
}

func extra(in map[string]authnv1.ExtraValue) map[string]authzv1.ExtraValue {
	if len(in) == 0 {
		return nil
	}
	out := make(map[string]authzv1.ExtraValue, len(in))
	for k, v := range in {
		out[k] = authzv1.ExtraValue(v)
	}
	return out
}

// ttlCache keeps at most max answers, each until its expiry.
type ttlCache[V any] struct {
	mu      sync.Mutex
	max     int
	entries map[string]ttlEntry[V]
}

type ttlEntry[V any] struct {
	val V
	ok  bool
	exp time.Time
}

func newTTLCache[V any](max int) *ttlCache[V] {
	return &ttlCache[V]{max: max, entries: map[string]ttlEntry[V]{}}
}

func (c *ttlCache[V]) get(k string, now time.Time) (V, bool, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, found := c.entries[k]
	if !found || !now.Before(e.exp) {
		var zero V
		return zero, false, false
	}
	return e.val, e.ok, true
}

// put stores an answer; a full cache first drops expired entries, then
// the entry expiring soonest.
func (c *ttlCache[V]) put(k string, v V, ok bool, exp, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, present := c.entries[k]; !present && len(c.entries) >= c.max {
		for key, e := range c.entries {
			if !now.Before(e.exp) {
				delete(c.entries, key)
			}
		}
		for len(c.entries) >= c.max {
			var victim string
			var first time.Time
			for key, e := range c.entries {
				if victim == "" || e.exp.Before(first) {
					victim, first = key, e.exp
				}
			}
			delete(c.entries, victim)
		}
	}
	c.entries[k] = ttlEntry[V]{val: v, ok: ok, exp: exp}
}
