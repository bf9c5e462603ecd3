package logstore

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"felix.dev/felix/broker/record"
)

// Crash tests with real processes (issue 3.6, log part): the test binary is
// re-executed as a child that appends under one fsync mode and prints every
// acknowledged append; the parent SIGKILLs it at a random (seeded) moment.
// The next child opens the store, verifies every stored record (dense
// offsets, checksums, self-checking payloads) and reports the tail; the
// parent checks that no acknowledged append was lost. FELIX_CRASH_ROUNDS
// sets the rounds per mode (default 50), FELIX_CRASH_SEED the seed, and
// FELIX_CRASH_VALUE_THRESHOLD the children's Options.ValueThreshold.

const (
	envCrashChild = "FELIX_LOGSTORE_CRASH_CHILD"
	envCrashDir   = "FELIX_LOGSTORE_CRASH_DIR"
	envCrashMode  = "FELIX_LOGSTORE_CRASH_MODE"
	envCrashFrom  = "FELIX_LOGSTORE_CRASH_VERIFY_FROM"
	envCrashAhead = "FELIX_LOGSTORE_CRASH_AHEAD"
	envCrashRefs  = "FELIX_LOGSTORE_CRASH_REFS"
)

// crashRefsThreshold is the value threshold of the crash rounds that keep
// batches in the commit log: every batch of the rounds' records is kept
// there.
const crashRefsThreshold = 64

// crashPayload is self-checking: 4 bytes of crc32c over the rest.
func crashPayload(rng *rand.Rand) []byte {
	p := make([]byte, 4+8+rng.IntN(200))
	for i := 4; i < len(p); i++ {
		p[i] = byte(rng.Uint32())
	}
	binary.LittleEndian.PutUint32(p, crc32.Checksum(p[4:], castagnoli))
	return p
}

func crashPayloadOK(p []byte) bool {
	return len(p) >= 12 && binary.LittleEndian.Uint32(p) == crc32.Checksum(p[4:], castagnoli)
}

// verifyCrashLog reads every stored record and checks density and payloads.
func verifyCrashLog(l *Log, from uint64) (tail uint64, err error) {
	info := l.Describe()
	from = max(from, info.Start)
	if from > info.Tail {
		return 0, fmt.Errorf("tail %d below %d", info.Tail, from)
	}
	for from < info.Durable {
		res, err := l.ReadRaw(from, ReadOptions{MaxRecords: 1000})
		if err != nil {
			return 0, fmt.Errorf("read from %d: %w", from, err)
		}
		for i, r := range res.Records {
			if r.Offset != from+uint64(i) {
				return 0, fmt.Errorf("offset %d where %d expected", r.Offset, from+uint64(i))
			}
			if r.Kind == record.KindTrim {
				if r.Floor > r.Offset {
					return 0, fmt.Errorf("trim at %d with floor %d", r.Offset, r.Floor)
				}
				continue
			}
			if !crashPayloadOK(r.Payload) {
				return 0, fmt.Errorf("torn or wrong payload at %d", r.Offset)
			}
		}
		if res.Next <= from {
			return 0, fmt.Errorf("read from %d did not advance", from)
		}
		from = res.Next
	}
	// Readers start at the floor the committed trims set.
	if info.Floor > info.Tail {
		return 0, fmt.Errorf("floor %d above tail %d", info.Floor, info.Tail)
	}
	if _, err := l.Read(FromEarliest, ReadOptions{MaxRecords: 10}); err != nil {
		return 0, fmt.Errorf("read from earliest: %w", err)
	}
	return info.Tail, nil
}

// TestCrashChild is the child process; it does nothing in a normal run.
func TestCrashChild(t *testing.T) {
	if os.Getenv(envCrashChild) != "1" {
		t.Skip("crash child: runs only under the crash test")
	}
	mode, err := ParseFsyncMode(os.Getenv(envCrashMode))
	if err != nil {
		fmt.Printf("bad mode %v\n", err)
		os.Exit(3)
	}
	vt, _ := strconv.ParseInt(os.Getenv("FELIX_CRASH_VALUE_THRESHOLD"), 10, 64)
	refs := os.Getenv(envCrashRefs) == "1"
	if refs {
		vt = crashRefsThreshold
	}
	// A SIGKILL on this boot: under on-commit every acknowledged write is
	// on disk, under periodic and none every write is (the kernel kept
	// them), so open must find no damage (LastRun, issue 25).
	lastRun := LastRunComplete
	if mode == FsyncOnCommit {
		lastRun = LastRunAcknowledgedDurable
	}
	s, err := Open(Options{Dir: os.Getenv(envCrashDir), Fsync: mode, FsyncInterval: 20 * time.Millisecond, SegmentRecords: 1000, AutoCommit: true, ValueThreshold: vt, CommitLogValues: refs, LastRun: lastRun})
	if err != nil {
		fmt.Printf("bad open %v\n", err)
		os.Exit(3)
	}
	if d := s.Damaged(); len(d) > 0 {
		fmt.Printf("bad damage after a process crash: %v\n", d)
		os.Exit(3)
	}
	l, err := s.Log(testLog)
	if err != nil {
		fmt.Printf("bad log %v\n", err)
		os.Exit(3)
	}
	// Earlier rounds verified what lies below the previous round's open tail.
	from, _ := strconv.ParseUint(os.Getenv(envCrashFrom), 10, 64)
	tail, err := verifyCrashLog(l, from)
	if err != nil {
		fmt.Printf("bad verify %v\n", err)
		os.Exit(3)
	}
	var outMu sync.Mutex
	say := func(format string, a ...any) {
		outMu.Lock()
		defer outMu.Unlock()
		_, _ = os.Stdout.WriteString(fmt.Sprintf(format, a...)) // one write(2) per line
	}
	if os.Getenv(envCrashAhead) == "1" {
		// Fill another log until the commit log has moved to a file
		// written ahead (direct writes where the file system allows),
		// so the kill lands while frames go there.
		direct, err := primeWrittenAhead(s)
		if err != nil {
			fmt.Printf("bad ahead %v\n", err)
			os.Exit(3)
		}
		say("ahead %t\n", direct)
	}
	say("open %d\n", tail)
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(w)))
			for n := 0; ; n++ {
				if w == 0 && n%20 == 19 {
					// Trims too, so recovery also rebuilds or checks the
					// trim index and the floor; losing the race for the
					// tail is fine.
					tail := l.Describe().Tail
					_, err := l.Trim(context.Background(), TrimRequest{Floor: tail - min(tail, 10), ExpectTail: tail, Headers: epochHeader("1")})
					if err != nil && !errors.Is(err, record.ErrOffsetMismatch) {
						say("bad trim %v\n", err)
						os.Exit(3)
					}
				}
				recs := make([]record.Record, 1+rng.IntN(16))
				for i := range recs {
					recs[i] = record.Record{Epoch: 1, Payload: crashPayload(rng)}
				}
				res, err := l.Append(context.Background(), recs, nil)
				if err != nil {
					say("bad append %v\n", err)
					os.Exit(3)
				}
				say("ack %d %d\n", res.First, res.Tail)
			}
		}()
	}
	wg.Wait()
}

// primeWrittenAhead appends to a filler log until the store's commit log
// has moved to a file written ahead, and reports whether that file takes
// direct writes.
func primeWrittenAhead(s *Store) (bool, error) {
	filler, err := s.Log(record.LogID{ShardID: record.ShardID{Stream: "filler"}, Log: record.LogData})
	if err != nil {
		return false, err
	}
	batch := make([]record.Record, 64)
	for i := range batch {
		batch[i] = record.Record{Epoch: 1, Payload: make([]byte, 4096)}
	}
	deadline := time.Now().Add(60 * time.Second)
	for !s.cl.ahead.Load() {
		if time.Now().After(deadline) {
			return false, errors.New("the commit log did not move to a file written ahead within 60s")
		}
		if _, err := filler.Append(context.Background(), batch, nil); err != nil {
			return false, err
		}
	}
	s.cl.mu.RLock()
	defer s.cl.mu.RUnlock()
	return s.cl.direct != nil, nil
}

func TestCrash_AcknowledgedAppendsSurviveSIGKILL(t *testing.T) {
	if os.Getenv(envCrashChild) == "1" {
		t.Skip("in the child")
	}
	rounds := envInt(t, "FELIX_CRASH_ROUNDS", 50)
	seed := uint64(envInt(t, "FELIX_CRASH_SEED", 20261130))
	type variant struct {
		name   string
		mode   FsyncMode
		ahead  bool // kill while frames go to a file written ahead
		refs   bool // batches kept in the commit log (Options.CommitLogValues)
		rounds int
	}
	variants := []variant{
		{FsyncOnCommit.String(), FsyncOnCommit, false, false, rounds},
		{FsyncPeriodic.String(), FsyncPeriodic, false, false, rounds},
		{FsyncNone.String(), FsyncNone, false, false, rounds},
		// Each round writes 4 MiB and a 64 MiB spare first: fewer rounds.
		{"on-commit-written-ahead", FsyncOnCommit, true, false, max(rounds/5, 3)},
		{"on-commit-refs", FsyncOnCommit, false, true, rounds},
		{"on-commit-refs-written-ahead", FsyncOnCommit, true, true, max(rounds/5, 3)},
	}
	for _, v := range variants {
		mode := v.mode
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			stream := uint64(mode)
			if v.ahead {
				stream += 100
			}
			if v.refs {
				stream += 200
			}
			rng := rand.New(rand.NewPCG(seed, stream))
			dir := t.TempDir()
			var ackedTail, verified uint64 // highest acknowledged tail; verified below
			acks, direct := 0, 0
			for round := 0; round < v.rounds; round++ {
				tail, n, opened, d := crashRound(t, dir, mode, v.ahead, v.refs, time.Duration(rng.IntN(40_000))*time.Microsecond, ackedTail, verified)
				verified = opened
				acks += n
				if d {
					direct++
				}
				// A process crash loses nothing acknowledged in any mode:
				// the data reached the OS before the ack. Under OnCommit it
				// also reached the disk.
				if tail < ackedTail {
					t.Fatalf("round %d: recovered tail %d below acknowledged tail %d", round, tail, ackedTail)
				}
				ackedTail = max(ackedTail, tail)
			}
			o := Options{Dir: dir, Fsync: mode}
			if v.refs {
				o.CommitLogValues, o.ValueThreshold = true, crashRefsThreshold
			}
			s := openTest(t, o)
			if v.refs && len(s.pins) == 0 {
				t.Fatal("no batch of the rounds was kept in the commit log")
			}
			tail, err := verifyCrashLog(mustLog(t, s, testLog), 0)
			if err != nil || tail < ackedTail {
				t.Fatalf("final verify: tail %d (acknowledged %d): %v", tail, ackedTail, err)
			}
			if v.ahead && direct == 0 && directSupported(t.TempDir()) {
				t.Fatalf("no round wrote its frames directly, though this file system takes O_DIRECT")
			}
			t.Logf("%s: %d rounds (%d with direct writes), %d acknowledged appends, final tail %d", v.name, v.rounds, direct, acks, tail)
		})
	}
}

// crashRound runs one child, kills it after delay (counted from its open),
// and returns max(the tail the child found on open, the highest acknowledged
// tail it printed), the number of acknowledgements, and the open tail (all
// below it verified).
func crashRound(t *testing.T, dir string, mode FsyncMode, ahead, refs bool, delay time.Duration, prevAcked, verified uint64) (uint64, int, uint64, bool) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), envCrashChild+"=1", envCrashDir+"="+dir, envCrashMode+"="+mode.String(), envCrashFrom+"="+strconv.FormatUint(verified, 10))
	if ahead {
		cmd.Env = append(cmd.Env, envCrashAhead+"=1")
	}
	if refs {
		cmd.Env = append(cmd.Env, envCrashRefs+"=1")
	}
	direct := false
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	openTail, opened := uint64(0), false
	var acked uint64
	n := 0
	var timer *time.Timer
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 2 && f[0] == "open":
			openTail, _ = strconv.ParseUint(f[1], 10, 64)
			opened = true
			if openTail < prevAcked {
				_ = cmd.Process.Kill()
				t.Fatalf("child opened with tail %d below acknowledged tail %d", openTail, prevAcked)
			}
			timer = time.AfterFunc(delay, func() { _ = cmd.Process.Kill() })
		case len(f) == 2 && f[0] == "ahead":
			direct = f[1] == "true"
		case len(f) == 3 && f[0] == "ack":
			v, _ := strconv.ParseUint(f[2], 10, 64)
			acked = max(acked, v)
			n++
		case len(f) > 0 && f[0] == "bad":
			_ = cmd.Process.Kill()
			t.Fatalf("child: %s", sc.Text())
		}
	}
	if timer != nil {
		timer.Stop()
	}
	_ = cmd.Wait()
	if !opened {
		t.Fatalf("child never opened the store")
	}
	// The next round's open must show at least max(openTail, acked).
	return max(openTail, acked), n, openTail, direct
}
