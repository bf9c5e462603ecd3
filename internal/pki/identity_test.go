package pki

import (
	"crypto/x509"
	"errors"
	"net/url"
	"strings"
	"testing"
)

func TestIdentityRoundTrip(t *testing.T) {
	for _, id := range []Identity{
		{Namespace: "prod", Cluster: "logs", Kind: KindBroker, Name: "logs-0"},
		{Namespace: "a", Cluster: "b", Kind: KindUser, Name: "alice.example"},
		{Namespace: "felix-system", Cluster: "c1", Kind: KindOperator, Name: "felix-operator"},
		{Namespace: strings.Repeat("n", 63), Cluster: "9", Kind: KindUser, Name: strings.Repeat("x", 253)},
	} {
		t.Run(id.Name, func(t *testing.T) {
			s := id.String()
			want := "felix://" + id.Namespace + "/" + id.Cluster + "/" + string(id.Kind) + "/" + id.Name
			if s != want {
				t.Fatalf("String() = %q, want %q", s, want)
			}
			got, err := ParseIdentityString(s)
			if err != nil {
				t.Fatalf("ParseIdentityString(%q): %v", s, err)
			}
			if got != id {
				t.Fatalf("round trip: got %+v, want %+v", got, id)
			}
			if got, err := ParseIdentity(id.URI()); err != nil || got != id {
				t.Fatalf("ParseIdentity(URI()) = %+v, %v", got, err)
			}
		})
	}
}

func TestParseIdentityRejects(t *testing.T) {
	for _, s := range []string{
		"",
		"https://prod/logs/broker/b",
		"felix:prod/logs/broker/b",
		"felix:///logs/broker/b",
		"felix://prod",
		"felix://prod/",
		"felix://prod/logs",
		"felix://prod/logs/broker",
		"felix://prod/logs/broker/",
		"felix://prod/logs/broker/b/extra",
		"felix://prod//broker/b",
		"felix://prod/logs/admin/b",
		"felix://prod/logs/Broker/b",
		"felix://Prod/logs/broker/b",
		"felix://prod/Logs/broker/b",
		"felix://prod/logs/broker/B",
		"felix://prod/logs/broker/-b",
		"felix://prod/logs/broker/b-",
		"felix://prod/logs/broker/b.",
		"felix://prod/logs/broker/b_c",
		"felix://pr.od/logs/broker/b",
		"felix://prod/lo.gs/broker/b",
		"felix://-prod/logs/broker/b",
		"felix://user@prod/logs/broker/b",
		"felix://prod:443/logs/broker/b",
		"felix://prod:/logs/broker/b",
		"felix://prod/logs/broker/b?x=1",
		"felix://prod/logs/broker/b?",
		"felix://prod/logs/broker/b#frag",
		"felix://prod/logs/broker/%62",
		"felix://prod/logs/broker/b%2Fc",
		"felix://[::1]/logs/broker/b",
		"felix://" + strings.Repeat("n", 64) + "/logs/broker/b",
		"felix://prod/" + strings.Repeat("c", 64) + "/broker/b",
		"felix://prod/logs/broker/" + strings.Repeat("x", 254),
	} {
		t.Run(s, func(t *testing.T) {
			id, err := ParseIdentityString(s)
			if !errors.Is(err, ErrInvalidIdentity) {
				t.Fatalf("ParseIdentityString(%q) = %+v, %v; want ErrInvalidIdentity", s, id, err)
			}
		})
	}
	if _, err := ParseIdentity(nil); !errors.Is(err, ErrInvalidIdentity) {
		t.Fatalf("ParseIdentity(nil): %v", err)
	}
}

func TestSameCluster(t *testing.T) {
	a := brokerID("b-0")
	for _, tc := range []struct {
		o    Identity
		want bool
	}{
		{userID("alice"), true},
		{Identity{Namespace: "prod", Cluster: "other", Kind: KindBroker, Name: "b-0"}, false},
		{Identity{Namespace: "dev", Cluster: "logs", Kind: KindBroker, Name: "b-0"}, false},
	} {
		if got := a.SameCluster(tc.o); got != tc.want {
			t.Errorf("SameCluster(%s) = %v, want %v", tc.o, got, tc.want)
		}
	}
}

func TestParseClusterRef(t *testing.T) {
	if ns, c, err := ParseClusterRef("prod/logs"); err != nil || ns != "prod" || c != "logs" {
		t.Fatalf("ParseClusterRef = %q %q %v", ns, c, err)
	}
	for _, s := range []string{"", "prod", "prod/", "/logs", "prod/logs/x", "Prod/logs"} {
		if _, _, err := ParseClusterRef(s); !errors.Is(err, ErrInvalidIdentity) {
			t.Errorf("ParseClusterRef(%q): %v, want ErrInvalidIdentity", s, err)
		}
	}
}

func TestIdentityOf(t *testing.T) {
	mustURL := func(s string) *url.URL {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	good := "felix://prod/logs/broker/b-0"
	for _, tc := range []struct {
		name string
		uris []string
		want error
	}{
		{"one", []string{good}, nil},
		{"with spiffe", []string{"spiffe://td/ns/prod", good}, nil},
		{"none", nil, ErrNoIdentity},
		{"only other", []string{"spiffe://td/x"}, ErrNoIdentity},
		{"two", []string{good, "felix://prod/logs/user/alice"}, ErrAmbiguousIdentity},
		{"invalid", []string{"felix://prod/logs/admin/x"}, ErrNoIdentity},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &x509.Certificate{}
			for _, s := range tc.uris {
				c.URIs = append(c.URIs, mustURL(s))
			}
			id, err := IdentityOf(c)
			if !errors.Is(err, tc.want) {
				t.Fatalf("IdentityOf: %v, want %v", err, tc.want)
			}
			if err == nil && id != brokerID("b-0") {
				t.Fatalf("IdentityOf = %+v", id)
			}
		})
	}
	if _, err := IdentityOf(nil); !errors.Is(err, ErrNoIdentity) {
		t.Fatalf("IdentityOf(nil): %v", err)
	}
}

// FuzzParseIdentity: ParseIdentity never panics, refuses with
// ErrInvalidIdentity, and what it accepts is canonical: it validates and
// prints back to the URI it was parsed from.
func FuzzParseIdentity(f *testing.F) {
	f.Add("felix://prod/logs/broker/logs-0")
	f.Fuzz(func(t *testing.T, s string) {
		u, err := url.Parse(s)
		if err != nil {
			return
		}
		id, err := ParseIdentity(u)
		if err != nil {
			if !errors.Is(err, ErrInvalidIdentity) {
				t.Fatalf("ParseIdentity(%q): %v does not wrap ErrInvalidIdentity", s, err)
			}
			return
		}
		if err := id.Validate(); err != nil {
			t.Fatalf("accepted %q but Validate: %v", s, err)
		}
		if id.String() != u.String() {
			t.Fatalf("accepted %q (%q) but prints as %q", s, u.String(), id.String())
		}
		back, err := ParseIdentityString(id.String())
		if err != nil || back != id {
			t.Fatalf("re-parse of %q: %+v, %v", id.String(), back, err)
		}
	})
}
