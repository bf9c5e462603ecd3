package controllers

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	felixv1 "felix.dev/felix/api/v1alpha1"
	"felix.dev/felix/internal/version"
)

// The operator's metric names (Metrics).
const (
	MetricShardsWaiting = "felix_operator_shards_waiting"
	MetricPromotions    = "felix_operator_promotions_total"
	MetricBackups       = "felix_operator_backups_total"
)

// shardsWaitingTimeout bounds one scrape's list of FelixShards.
const shardsWaitingTimeout = 5 * time.Second

// Metrics are the operator's own metrics. NewMetrics registers them once,
// on the registry the caller passes (the operator: controller-runtime's
// metrics.Registry, served on its metrics endpoint); Options.Metrics hands
// them to the reconcilers. A nil *Metrics records nothing.
type Metrics struct {
	promotions *prometheus.CounterVec // {namespace, reason}
	backups    *prometheus.CounterVec // {namespace, phase}
}

// NewMetrics creates the operator's metrics and registers them on reg,
// with felix_build_info. shards is what felix_operator_shards_waiting
// counts from at scrape time (the manager's cache: mgr.GetCache()); nil
// leaves that gauge out.
func NewMetrics(reg prometheus.Registerer, shards client.Reader) (*Metrics, error) {
	m := &Metrics{
		promotions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricPromotions,
			Help: "Leaders the shard controller assigned, by placement reason (NewShard, LeaderUnavailable, LeaderDrain, PreferredLeader, ...)."},
			[]string{"namespace", "reason"}),
		backups: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricBackups,
			Help: "FelixBackups that finished, by phase (Completed or Failed)."}, []string{"namespace", "phase"}),
	}
	cs := []prometheus.Collector{m.promotions, m.backups, version.NewBuildInfoCollector()}
	if shards != nil {
		cs = append(cs, &shardsWaiting{shards: shards})
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// promoted counts one leader assignment.
func (m *Metrics) promoted(namespace, reason string) {
	if m == nil {
		return
	}
	m.promotions.WithLabelValues(namespace, reason).Inc()
}

// backupFinished counts a backup that reached phase (Completed, Failed).
func (m *Metrics) backupFinished(namespace string, phase felixv1.BackupPhase) {
	if m == nil {
		return
	}
	m.backups.WithLabelValues(namespace, string(phase)).Inc()
}

var descShardsWaiting = prometheus.NewDesc(MetricShardsWaiting,
	"FelixShards whose Waiting condition is True (no eligible leader), by namespace, cluster and the condition's reason.",
	[]string{"namespace", "cluster", "reason"}, nil)

// shardsWaiting counts the FelixShards waiting for a leader at scrape time,
// from the manager's cache: no state of its own, so a shard that stops
// waiting, or is deleted, leaves the count at once.
type shardsWaiting struct{ shards client.Reader }

func (c *shardsWaiting) Describe(ch chan<- *prometheus.Desc) { ch <- descShardsWaiting }

func (c *shardsWaiting) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), shardsWaitingTimeout)
	defer cancel()
	var list felixv1.FelixShardList
	if err := c.shards.List(ctx, &list); err != nil {
		// Nothing rather than an invalid metric: controller-runtime's
		// endpoint fails the whole scrape on one (HTTPErrorOnError).
		return
	}
	type key struct{ namespace, cluster, reason string }
	counts := map[key]int{}
	for i := range list.Items {
		sh := &list.Items[i]
		w := meta.FindStatusCondition(sh.Status.Conditions, felixv1.ConditionWaiting)
		if w == nil || w.Status != metav1.ConditionTrue {
			continue
		}
		counts[key{sh.Namespace, sh.Labels[LabelCluster], w.Reason}]++
	}
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(descShardsWaiting, prometheus.GaugeValue, float64(n), k.namespace, k.cluster, k.reason)
	}
}
