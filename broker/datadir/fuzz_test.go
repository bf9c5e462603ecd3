package datadir

import (
	"bytes"
	"errors"
	"testing"
)

// The fuzz targets check that every decoder of on-disk bytes never panics,
// refuses with errCorruptFile, and accepts only the canonical encoding of
// what it returns (strictness: one value, one file).

func FuzzStorageIDFile(f *testing.F) {
	f.Add(encodeStorageIDFile(StorageID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}))
	f.Add([]byte("felix-storage-id/1 id=00000000000000000000000000000000 crc32c=00000000\n"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		id, err := decodeStorageIDFile(data)
		if err != nil {
			if !errors.Is(err, errCorruptFile) {
				t.Fatalf("error %v does not wrap errCorruptFile", err)
			}
			return
		}
		if id.IsZero() {
			t.Fatal("decoded the zero id")
		}
		if enc := encodeStorageIDFile(id); !bytes.Equal(enc, data) {
			t.Fatalf("accepted non-canonical %q (canonical %q)", data, enc)
		}
	})
}

func FuzzRegistrationFile(f *testing.F) {
	f.Add(encodeRegistrationFile(0))
	f.Add(encodeRegistrationFile(123456789))
	f.Add([]byte("felix-registration/1 incarnation=01 crc32c=00000000\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		inc, err := decodeRegistrationFile(data)
		if err != nil {
			if !errors.Is(err, errCorruptFile) {
				t.Fatalf("error %v does not wrap errCorruptFile", err)
			}
			return
		}
		if enc := encodeRegistrationFile(inc); !bytes.Equal(enc, data) {
			t.Fatalf("accepted non-canonical %q (canonical %q)", data, enc)
		}
	})
}

func FuzzRunStateFile(f *testing.F) {
	for _, rs := range []RunState{
		{Phase: PhaseRunning, BootID: bootA, Fsync: FsyncPeriodic},
		{Phase: PhaseCleanStop, BootID: "", Fsync: FsyncOnCommit},
	} {
		data, err := encodeRunStateFile(rs)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("felix-run-state/1 phase=running boot=- fsync=none crc32c=zzzzzzzz\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		rs, err := decodeRunStateFile(data)
		if err != nil {
			if !errors.Is(err, errCorruptFile) {
				t.Fatalf("error %v does not wrap errCorruptFile", err)
			}
			return
		}
		enc, err := encodeRunStateFile(rs)
		if err != nil {
			t.Fatalf("decoded %+v that cannot be encoded: %v", rs, err)
		}
		if !bytes.Equal(enc, data) {
			t.Fatalf("accepted non-canonical %q (canonical %q)", data, enc)
		}
	})
}
