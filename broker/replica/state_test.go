package replica

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/replication"
)

// The starting state's epoch starts come from a scan of the stored
// records, every kind included.
func TestLoadStateFindsEpochStarts(t *testing.T) {
	st, err := logstore.Open(logstore.Options{Dir: t.TempDir(), Fsync: logstore.FsyncNone})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = st.Close() }()
	var logs [len(record.LogKinds)]*logstore.Log
	for _, l := range record.LogKinds {
		if logs[l], err = st.CreateLog(record.LogID{ShardID: testShard, Log: l}, logstore.LogOptions{Base: 10}); err != nil {
			t.Fatal(err)
		}
	}
	epochs := []uint64{1, 1, 1, 2, 4, 4}
	var recs []record.Record
	for i, e := range epochs {
		k := record.KindData
		if i == 0 || epochs[i-1] != e {
			k = record.KindFence
		}
		recs = append(recs, record.Record{Offset: 10 + uint64(i), Epoch: e, Kind: k, Timestamp: 1})
	}
	// Two batches, so the scan crosses a batch boundary inside an epoch.
	for _, part := range [][]record.Record{recs[:2], recs[2:]} {
		if err := logs[record.LogGroup].AppendReplicated(context.Background(), part); err != nil {
			t.Fatal(err)
		}
	}
	got, err := loadState(&logs)
	if err != nil {
		t.Fatal(err)
	}
	want := replication.State{}
	for i := range want.Logs {
		want.Logs[i] = replication.LogState{Base: 10, Tail: 10}
	}
	want.Logs[record.LogGroup] = replication.LogState{Base: 10, Tail: 16,
		Epochs: []replication.EpochStart{{Epoch: 1, Offset: 10}, {Epoch: 2, Offset: 13}, {Epoch: 4, Offset: 14}}}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("state (-want +got):\n%s", d)
	}
}
