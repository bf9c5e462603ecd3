package logstore

import (
	"sync"
	"testing"

	"felix.dev/felix/broker/record"
)

// TestConcurrentCreateLog: creations run outside the store's lock, so
// concurrent creations of one id must still make one log, of distinct ids
// distinct logs, and all of them must be there after a reopen.
func TestConcurrentCreateLog(t *testing.T) {
	s := openTest(t, Options{Fsync: FsyncOnCommit})
	const ids, racers = 20, 4
	got := make([][racers]*Log, ids)
	var wg sync.WaitGroup
	for i := 0; i < ids; i++ {
		for r := 0; r < racers; r++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l, err := s.CreateLog(record.LogID{ShardID: record.ShardID{Stream: "c", Shard: uint32(i)}}, LogOptions{})
				if err != nil {
					t.Error(err)
					return
				}
				got[i][r] = l
			}()
		}
	}
	wg.Wait()
	seen := map[*Log]bool{}
	for i := range got {
		for r := 1; r < racers; r++ {
			if got[i][r] != got[i][0] {
				t.Fatalf("log %d created twice", i)
			}
		}
		if seen[got[i][0]] {
			t.Fatalf("log %d shares a Log with another id", i)
		}
		seen[got[i][0]] = true
		mustAppend(t, got[i][0], data("x"), ptr(0))
	}
	s = reopen(t, s)
	if n := len(s.Logs()); n != ids {
		t.Fatalf("%d logs after reopen, want %d", n, ids)
	}
	for i := 0; i < ids; i++ {
		l, ok := s.Lookup(record.LogID{ShardID: record.ShardID{Stream: "c", Shard: uint32(i)}})
		if !ok || len(readAll(t, l, 0, false)) != 1 {
			t.Fatalf("log %d lost its record across a reopen", i)
		}
	}
}
