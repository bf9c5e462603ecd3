package logstore

import (
	"strconv"
	"context"
	"os"
	"strings"
	"sync"
	"testing"

	"felix.dev/felix/broker/record"
)

func writeBytes(t *testing.T) int64 {
	b, _ := os.ReadFile("/proc/self/io")
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "write_bytes:") {
			var n int64
			for _, c := range strings.TrimSpace(l[len("write_bytes:"):]) {
				n = n*10 + int64(c-'0')
			}
			return n
		}
	}
	return 0
}

func TestDiagIO(t *testing.T) {
	if os.Getenv("DIAG") == "" {
		t.Skip()
	}
	for _, mode := range []FsyncMode{FsyncOnCommit, FsyncNone} {
		dir := t.TempDir()
		vt, _ := strconv.Atoi(os.Getenv("VT"))
		s, _ := Open(Options{Dir: dir, Fsync: mode, ValueThreshold: int64(vt)})
		l, _ := s.Log(testLog)
		recs := make([]record.Record, 64)
		for i := range recs {
			p := make([]byte, 1024)
			for j := range p {
				p[j] = byte(i*31 + j*7 + j>>5)
			}
			recs[i] = record.Record{Payload: p}
		}
		w0 := writeBytes(t)
		var wg sync.WaitGroup
		for w := 0; w < 16; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 200; i++ {
					l.Append(context.Background(), recs, nil)
				}
			}()
		}
		wg.Wait()
		s.Close()
		w1 := writeBytes(t)
		payload := int64(16 * 200 * 64 * 1024)
		t.Logf("%s: payload %d MB, written %d MB, amplification %.2f", mode, payload>>20, (w1-w0)>>20, float64(w1-w0)/float64(payload))
	}
}
