package logstore

import (
	"encoding/binary"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
)

// BenchmarkKeyLayout compares, on raw badger with no sync, the two key
// layouts considered for a 64-record batch of 128 B records: one key per
// record (64 keys per transaction) against one key per batch (what the
// store does). It reports records/s.
func BenchmarkKeyLayout(b *testing.B) {
	const batch, size = 64, 128
	payload := make([]byte, size)
	for _, layout := range []string{"key-per-record", "key-per-batch"} {
		b.Run(layout, func(b *testing.B) {
			db, err := badger.Open(badger.DefaultOptions(b.TempDir()).WithLogger(nil).
				WithSyncWrites(false).WithDetectConflicts(false).WithCompression(options.None).WithMetricsEnabled(false))
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			value := make([]byte, 0, batch*(size+8))
			for i := 0; i < batch; i++ {
				value = append(value, payload...)
			}
			b.ResetTimer()
			t0 := time.Now()
			for n := 0; n < b.N; n++ {
				txn := db.NewTransaction(true)
				first := uint64(n * batch)
				if layout == "key-per-record" {
					for i := 0; i < batch; i++ {
						if err := txn.Set(binary.BigEndian.AppendUint64([]byte{'d', 0, 0, 0, 0}, first+uint64(i)), payload); err != nil {
							b.Fatal(err)
						}
					}
				} else if err := txn.Set(binary.BigEndian.AppendUint64([]byte{'d', 0, 0, 0, 0}, first), value); err != nil {
					b.Fatal(err)
				}
				if err := txn.Commit(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*batch)/time.Since(t0).Seconds(), "records/s")
		})
	}
}
