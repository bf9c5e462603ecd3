package controllers

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/broker/placement"
	"felix.dev/felix/internal/version"
)

// gathered returns every series of reg as "name{labels}" -> value.
func gathered(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName() + labelString(m.GetLabel())
			switch {
			case m.GetGauge() != nil:
				out[key] = m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				out[key] = m.GetCounter().GetValue()
			}
		}
	}
	return out
}

func labelString(ls []*dto.LabelPair) string {
	s := "{"
	for i, l := range ls {
		if i > 0 {
			s += ","
		}
		s += l.GetName() + "=" + l.GetValue()
	}
	return s + "}"
}

func waitingShard(ns, name, cluster string, status metav1.ConditionStatus, reason string) *felixv1.FelixShard {
	return &felixv1.FelixShard{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{LabelCluster: cluster}},
		Status: felixv1.FelixShardStatus{Conditions: []metav1.Condition{{
			Type: felixv1.ConditionWaiting, Status: status, Reason: reason, Message: "m", LastTransitionTime: metav1.Now(),
		}}},
	}
}

// felix_operator_shards_waiting counts the shards whose Waiting condition
// is True at scrape time; the counters count what the reconcilers report;
// felix_build_info is on the same registry.
func TestMetrics(t *testing.T) {
	objs := []client.Object{
		waitingShard("a", "s-0", "c1", metav1.ConditionTrue, "NoReplicaUp"),
		waitingShard("a", "s-1", "c1", metav1.ConditionTrue, "NoReplicaUp"),
		waitingShard("a", "s-2", "c1", metav1.ConditionTrue, "TooFewCounted"),
		waitingShard("a", "s-3", "c1", metav1.ConditionFalse, "LeaderAssigned"),
		waitingShard("b", "t-0", "c2", metav1.ConditionTrue, "NoReport"),
		// No conditions yet.
		&felixv1.FelixShard{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "t-1"}},
	}
	c := fake.NewClientBuilder().WithScheme(NewScheme()).WithObjects(objs...).WithStatusSubresource(&felixv1.FelixShard{}).Build()
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg, c)
	if err != nil {
		t.Fatal(err)
	}
	sh := &felixv1.FelixShard{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "s-0"}}
	(&FelixShardReconciler{Metrics: m}).emit(sh, placement.Decision{Action: placement.Promote, Reason: placement.ReasonLeaderUnavailable}, shardStatus{})
	(&FelixShardReconciler{Metrics: m}).emit(sh, placement.Decision{Action: placement.Promote, Reason: placement.ReasonLeaderUnavailable}, shardStatus{})
	(&FelixShardReconciler{Metrics: m}).emit(sh, placement.Decision{Action: placement.Wait, Reason: placement.ReasonNoReplicaUp}, shardStatus{})
	m.backupFinished("a", felixv1.BackupFailed)

	got := gathered(t, reg)
	want := map[string]float64{
		"felix_operator_shards_waiting{cluster=c1,namespace=a,reason=NoReplicaUp}":   2,
		"felix_operator_shards_waiting{cluster=c1,namespace=a,reason=TooFewCounted}": 1,
		"felix_operator_shards_waiting{cluster=c2,namespace=b,reason=NoReport}":      1,
		"felix_operator_promotions_total{namespace=a,reason=LeaderUnavailable}":      2,
		"felix_operator_backups_total{namespace=a,phase=Failed}":                     1,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v; want %v", k, got[k], v)
		}
	}
	n := 0
	for k := range got {
		if len(k) > len(version.BuildInfoName) && k[:len(version.BuildInfoName)+1] == version.BuildInfoName+"{" {
			n++
		}
	}
	if n != 1 || len(got) != len(want)+1 {
		t.Errorf("gathered %v; want exactly %v and one %s", got, want, version.BuildInfoName)
	}

	// Nil metrics count nothing and do not panic.
	var none *Metrics
	none.promoted("a", "x")
	none.backupFinished("a", felixv1.BackupCompleted)
}
