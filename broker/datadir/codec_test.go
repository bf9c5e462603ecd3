package datadir

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestID1_StorageIDFileRoundTrip(t *testing.T) {
	id := StorageID{0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	data := encodeStorageIDFile(id)
	if !strings.HasPrefix(string(data), "felix-storage-id/1 id=deadbeef0102030405060708090a0b0c crc32c=") {
		t.Fatalf("unexpected encoding %q", data)
	}
	got, err := decodeStorageIDFile(data)
	if err != nil || got != id {
		t.Fatalf("decode = %v, %v; want %v", got, err, id)
	}
	parsed, err := ParseStorageID(id.String())
	if err != nil || parsed != id {
		t.Fatalf("ParseStorageID(String()) = %v, %v", parsed, err)
	}
}

// TestID1_UndecodableStorageIDIsCorrupt checks that damaged storage-id
// files are refused, so the decision replaces them.
func TestID1_UndecodableStorageIDIsCorrupt(t *testing.T) {
	good := encodeStorageIDFile(StorageID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16})
	flipped := bytes.Clone(good)
	flipped[25] ^= 0x01 // a hex digit of the id: still hex, checksum catches it
	zero := encodeLine(storageIDMagic, []field{{"id", strings.Repeat("0", 32)}})
	upper := encodeLine(storageIDMagic, []field{{"id", strings.ToUpper(StorageID{0xab, 1}.String())}})
	cases := map[string][]byte{
		"empty":          {},
		"truncated":      good[:len(good)-5],
		"no newline":     good[:len(good)-1],
		"trailing bytes": append(bytes.Clone(good), 'x'),
		"bit flip":       flipped,
		"all-zero id":    zero,
		"uppercase hex":  upper,
		"raw bytes":      bytes.Repeat([]byte{0xff}, 16),
		"zeros":          make([]byte, 64),
		"oversized":      bytes.Repeat([]byte("a"), maxFileSize+1),
	}
	for name, data := range cases {
		if _, err := decodeStorageIDFile(data); !errors.Is(err, errCorruptFile) {
			t.Errorf("%s: err = %v, want errCorruptFile", name, err)
		}
	}
}

func TestID2_RegistrationFileRoundTripAndCorruption(t *testing.T) {
	for _, inc := range []Incarnation{0, 1, 7, 1 << 63, ^Incarnation(0)} {
		got, err := decodeRegistrationFile(encodeRegistrationFile(inc))
		if err != nil || got != inc {
			t.Fatalf("round trip %d = %d, %v", inc, got, err)
		}
	}
	good := encodeRegistrationFile(42)
	// A digit that decays into another digit must not read as another
	// incarnation: that could turn "control plane ahead" into a keep.
	decayed := bytes.Replace(good, []byte("=42 "), []byte("=92 "), 1)
	cases := map[string][]byte{
		"decayed digit":  decayed,
		"leading zero":   encodeLine(registrationMagic, []field{{"incarnation", "042"}}),
		"sign":           encodeLine(registrationMagic, []field{{"incarnation", "+42"}}),
		"overflow":       encodeLine(registrationMagic, []field{{"incarnation", "18446744073709551616"}}),
		"wrong magic":    encodeLine(storageIDMagic, []field{{"incarnation", "42"}}),
		"wrong key":      encodeLine(registrationMagic, []field{{"inc", "42"}}),
		"extra field":    encodeLine(registrationMagic, []field{{"incarnation", "42"}, {"x", "y"}}),
		"empty":          nil,
		"trailing space": append(bytes.TrimSuffix(good, []byte("\n")), ' ', '\n'),
	}
	for name, data := range cases {
		if _, err := decodeRegistrationFile(data); !errors.Is(err, errCorruptFile) {
			t.Errorf("%s: err = %v, want errCorruptFile", name, err)
		}
	}
}

func TestRunStateFileRoundTripAndCorruption(t *testing.T) {
	for _, rs := range []RunState{
		{Phase: PhaseRunning, BootID: bootA, Fsync: FsyncPeriodic},
		{Phase: PhaseCleanStop, BootID: bootB, Fsync: FsyncOnCommit},
		{Phase: PhaseRunning, BootID: "", Fsync: FsyncNone},
	} {
		data, err := encodeRunStateFile(rs)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeRunStateFile(data)
		if err != nil || got != rs {
			t.Fatalf("round trip %+v = %+v, %v (file %q)", rs, got, err, data)
		}
	}
	for _, bad := range []RunState{
		{Phase: 0, BootID: bootA, Fsync: FsyncNone},
		{Phase: PhaseRunning, BootID: bootA, Fsync: 0},
		{Phase: PhaseRunning, BootID: "not a uuid", Fsync: FsyncNone},
	} {
		if _, err := encodeRunStateFile(bad); err == nil {
			t.Errorf("encode %+v: want error", bad)
		}
	}
	good, _ := encodeRunStateFile(RunState{Phase: PhaseCleanStop, BootID: bootA, Fsync: FsyncNone})
	cases := map[string][]byte{
		"phase flipped without checksum": bytes.Replace(good, []byte("phase=clean-stop"), []byte("phase=running"), 1),
		"unknown phase":                  encodeLine(runStateMagic, []field{{"phase", "paused"}, {"boot", bootA}, {"fsync", "none"}}),
		"unknown mode":                   encodeLine(runStateMagic, []field{{"phase", "running"}, {"boot", bootA}, {"fsync", "always"}}),
		"api spelling in file":           encodeLine(runStateMagic, []field{{"phase", "running"}, {"boot", bootA}, {"fsync", "OnCommit"}}),
		"uppercase boot":                 encodeLine(runStateMagic, []field{{"phase", "running"}, {"boot", strings.ToUpper(bootB)}, {"fsync", "none"}}),
		"fields reordered":               encodeLine(runStateMagic, []field{{"boot", bootA}, {"phase", "running"}, {"fsync", "none"}}),
		"truncated":                      good[:20],
	}
	for name, data := range cases {
		if _, err := decodeRunStateFile(data); !errors.Is(err, errCorruptFile) {
			t.Errorf("%s: err = %v, want errCorruptFile", name, err)
		}
	}
}

func TestParseFsyncMode(t *testing.T) {
	for in, want := range map[string]FsyncMode{
		"on-commit": FsyncOnCommit, "OnCommit": FsyncOnCommit,
		"periodic": FsyncPeriodic, "Periodic": FsyncPeriodic,
		"none": FsyncNone, "None": FsyncNone,
	} {
		if got, err := ParseFsyncMode(in); err != nil || got != want {
			t.Errorf("ParseFsyncMode(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := ParseFsyncMode("always"); err == nil {
		t.Error("ParseFsyncMode(always): want error")
	}
}

func TestReadBootID(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if got, err := ReadBootID(write("ok", bootA+"\n")); err != nil || got != bootA {
		t.Fatalf("ReadBootID = %q, %v", got, err)
	}
	for name, content := range map[string]string{"empty": "", "garbage": "hello\n", "upper": strings.ToUpper(bootB) + "\n"} {
		if _, err := ReadBootID(write(name, content)); err == nil {
			t.Errorf("%s: want error", name)
		}
	}
	if _, err := ReadBootID(filepath.Join(dir, "missing")); err == nil {
		t.Error("missing file: want error")
	}
}

// TestReadBootIDFromKernel reads the real boot id where the kernel offers
// one.
func TestReadBootIDFromKernel(t *testing.T) {
	if _, err := os.Stat(DefaultBootIDPath); err != nil {
		t.Skipf("no %s: %v", DefaultBootIDPath, err)
	}
	id, err := ReadBootID(DefaultBootIDPath)
	if err != nil || !validBootID(id) {
		t.Fatalf("ReadBootID(kernel) = %q, %v", id, err)
	}
	again, err := ReadBootID(DefaultBootIDPath)
	if err != nil || again != id {
		t.Fatalf("boot id changed within one boot: %q then %q (%v)", id, again, err)
	}
}

func TestSyncFSOnTempDir(t *testing.T) {
	dir := t.TempDir()
	if err := SyncFS(dir); err != nil {
		t.Fatalf("SyncFS: %v", err)
	}
	if err := SyncFS(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("SyncFS on a missing directory: want error")
	}
}
