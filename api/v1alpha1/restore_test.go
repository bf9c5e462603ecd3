package v1alpha1

import "testing"

// TestRestoreEpochs_FirstEpoch: a restored shard starts one above the
// higher of its recorded epoch and the floor; a shard the backup did not
// record starts one above the floor (1 without a floor).
func TestRestoreEpochs_FirstEpoch(t *testing.T) {
	rec := &RecordedEpochs{Shards: []ShardEpoch{{Stream: "s", Index: 0, Epoch: 7}, {Stream: "s", Index: 1, Epoch: 0}, {Stream: "t", Index: 0, Epoch: 3}}}
	for _, tc := range []struct {
		name   string
		st     RestoreStatus
		stream string
		index  int32
		want   int64
	}{
		{"recorded", RestoreStatus{Epochs: rec}, "s", 0, 8},
		{"never assigned", RestoreStatus{Epochs: rec}, "s", 1, 1},
		{"index not recorded", RestoreStatus{Epochs: rec}, "s", 2, 1},
		{"stream not recorded", RestoreStatus{Epochs: rec}, "u", 0, 1},
		{"same index other stream", RestoreStatus{Epochs: rec}, "t", 0, 4},
		{"floor above record", RestoreStatus{Epochs: rec, EpochFloor: 100}, "s", 0, 101},
		{"record above floor", RestoreStatus{Epochs: rec, EpochFloor: 5}, "s", 0, 8},
		{"floor only (backup without epochs)", RestoreStatus{EpochFloor: 100}, "s", 0, 101},
		{"nothing", RestoreStatus{}, "s", 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.st.FirstEpoch(tc.stream, tc.index); got != tc.want {
				t.Errorf("FirstEpoch(%s, %d) = %d, want %d", tc.stream, tc.index, got, tc.want)
			}
		})
	}
}
