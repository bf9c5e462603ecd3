package diskfault

import (
	"os"
	"path/filepath"
	"testing"
)

func TestFlipMarkerChangesEveryOccurrenceAndNothingElse(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a", "xxabcdxxabcd")
	write("sub/b", "abcd")
	write("c", "nothing here")
	flips, err := FlipMarker(dir, []byte("abcd"))
	if err != nil || len(flips) != 3 {
		t.Fatalf("flips %v, %v; want 3", flips, err)
	}
	for name, want := range map[string]string{"a": "xxabCdxxabCd", "sub/b": "abCd", "c": "nothing here"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(b) != want {
			t.Fatalf("%s: %q, %v; want %q", name, b, err, want)
		}
	}
	if flips[0].Offset != 4 || flips[1].Offset != 10 {
		t.Fatalf("offsets %v", flips)
	}
}
