package replica

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"felix.dev/felix/broker/logstore"
)

// Deletion reasons, the "reason" label of the maintenance metrics.
const (
	// ReasonFloor is a deletion of whole segments below a log's floor
	// (Log.DeleteBelowFloor, [TR-6]).
	ReasonFloor = "floor"
	// ReasonRetention is a deletion by a log's retention policy
	// (Log.ApplyRetention, [TR-7]).
	ReasonRetention = "retention"
)

// Metrics holds the Prometheus collectors of segment maintenance and log
// policies. Register it on a registry the caller owns (never the global
// one). A nil *Metrics records nothing. The store's own counters
// (felix_broker_deleted_records_total, _bytes_total) count every deletion;
// these add the reason, segments and passes.
type Metrics struct {
	passes      prometheus.Counter
	passSeconds prometheus.Histogram
	segments    *prometheus.CounterVec
	records     *prometheus.CounterVec
	bytes       *prometheus.CounterVec
	lastSegs    prometheus.Gauge
	lastBytes   prometheus.Gauge
	errors      prometheus.Counter
	refused     prometheus.Counter

	shippedBytes   *prometheus.CounterVec // {shard, peer}
	shippedRecords *prometheus.CounterVec // {shard, peer}
	receivedBytes  *prometheus.CounterVec // {shard}
	commitLatency  prometheus.Histogram
}

// NewMetrics creates the collectors and registers them on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		passes: prometheus.NewCounter(prometheus.CounterOpts{Name: "felix_broker_maintenance_passes_total",
			Help: "Segment maintenance passes run (deletion below the floor, then retention, on every log)."}),
		passSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "felix_broker_maintenance_pass_duration_seconds",
			Help: "Duration of one segment maintenance pass.", Buckets: prometheus.ExponentialBuckets(1e-4, 4, 10)}),
		segments: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "felix_broker_maintenance_deleted_segments_total",
			Help: "Whole segments deleted by maintenance, by reason (floor or retention)."}, []string{"reason"}),
		records: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "felix_broker_maintenance_deleted_records_total",
			Help: "Offsets deleted by maintenance, by reason (floor or retention)."}, []string{"reason"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "felix_broker_maintenance_deleted_bytes_total",
			Help: "Stored bytes deleted by maintenance, by reason (floor or retention)."}, []string{"reason"}),
		lastSegs: prometheus.NewGauge(prometheus.GaugeOpts{Name: "felix_broker_maintenance_last_pass_deleted_segments",
			Help: "Whole segments the last maintenance pass deleted."}),
		lastBytes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "felix_broker_maintenance_last_pass_deleted_bytes",
			Help: "Stored bytes the last maintenance pass deleted."}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Name: "felix_broker_maintenance_errors_total",
			Help: "Log maintenance steps that failed (the pass goes on with the other logs)."}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{Name: "felix_broker_retention_refused_total",
			Help: "Retention refused on a fenced stream [TR-7] (policy applications and maintenance steps)."}),
		shippedBytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "felix_replication_shipped_bytes_total",
			Help: "Bytes of Append frames a leader sent to each follower (counted at send, resends included)."}, []string{"shard", "peer"}),
		shippedRecords: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "felix_replication_shipped_records_total",
			Help: "Records in Append frames a leader sent to each follower (counted at send, resends included)."}, []string{"shard", "peer"}),
		receivedBytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "felix_replication_received_bytes_total",
			Help: "Bytes of Append frames a follower received for a shard it holds."}, []string{"shard"}),
		commitLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "felix_replication_commit_latency_seconds",
			Help:    "Time from a proposal reaching its shard on the leader to its acknowledgement under the shard's ack mode (Quorum: durable on a quorum under on-commit).",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 17)}), // 50 µs to about 3 s, as the store's
	}
	for _, r := range []string{ReasonFloor, ReasonRetention} {
		m.segments.WithLabelValues(r)
		m.records.WithLabelValues(r)
		m.bytes.WithLabelValues(r)
	}
	for _, c := range []prometheus.Collector{m.passes, m.passSeconds, m.segments, m.records, m.bytes,
		m.lastSegs, m.lastBytes, m.errors, m.refused, m.shippedBytes, m.shippedRecords, m.receivedBytes, m.commitLatency} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// ObservePass records one maintenance pass.
func (m *Metrics) ObservePass(p PassResult, d time.Duration) {
	if m == nil {
		return
	}
	m.passes.Inc()
	m.passSeconds.Observe(d.Seconds())
	m.observeDelete(ReasonFloor, p.Floor)
	m.observeDelete(ReasonRetention, p.Retention)
	m.lastSegs.Set(float64(p.Floor.Segments + p.Retention.Segments))
	m.lastBytes.Set(float64(p.Floor.Bytes + p.Retention.Bytes))
	m.errors.Add(float64(p.Errors))
	m.refused.Add(float64(p.Refused))
}

func (m *Metrics) observeDelete(reason string, r logstore.DeleteResult) {
	m.segments.WithLabelValues(reason).Add(float64(r.Segments))
	m.records.WithLabelValues(reason).Add(float64(r.Records))
	m.bytes.WithLabelValues(reason).Add(float64(r.Bytes))
}

// retentionRefused counts a policy with retention refused on a fenced
// stream.
func (m *Metrics) retentionRefused() {
	if m == nil {
		return
	}
	m.refused.Inc()
}

// shipCounters are one shard's replication counters, resolved once.
type shipCounters struct {
	bytes, records map[string]prometheus.Counter // by peer
	received       prometheus.Counter
	commit         prometheus.Observer
}

// shardCounters resolves the counters of shard (id) with peers; nil
// Metrics gives counters that record nothing.
func (m *Metrics) shardCounters(shard string, peers []string) shipCounters {
	var c shipCounters
	if m == nil {
		return c
	}
	c.bytes, c.records = map[string]prometheus.Counter{}, map[string]prometheus.Counter{}
	for _, p := range peers {
		c.bytes[p] = m.shippedBytes.WithLabelValues(shard, p)
		c.records[p] = m.shippedRecords.WithLabelValues(shard, p)
	}
	c.received = m.receivedBytes.WithLabelValues(shard)
	c.commit = m.commitLatency
	return c
}

// committed records the time from a proposal's submission to its
// acknowledgement.
func (c shipCounters) committed(d time.Duration) {
	if c.commit != nil {
		c.commit.Observe(d.Seconds())
	}
}

// dropShard forgets a removed shard's replication series.
func (m *Metrics) dropShard(shard string) {
	if m == nil {
		return
	}
	m.shippedBytes.DeletePartialMatch(prometheus.Labels{"shard": shard})
	m.shippedRecords.DeletePartialMatch(prometheus.Labels{"shard": shard})
	m.receivedBytes.DeletePartialMatch(prometheus.Labels{"shard": shard})
}

func (c shipCounters) shipped(peer string, bytes, records int) {
	if b := c.bytes[peer]; b != nil {
		b.Add(float64(bytes))
		c.records[peer].Add(float64(records))
	}
}

func (c shipCounters) receivedFrame(bytes int) {
	if c.received != nil {
		c.received.Add(float64(bytes))
	}
}
