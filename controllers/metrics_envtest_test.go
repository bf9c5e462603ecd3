package controllers_test

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	felixv1 "felix.dev/felix/api/v1alpha1"
)

// suiteSeries returns the operator's series of metric name in namespace
// ns, each as its labels -> value.
func suiteSeries(t *testing.T, name, ns string) map[string]float64 {
	t.Helper()
	mfs, err := suite.metrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["namespace"] != ns {
				continue
			}
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			out[fmt.Sprint(labels)] = v
		}
	}
	return out
}

// TestOperatorMetrics_PromotionAndWaiting: a new shard's first leader
// counts one NewShard promotion; once its leader stops without a report,
// the shard waits and felix_operator_shards_waiting counts it under its
// cluster.
func TestOperatorMetrics_PromotionAndWaiting(t *testing.T) {
	ns := namespace(t)
	brokers := placed(t, ns, "om", 3, 1, 3)
	// The operator counts a promotion after it wrote it, so the count may
	// trail the assignment placed waited for.
	eventually(t, 5*time.Second, "one NewShard promotion", func() (bool, string) {
		promoted := suiteSeries(t, "felix_operator_promotions_total", ns)
		return promoted[fmt.Sprint(map[string]string{"namespace": ns, "reason": "NewShard"})] == 1, fmt.Sprint(promoted)
	})
	sh := getShard(t, ns, "s-0")
	brokers[sh.Status.Assignment.Leader].stop()
	var reason string
	eventually(t, 15*time.Second, "Waiting", func() (bool, string) {
		c := condition(getShard(t, ns, "s-0").Status.Conditions, felixv1.ConditionWaiting)
		if c == nil || c.Status != metav1.ConditionTrue {
			return false, "not waiting"
		}
		reason = c.Reason
		return true, ""
	})
	want := fmt.Sprint(map[string]string{"namespace": ns, "cluster": "om", "reason": reason})
	eventually(t, 10*time.Second, "shards_waiting", func() (bool, string) {
		got := suiteSeries(t, "felix_operator_shards_waiting", ns)
		return len(got) == 1 && got[want] == 1, fmt.Sprint(got)
	})
}
