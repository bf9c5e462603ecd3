package replica

import (
	"fmt"

	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/replication"
)

// scanBatch is the number of records read per step of the epoch scan.
const scanBatch = 4096

// loadState builds the core's starting state from the four logs: for each,
// the first stored offset, the tail and the epoch starts. The log store
// keeps no epoch index, so the epoch starts come from scanning every stored
// record once (ReadRaw, all kinds); see the package documentation for the
// cost.
func loadState(logs *[len(record.LogKinds)]*logstore.Log) (replication.State, error) {
	var st replication.State
	for _, l := range record.LogKinds {
		ls, err := scanLog(logs[l])
		if err != nil {
			return replication.State{}, err
		}
		st.Logs[l] = ls
	}
	return st, nil
}

// scanLog returns one log's state. Records below the first stored offset
// (deleted segments) are not described: the core's base is the first
// stored offset.
func scanLog(lg *logstore.Log) (replication.LogState, error) {
	info := lg.Describe()
	ls := replication.LogState{Base: info.Start, Tail: info.Tail}
	if info.Durable < info.Tail {
		return ls, fmt.Errorf("replica: %s: durable %d below tail %d at start", info.ID, info.Durable, info.Tail)
	}
	var last uint64
	for from := info.Start; from < info.Tail; {
		res, err := lg.ReadRaw(from, logstore.ReadOptions{MaxRecords: scanBatch, UpTo: info.Tail})
		if err != nil {
			return ls, fmt.Errorf("replica: scan %s from %d: %w", info.ID, from, err)
		}
		for _, r := range res.Records {
			if len(ls.Epochs) == 0 || r.Epoch != last {
				if len(ls.Epochs) > 0 && r.Epoch < last {
					return ls, &record.CorruptError{Log: info.ID, Offset: r.Offset,
						Reason: fmt.Sprintf("epoch %d after epoch %d", r.Epoch, last)}
				}
				ls.Epochs = append(ls.Epochs, replication.EpochStart{Epoch: r.Epoch, Offset: r.Offset})
				last = r.Epoch
			}
		}
		if res.Next <= from {
			return ls, &record.CorruptError{Log: info.ID, Offset: from, Reason: "scan made no progress"}
		}
		from = res.Next
	}
	return ls, nil
}
