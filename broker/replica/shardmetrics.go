package replica

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"felix.dev/felix/broker/record"
	"felix.dev/felix/broker/replication"
)

// The per-shard metric names (ShardCollector).
const (
	MetricShardTail        = "felix_shard_tail"
	MetricShardCommitted   = "felix_shard_committed"
	MetricShardFloor       = "felix_shard_floor"
	MetricShardLeader      = "felix_shard_leader"
	MetricShardFollowerLag = "felix_shard_follower_lag_records"
	shardLabelStream       = "stream"
	shardLabelShard        = "shard"
	shardLabelFollower     = "follower"
)

var (
	descShardTail = prometheus.NewDesc(MetricShardTail,
		"Next offset of the shard's data log on this broker (its tail).", []string{shardLabelStream, shardLabelShard}, nil)
	descShardCommitted = prometheus.NewDesc(MetricShardCommitted,
		"Committed position of the shard's data log on this broker, as readers see it (a Leader-mode stream's leader: its durable tail).",
		[]string{shardLabelStream, shardLabelShard}, nil)
	descShardFloor = prometheus.NewDesc(MetricShardFloor,
		"Floor of the shard's data log on this broker: records below it are trimmed.", []string{shardLabelStream, shardLabelShard}, nil)
	descShardLeader = prometheus.NewDesc(MetricShardLeader,
		"1 while this broker's replica of the shard is its leader, else 0.", []string{shardLabelStream, shardLabelShard}, nil)
	descShardFollowerLag = prometheus.NewDesc(MetricShardFollowerLag,
		"On the shard's leader: data records between the committed position of its last replication report and the position the follower last confirmed holding.",
		[]string{shardLabelStream, shardLabelShard, shardLabelFollower}, nil)
)

// ShardCollector reports the shards a broker holds, read at scrape time:
// no goroutine and no series of its own, so a removed shard's series
// disappear with it. It reads each replica's published status and last
// report (atomic loads) and its data log's positions (the log's own short
// lock, as a client's describe); the shard goroutines never wait for it.
type ShardCollector struct{ m *Manager }

// NewShardCollector returns the collector of m's shards. Register it on
// the broker's registry; a nil m collects nothing.
func NewShardCollector(m *Manager) *ShardCollector { return &ShardCollector{m: m} }

// Describe implements prometheus.Collector.
func (c *ShardCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descShardTail, descShardCommitted, descShardFloor, descShardLeader, descShardFollowerLag} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *ShardCollector) Collect(ch chan<- prometheus.Metric) {
	if c.m == nil {
		return
	}
	c.m.mu.Lock()
	shards := make([]*shard, 0, len(c.m.shards))
	for _, s := range c.m.shards {
		shards = append(shards, s)
	}
	c.m.mu.Unlock()
	for _, s := range shards {
		s.collect(ch)
	}
}

func (s *shard) collect(ch chan<- prometheus.Metric) {
	stream, index := s.id.Stream, strconv.FormatUint(uint64(s.id.Shard), 10)
	info := (&dataLog{s: s, log: s.logs[record.LogData], kind: record.LogData}).Describe()
	gauge := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), append([]string{stream, index}, labels...)...)
	}
	gauge(descShardTail, info.Tail)
	gauge(descShardCommitted, info.Committed)
	gauge(descShardFloor, info.Floor)
	st := s.status.Load()
	leads := st.Role == replication.RoleLeader
	var leader uint64
	if leads {
		leader = 1
	}
	gauge(descShardLeader, leader)
	if !leads {
		return
	}
	rep := s.report.Load()
	if rep == nil || rep.Epoch != st.Epoch {
		return // no report of this term yet
	}
	pos := rep.Position[record.LogData]
	for _, f := range rep.Followers {
		var lag uint64
		if c := f.Confirmed[record.LogData]; c < pos {
			lag = pos - c
		}
		gauge(descShardFollowerLag, lag, string(f.Node))
	}
}
