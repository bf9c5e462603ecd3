package k8s_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer is a bytes.Buffer for one writer (a command's output) and
// readers that poll it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// ack is one answer of `felix append --each-line`.
type ack struct {
	First uint64 `json:"first"`
	Last  uint64 `json:"last"`
}

// acks parses the producer's answers by offset.
func acks(out string) (map[uint64]bool, error) {
	got := map[uint64]bool{}
	for _, line := range strings.Split(out, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		var a ack
		if err := json.Unmarshal([]byte(line), &a); err != nil {
			return nil, fmt.Errorf("producer printed %q: %w", line, err)
		}
		if a.First != a.Last {
			return nil, fmt.Errorf("one line landed as offsets %d-%d", a.First, a.Last)
		}
		got[a.First] = true
	}
	return got, nil
}

// rollUnderLoad rolls every broker of the cluster (a change of
// spec.resources) while one producer appends to shard 1 of events, one
// record at a time, each after the previous one was acknowledged. A roll
// restarts leaders last, after moving their leaderships (docs/operator.md,
// "A restart in a roll is never a failover"), so the producer, retrying
// within its request timeout, never fails, and every acknowledged record
// is read back once, in order. The longest wait for one acknowledgement is
// logged: the write unavailability of the roll.
func rollUnderLoad(t *testing.T, e env) {
	e.kubectl(t, "-n", appNS, "wait", "felixcluster/"+cluster, "--for=condition=Ready", "--timeout=4m")
	bootstrap := fmt.Sprintf("%s.%s.svc", cluster, appNS)
	in, feed := io.Pipe()
	var out lockedBuffer // the attach stream: progress only
	produced := make(chan error, 1)
	var printed string // the producer's log, once it ended
	go func() {
		var err error
		printed, err = e.felixClientIO(t, appNS, "roll-producer", "alice", in, &out,
			"append", "--bootstrap", bootstrap, "--stream", "events", "--shard", "1", "--each-line", "--idempotent", "--timeout", "60s")
		produced <- err
	}()

	// The feeder sends one line, waits for its answer, and goes on until
	// stop is closed; it reports how many lines were answered and the
	// longest wait for an answer.
	stop := make(chan struct{})
	type fed struct {
		lines   int
		longest time.Duration
		err     error
	}
	feeding := make(chan fed, 1)
	// Answers so far, cheaply (the output is parsed once at the end):
	// while the producer runs, every line it prints is one answer.
	answered := func() int { return strings.Count(out.String(), "\n") }
	progress := make(chan int, 1024)
	go func() {
		var f fed
		defer func() { _ = feed.Close(); feeding <- f }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := fmt.Fprintf(feed, "roll-%05d\n", f.lines); err != nil {
				f.err = err
				return
			}
			sent := time.Now()
			for answered() < f.lines+1 {
				select {
				case err := <-produced:
					produced <- err
					f.err = fmt.Errorf("the producer ended after %d lines: %v", f.lines, err)
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
			if d := time.Since(sent); d > f.longest {
				f.longest = d
			}
			f.lines++
			select {
			case progress <- f.lines:
			default:
			}
			time.Sleep(50 * time.Millisecond) // pacing, not waiting: about ten records a second
		}
	}()
	waitLines := func(n int, within time.Duration) {
		t.Helper()
		deadline := time.After(within)
		for {
			select {
			case got := <-progress:
				if got >= n {
					return
				}
			case f := <-feeding:
				feeding <- f
				t.Fatalf("waiting for %d acknowledged records: %v", n, f.err)
			case <-deadline:
				t.Fatalf("fewer than %d acknowledged records within %v; producer printed:\n%s", n, within, out.String())
			}
		}
	}
	waitLines(10, 3*time.Minute)

	pods := strings.Fields(e.kubectl(t, "-n", appNS, "get", "pod", "-l", brokerSelector(), "-o", "jsonpath={.items[*].metadata.name}"))
	uids := map[string]string{}
	for _, p := range pods {
		uids[p] = podUID(t, e, p)
	}
	start := time.Now()
	e.kubectl(t, "-n", appNS, "patch", "felixcluster", cluster, "--type=merge", "-p",
		`{"spec":{"resources":{"requests":{"cpu":"60m"}}}}`)
	for _, p := range pods {
		waitNewPodReadyWithin(t, e, p, uids[p], 12*time.Minute)
	}
	e.kubectl(t, "-n", appNS, "wait", "felixcluster/"+cluster, "--for=condition=Ready", "--timeout=4m")
	rolled := time.Since(start)
	// A few more after the roll, then the producer's stdin closes.
	f0 := answered()
	waitLines(f0+10, 2*time.Minute)
	close(stop)
	f := <-feeding
	if err := <-produced; err != nil {
		t.Fatalf("the producer failed during the roll: %v\nprinted:\n%s", err, out.String())
	}
	if f.err != nil {
		t.Fatal(f.err)
	}
	got, err := acks(printed)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("roll of %d brokers under load: %v; %d records acknowledged; longest wait for one acknowledgement %v",
		len(pods), rolled.Round(time.Second), len(got), f.longest.Round(time.Millisecond))

	// Every acknowledged record is in the log once, at the offset it was
	// acknowledged at, in the order it was sent.
	read := readShard(t, e, bootstrap, "roll-consumer", "alice", 1)
	var payloads []string
	for _, r := range read {
		payloads = append(payloads, r.payload)
	}
	i := 0
	for _, r := range read {
		if !got[r.offset] {
			continue
		}
		if want := fmt.Sprintf("roll-%05d", i); r.payload != want {
			t.Fatalf("offset %d holds %q, want %q (acknowledged in that order); shard 1: %v", r.offset, r.payload, want, payloads)
		}
		i++
	}
	if i != len(got) || i != f.lines {
		t.Fatalf("%d of %d acknowledged records read back (%d lines sent); shard 1: %v", i, len(got), f.lines, payloads)
	}
	seen := map[string]bool{}
	for _, p := range payloads {
		if seen[p] {
			t.Fatalf("%q is in shard 1 twice: %v", p, payloads)
		}
		seen[p] = true
	}
}
