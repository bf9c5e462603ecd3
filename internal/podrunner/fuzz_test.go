package podrunner

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzExpandVars: pod specs are outside input. Expansion never panics,
// leaves text without '$' alone, and with no variables known only turns
// "$$" into "$".
func FuzzExpandVars(f *testing.F) {
	for _, s := range []string{"$(POD_NAME)", "$$(X)", "a$(", "$", "$$$", "$(A)$(B)", "plain"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		none := func(string) (string, bool) { return "", false }
		got := ExpandVars(s, none)
		if !strings.Contains(s, "$") && got != s {
			t.Fatalf("ExpandVars(%q) = %q changed text without $", s, got)
		}
		if !strings.Contains(s, "$$") && got != s {
			t.Fatalf("ExpandVars(%q) with no variables = %q", s, got)
		}
		all := func(string) (string, bool) { return "v", true }
		_ = ExpandVars(s, all)
	})
}

// FuzzRewrite: rewriting never panics and leaves values without a mount
// path, a ':' or the pod's DNS name unchanged.
func FuzzRewrite(f *testing.F) {
	for _, s := range []string{":7100", "--listen=:7100", "/var/lib/felix/x", "b0.brokers.ns.svc.cluster.local.:1", "=", "-=", "[::]:1"} {
		f.Add(s)
	}
	rw := NewRewriter([]Mount{{ContainerPath: "/var/lib/felix", HostPath: "/h"}}, netip.MustParseAddr("127.0.0.3"), []string{"b0.brokers.ns.svc"})
	f.Fuzz(func(t *testing.T, s string) {
		got := rw.Rewrite(s)
		if !strings.Contains(s, "/var/lib/felix") && !strings.Contains(s, ":") && !strings.Contains(s, "b0.brokers.ns.svc") && got != s {
			t.Fatalf("Rewrite(%q) = %q", s, got)
		}
	})
}

// FuzzAddressBookLoad: the address book file is read back from disk; any
// content either is rejected or yields a book that only hands out
// distinct addresses in its range.
func FuzzAddressBookLoad(f *testing.F) {
	for _, s := range []string{`{}`, `{"ns/a":"127.0.0.2"}`, `{"ns/a":"10.0.0.1","ns/b":"127.0.0.2"}`, `[]`, ``, `{"x":"::1"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "addresses.json")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		b, err := NewAddressBook(path, 2, 5)
		if err != nil {
			return
		}
		seen := map[netip.Addr]string{}
		for _, n := range []string{"a", "b", "c", "d", "e"} {
			a, err := b.Allocate("ns", n)
			if err != nil {
				continue
			}
			o := a.As4()
			if !a.Is4() || o[0] != 127 || o[3] < 2 || o[3] > 5 {
				t.Fatalf("address %v out of range", a)
			}
			if prev, dup := seen[a]; dup {
				t.Fatalf("%v given to %s and %s", a, prev, n)
			}
			seen[a] = n
		}
	})
}
