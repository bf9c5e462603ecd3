package controllers_test

import (
	"context"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/controllers"
)

// TestRP6_SteadyStateReportWriteRate measures every write that changes a
// Felix object or a heartbeat Lease in the API server (watch events, so
// only writes that land) while leaders keep calling Set with moving
// positions and nothing placement reads changes. The cluster uses the
// API's default timings (heartbeat 2s, node expiry 10s).
//
// Default: 100 shards on 5 brokers, 6s window. The figure:
// FELIX_WRITE_RATE_SHARDS=1000 FELIX_WRITE_RATE_WINDOW=30s.
func TestRP6_SteadyStateReportWriteRate(t *testing.T) {
	shards := envInt(t, "FELIX_WRITE_RATE_SHARDS", 100)
	window := 6 * time.Second
	if v := os.Getenv("FELIX_WRITE_RATE_WINDOW"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatal(err)
		}
		window = d
	}
	ns := namespace(t)
	ctx := context.Background()
	create(t, &felixv1.FelixCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "wr"},
		Spec:       felixv1.FelixClusterSpec{Brokers: 5, Image: "felix:test"},
	})
	waitForBrokers(t, ns, "wr", 5)
	brokers := map[string]*fakeBroker{}
	for i := int32(0); i < 5; i++ {
		fb := startBrokerTiming(t, ns, "wr", i, 2*time.Second, 10*time.Second, 0)
		brokers[fb.name] = fb
	}
	create(t, &felixv1.FelixStream{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s"},
		Spec:       felixv1.FelixStreamSpec{Cluster: "wr", Shards: int32(shards), Replicas: 3},
	})
	setupStart := time.Now()
	var list felixv1.FelixShardList
	eventually(t, 5*time.Minute, "all shards assigned", func() (bool, string) {
		list = felixv1.FelixShardList{}
		if err := suite.c.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		n := 0
		for _, s := range list.Items {
			if s.Status.Assignment != nil {
				n++
			}
		}
		return n == shards, strconv.Itoa(n) + " assigned"
	})
	// Leaders report; then keep reporting moving positions (load).
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var sets atomic.Int64
	for name, fb := range brokers {
		var led []felixv1.FelixShard
		for _, s := range list.Items {
			if s.Status.Assignment.Leader == name {
				led = append(led, s)
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for pos := int64(1); ; pos++ {
				for _, s := range led {
					var lines []felixv1.FollowerReport
					for _, r := range s.Spec.Replicas[1:] {
						lines = append(lines, felixv1.FollowerReport{Name: r, StorageID: brokers[r].storageID, Confirmed: pos, CaughtUp: true})
					}
					fb.reports.Set(s.Name, felixv1.ShardReport{Leader: name, LeaderIncarnation: fb.cp.Incarnation(), LeaderStorageID: fb.storageID,
						Epoch: s.Status.Assignment.Epoch, Position: pos, Committed: pos, TakenAt: metav1.Now(), Followers: lines})
					sets.Add(1)
				}
				select {
				case <-loadCtx.Done():
					return
				case <-time.After(200 * time.Millisecond):
				}
			}
		}()
	}
	defer func() { stopLoad(); wg.Wait() }()
	eventually(t, 5*time.Minute, "all shards 3/3", func() (bool, string) {
		list = felixv1.FelixShardList{}
		_ = suite.c.List(ctx, &list, client.InNamespace(ns))
		n := 0
		for _, s := range list.Items {
			if s.Status.CaughtUp == "3/3" {
				n++
			}
		}
		return n == shards, strconv.Itoa(n) + " caught up"
	})
	t.Logf("setup of %d shards took %s", shards, time.Since(setupStart).Round(time.Millisecond))
	time.Sleep(time.Second) // let the last change writes drain

	wc, err := client.NewWithWatch(suite.env.Config, client.Options{Scheme: controllers.NewScheme()})
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]*atomic.Int64{}
	watchCtx, stopWatch := context.WithTimeout(ctx, window)
	defer stopWatch()
	var wwg sync.WaitGroup
	for kind, l := range map[string]client.ObjectList{
		"FelixShard": &felixv1.FelixShardList{}, "FelixBroker": &felixv1.FelixBrokerList{}, "FelixStream": &felixv1.FelixStreamList{},
		"FelixCluster": &felixv1.FelixClusterList{}, "Lease": &coordinationv1.LeaseList{},
	} {
		if err := wc.List(ctx, l, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		w, err := wc.Watch(watchCtx, l, client.InNamespace(ns), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: listRV(l)}})
		if err != nil {
			t.Fatal(err)
		}
		n := &atomic.Int64{}
		counts[kind] = n
		wwg.Add(1)
		go func() {
			defer wwg.Done()
			defer w.Stop()
			for {
				select {
				case <-watchCtx.Done():
					return
				case ev, ok := <-w.ResultChan():
					if !ok {
						return
					}
					if ev.Type == watch.Modified || ev.Type == watch.Added || ev.Type == watch.Deleted {
						n.Add(1)
					}
				}
			}
		}()
	}
	writesBefore := map[string]uint64{}
	for name, fb := range brokers {
		writesBefore[name] = fb.reports.Writes()
	}
	start := time.Now()
	wwg.Wait()
	elapsed := time.Since(start)
	var total int64
	for kind, n := range counts {
		t.Logf("%-12s %5d writes", kind, n.Load())
		total += n.Load()
	}
	var reportWrites uint64
	for name, fb := range brokers {
		reportWrites += fb.reports.Writes() - writesBefore[name]
	}
	rate := float64(total) / elapsed.Seconds()
	t.Logf("steady state, %d shards on 5 brokers, %s: %d writes = %.2f writes/s (report writes counted by the brokers: %d; Set calls so far: %d)",
		shards, elapsed.Round(time.Millisecond), total, rate, reportWrites, sets.Load())
	if rate >= 10 {
		t.Fatalf("steady-state write rate %.2f/s; want under 10/s", rate)
	}
	if counts["Lease"].Load() == 0 {
		t.Fatal("no heartbeat renewal counted: the measurement is broken")
	}
}

func listRV(l client.ObjectList) string { return l.GetResourceVersion() }

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return n
}
