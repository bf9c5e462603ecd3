package felixd_test

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/broker/client"
	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/record"
	"felix.dev/felix/felixd"
	"felix.dev/felix/internal/testenv"
)

const (
	stream   = "counter"
	workload = "counter-workload"
	ns       = "default"
)

// TestStaleTrimRefused_FrozenHolderRetires: holder 1 (a `felix felixd`
// process) runs the counter under the lease and is frozen with SIGSTOP past
// its lease; holder 2 takes over, makes its fenced write, snapshots and
// trims past holder 1's cursor; holder 1 resumes with SIGCONT, believing it
// still leads, and must retire with none of its writes landing after
// holder 2's fenced write. The stream's final contents, trims included,
// are read from the broker's store and checked for StaleTrimRefused.
//
// The broker's idle timeout (brokerIdleTimeout) is shorter than holder 2's
// wait for the lease and holder 1's freeze: both find their connection
// closed and must redial, resending nothing that may have landed.
func TestStaleTrimRefused_FrozenHolderRetires(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds felix, runs an API server and three processes")
	}
	bin := felixBin(t)
	env := testenv.Start(t)
	ctx := context.Background()
	fs := &felixv1.FelixStream{ObjectMeta: metav1.ObjectMeta{Name: stream, Namespace: ns},
		Spec: felixv1.FelixStreamSpec{Cluster: "local", Shards: 1, Replicas: 1, Fenced: true}}
	if err := env.Client.Create(ctx, fs); err != nil {
		t.Fatalf("create FelixStream: %v", err)
	}

	dataDir := t.TempDir()
	broker, addr := startBroker(t, bin, dataDir)
	shard := record.ShardID{Stream: stream, Shard: 0}
	describe := func() (d struct{ Floor, Tail uint64 }) {
		// A connection per look: the broker closes idle ones.
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		c, err := client.Dial(dctx, addr, client.Options{})
		if err != nil {
			return d
		}
		defer func() { _ = c.Close() }()
		got, err := c.Describe(dctx, shard)
		if err == nil {
			d.Floor, d.Tail = got.Floor, got.Tail
		}
		return d
	}
	holder := func(id string) []string {
		return []string{"felixd", "--broker", addr, "--stream", stream, "--shard", "0", "--workload", workload,
			"--namespace", ns, "--kubeconfig", env.Kubeconfig, "--identity", id, "--once",
			"--snapshot-every", "5", "--step-interval", "20ms",
			"--lease-duration", "3s", "--renew-deadline", "2s", "--retry-period", "500ms", "-v", "1"}
	}
	leaseHolder := func() string {
		var l coordinationv1.Lease
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: workload}, &l); err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}

	h1, _ := start(t, "holder-1", bin, holder("holder-1")...)
	waitFor(t, "holder 1 to write and trim", 60*time.Second, func() bool { d := describe(); return d.Tail >= 12 && d.Floor > 0 })
	h2, _ := start(t, "holder-2", bin, holder("holder-2")...)
	// Let holder 2 see the lease held (it campaigns every retry period).
	waitFor(t, "holder 2 to campaign", 30*time.Second, func() bool { return strings.Contains(h2.stderr.String(), "campaigning") })

	h1.signal(t, syscall.SIGSTOP)
	// Holder 1's cursor is at most the tail now: it cannot read or be
	// answered while stopped.
	frozen := describe()
	t.Logf("holder 1 frozen at tail %d floor %d", frozen.Tail, frozen.Floor)

	// Past holder 1's lease (3s on holder 2's clock), holder 2 takes over.
	waitFor(t, "holder 2 to take the lease", 30*time.Second, func() bool { return leaseHolder() == "holder-2" })
	waitFor(t, "holder 2 to snapshot and trim past holder 1's cursor", 30*time.Second, func() bool { return describe().Floor > frozen.Tail })
	if strings.Contains(h1.stderr.String(), "retired") {
		t.Fatal("holder 1 logged while stopped")
	}

	h1.signal(t, syscall.SIGCONT)
	if code := h1.wait(t, 30*time.Second); code != 4 {
		t.Fatalf("holder 1 exit code %d, want 4 (retired)", code)
	}
	if !strings.Contains(h1.stderr.String(), "CursorTooOld carries a newer epoch") {
		t.Errorf("holder 1 did not retire on the tagged CursorTooOld:\n%s", h1.stderr)
	}
	// Both outlived a connection the broker closed for being idle.
	for name, h := range map[string]*proc{"holder 1": h1, "holder 2": h2} {
		if !strings.Contains(h.stderr.String(), "redialed the broker") {
			t.Errorf("%s never redialed: the idle timeout did not close its connection:\n%s", name, h.stderr)
		}
	}
	// Holder 2 goes on writing after holder 1 is gone, then stops cleanly.
	after := describe().Tail
	waitFor(t, "holder 2 to keep writing", 30*time.Second, func() bool { return describe().Tail > after+10 })
	h2.signal(t, syscall.SIGTERM)
	if code := h2.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("holder 2 exit code %d", code)
	}
	broker.signal(t, syscall.SIGTERM)
	if code := broker.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("broker exit code %d", code)
	}

	recs := storedRecords(t, filepath.Join(dataDir, "logstore"), shard)
	if err := felixd.CheckStaleTrimRefused(recs); err != nil {
		t.Fatal(err)
	}
	checkContents(t, recs, frozen.Tail)
}

// storedRecords opens the stopped broker's log store and returns every
// stored record of the shard, trim records included, in offset order.
func storedRecords(t *testing.T, dir string, shard record.ShardID) []record.Record {
	t.Helper()
	s, err := logstore.Open(logstore.Options{Dir: dir, AutoCommit: true, Fsync: logstore.FsyncNone})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	l, err := s.Log(record.LogID{ShardID: shard, Log: record.LogData})
	if err != nil {
		t.Fatal(err)
	}
	var out []record.Record
	from := l.Describe().Start
	for {
		res, err := l.ReadRaw(from, logstore.ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, res.Records...)
		if res.Next == from {
			return out
		}
		from = res.Next
	}
}

// checkContents checks what the run must have left: fenced writes of epochs
// 1 and 2 (holder 2's after every epoch-1 record), a trim of epoch 2 past
// holder 1's frozen tail, and counter outputs that count up by one across
// the takeover.
func checkContents(t *testing.T, recs []record.Record, frozenTail uint64) {
	t.Helper()
	var fences []uint64
	fenceAt := map[uint64]uint64{}
	lastEpoch1 := uint64(0)
	trimmedPast := false
	var prev uint64
	outputs := 0
	for _, r := range recs {
		e, ok := felixd.EpochOf(r.Headers)
		if !ok {
			t.Fatalf("record at %d without a felixd epoch", r.Offset)
		}
		if e == 1 {
			lastEpoch1 = r.Offset
		}
		switch {
		case r.Kind == record.KindTrim:
			if e == 2 && r.Floor > frozenTail {
				trimmedPast = true
			}
		case felixd.KindOf(r.Headers) == felixd.KindFence:
			fences = append(fences, e)
			fenceAt[e] = r.Offset
		case felixd.KindOf(r.Headers) == felixd.KindOutput:
			v, err := strconv.ParseUint(string(r.Payload), 10, 64)
			if err != nil || (outputs > 0 && v != prev+1) {
				t.Fatalf("output %q at %d does not follow %d", r.Payload, r.Offset, prev)
			}
			prev = v
			outputs++
		}
	}
	if len(fences) != 2 || fences[0] != 1 || fences[1] != 2 {
		t.Fatalf("fenced writes of epochs %v, want [1 2]", fences)
	}
	if lastEpoch1 > fenceAt[2] {
		t.Fatalf("epoch 1 wrote at %d, after epoch 2's fenced write at %d", lastEpoch1, fenceAt[2])
	}
	if !trimmedPast {
		t.Fatalf("no trim of epoch 2 past holder 1's frozen tail %d", frozenTail)
	}
	t.Logf("%d records, %d outputs counting to %d; epoch 2 fenced at %d; last epoch-1 record at %d",
		len(recs), outputs, prev, fenceAt[2], lastEpoch1)
}
