package server

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"felix.dev/felix/broker/logstore"
	"felix.dev/felix/broker/record"
)

// Metrics holds the broker's Prometheus collectors. It implements
// logstore.Metrics, so one value serves the store and the server. Register
// it on a registry the caller owns (never the global one). A nil *Metrics
// records nothing.
type Metrics struct {
	appends          prometheus.Counter
	appendRecords    prometheus.Counter
	appendBytes      prometheus.Counter
	appendLatency    prometheus.Histogram
	syncFanIn        prometheus.Histogram
	syncLatency      prometheus.Histogram
	deletedRecords   prometheus.Counter
	deletedBytes     prometheus.Counter
	requests         *prometheus.CounterVec
	requestLatency   *prometheus.HistogramVec
	okRequests       map[string]prometheus.Counter  // requests{op, "ok"}, resolved once
	opLatency        map[string]prometheus.Observer // requestLatency{op}, resolved once
	connections      prometheus.Gauge
	accepted         prometheus.Counter
	dropped          *prometheus.CounterVec
	frameMemory      prometheus.Gauge
	framesIncomplete prometheus.Gauge
	frameRefused     prometheus.Counter
	peerDropped      prometheus.Counter
	shardsRefused    prometheus.Counter
	storageFull      prometheus.Gauge
	storageFree      prometheus.Gauge
	fullRefusals     prometheus.Counter
	replRefused      *prometheus.CounterVec // {reason}
	reqRefused       *prometheus.CounterVec // {reason}
	groupLags        *prometheus.GaugeVec   // {stream, shard, group}
	deadLetters      *prometheus.CounterVec // {stream, shard, group}
}

// Reasons of felix_broker_replication_frames_refused_total.
const (
	// RefusedClientPort: a replication frame arrived on the client port.
	RefusedClientPort = "client_port"
	// RefusedNotBroker: a connection to the peer port authenticated as
	// something other than a broker (counted once, at its Hello).
	RefusedNotBroker = "not_broker"
	// RefusedSenderMismatch: a frame on a peer connection names a sender
	// other than the broker the connection authenticated as (counted by
	// the replication handler through PeerConn.Refused).
	RefusedSenderMismatch = "sender_mismatch"
)

// Reasons of felix_broker_requests_refused_total.
const (
	// RefusedNotAuthorized: the Authorizer refused the request.
	RefusedNotAuthorized = "not_authorized"
	// RefusedPeerPort: a client request arrived on the peer port.
	RefusedPeerPort = "peer_port"
)

var (
	_ logstore.Metrics      = (*Metrics)(nil)
	_ logstore.SpaceMetrics = (*Metrics)(nil)
)

// latencyBuckets span 50µs to about 3s.
var latencyBuckets = prometheus.ExponentialBuckets(50e-6, 2, 17)

// NewMetrics creates the collectors and registers them on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		appends: prometheus.NewCounter(prometheus.CounterOpts{Name: "felix_broker_appends_total",
			Help: "Store appends acknowledged (an append is one batch; trims included)."}),
		appendRecords: prometheus.NewCounter(prometheus.CounterOpts{Name: "felix_broker_append_records_total",
			Help: "Records in acknowledged store appends."}),
		appendBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "felix_broker_append_bytes_total",
			Help: "Encoded bytes of acknowledged store appends."}),
		appendLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "felix_broker_append_latency_seconds",
			Help: "Time from store submission to acknowledgement of an append.", Buckets: latencyBuckets}),
		syncFanIn: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "felix_broker_sync_fan_in",
			Help: "Appends acknowledged by one shared sync (on-commit group commit).", Buckets: prometheus.ExponentialBuckets(1, 2, 12)}),
		syncLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "felix_broker_sync_duration_seconds",
			Help: "Duration of one storage sync (under on-commit, the commit log's write and sync).", Buckets: latencyBuckets}),
		deletedRecords: prometheus.NewCounter(prometheus.CounterOpts{Name: "felix_broker_deleted_records_total",
			Help: "Records removed by whole-segment deletion."}),
		deletedBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "felix_broker_deleted_bytes_total",
			Help: "Stored bytes removed by whole-segment deletion."}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "felix_broker_requests_total",
			Help: "Protocol requests answered, by operation and result (ok or the error code's name)."}, []string{"op", "result"}),
		requestLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "felix_broker_request_latency_seconds",
			Help: "Time from a request's arrival to its answer being queued, by operation.", Buckets: latencyBuckets}, []string{"op"}),
		connections: prometheus.NewGauge(prometheus.GaugeOpts{Name: "felix_broker_connections",
			Help: "Open protocol connections."}),
		accepted: prometheus.NewCounter(prometheus.CounterOpts{Name: "felix_broker_connections_accepted_total",
			Help: "Protocol connections accepted."}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "felix_broker_connections_dropped_total",
			Help: "Connections the broker closed or refused for a protocol violation, a deadline or a connection limit, by reason."}, []string{"reason"}),
		frameMemory: prometheus.NewGauge(prometheus.GaugeOpts{Name: "felix_broker_frame_memory_bytes",
			Help: "Bytes of frames held against the frame memory budgets (--max-frame-memory, the small-frame pool, the replication pool) and not yet answered."}),
		framesIncomplete: prometheus.NewGauge(prometheus.GaugeOpts{Name: "felix_broker_frames_in_progress",
			Help: "Frames whose prefix was read and whose body is still arriving."}),
		frameRefused: prometheus.NewCounter(prometheus.CounterOpts{Name: "felix_broker_frame_memory_refusals_total",
			Help: "Frames refused because the frame memory budget stayed full for --frame-memory-wait."}),
		peerDropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "felix_broker_peer_sends_dropped_total",
			Help: "Replication frames dropped because a peer connection's send queue was full (the peer reads too slowly)."}),
		groupLags: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "felix_broker_group_lag_records",
			Help: "Records of a shard's data log above a consumer group's committed offset, as the shard's leader saw them at the group's last request"},
			[]string{"stream", "shard", "group"}),
		deadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "felix_broker_group_dead_lettered_total",
			Help: "Records a consumer group gave up on (delivered its maximum number of times) and the shard's leader appended to the dead-letter log"},
			[]string{"stream", "shard", "group"}),
		shardsRefused: prometheus.NewCounter(prometheus.CounterOpts{Name: "felix_broker_shard_creations_refused_total",
			Help: "Appends refused because creating their shard would exceed --max-shards (standalone)."}),
		storageFull: prometheus.NewGauge(prometheus.GaugeOpts{Name: "felix_broker_storage_full",
			Help: "1 while the log store refuses appends for want of space (below --min-free-bytes, or after ENOSPC), else 0."}),
		storageFree: prometheus.NewGauge(prometheus.GaugeOpts{Name: "felix_broker_storage_free_bytes",
			Help: "Free bytes of the file system holding the log store, as last measured."}),
		fullRefusals: prometheus.NewCounter(prometheus.CounterOpts{Name: "felix_broker_storage_full_refusals_total",
			Help: "Store writes refused with StorageFull."}),
		replRefused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "felix_broker_replication_frames_refused_total",
			Help: "Replication frames (or peer connections) refused: on the client port, from a principal that is not a broker, or naming a sender other than the authenticated broker."}, []string{"reason"}),
		reqRefused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "felix_broker_requests_refused_total",
			Help: "Client requests refused before any work: not authorized for the principal, or sent to the peer port."}, []string{"reason"}),
	}
	for _, r := range []string{RefusedClientPort, RefusedNotBroker, RefusedSenderMismatch} {
		m.replRefused.WithLabelValues(r)
	}
	for _, r := range []string{RefusedNotAuthorized, RefusedPeerPort} {
		m.reqRefused.WithLabelValues(r)
	}
	m.okRequests, m.opLatency = map[string]prometheus.Counter{}, map[string]prometheus.Observer{}
	for _, op := range []string{"append", "read", "trim", "describe", "metadata", "counter_add", "counter_get", "counter_snapshot",
		"group_claim", "group_heartbeat", "group_commit", "group_leave", "group_describe",
		"group_ack_config", "group_fetch", "group_ack", "group_nak", "dead_letter_read", "dead_letter_redrive", "dead_letter_trim"} {
		m.okRequests[op] = m.requests.WithLabelValues(op, "ok")
		m.opLatency[op] = m.requestLatency.WithLabelValues(op)
	}
	for _, c := range []prometheus.Collector{m.appends, m.appendRecords, m.appendBytes, m.appendLatency, m.syncFanIn,
		m.syncLatency, m.deletedRecords, m.deletedBytes, m.requests, m.requestLatency, m.connections, m.accepted, m.dropped,
		m.frameMemory, m.framesIncomplete, m.frameRefused, m.peerDropped, m.shardsRefused,
		m.storageFull, m.storageFree, m.fullRefusals, m.replRefused, m.reqRefused, m.groupLags, m.deadLetters} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// ObserveAppend implements logstore.Metrics.
func (m *Metrics) ObserveAppend(records, bytes int, d time.Duration) {
	if m == nil {
		return
	}
	m.appends.Inc()
	m.appendRecords.Add(float64(records))
	m.appendBytes.Add(float64(bytes))
	m.appendLatency.Observe(d.Seconds())
}

// ObserveSyncFanIn implements logstore.Metrics.
func (m *Metrics) ObserveSyncFanIn(n int) {
	if m == nil {
		return
	}
	m.syncFanIn.Observe(float64(n))
}

// ObserveSync implements logstore.Metrics.
func (m *Metrics) ObserveSync(d time.Duration) {
	if m == nil {
		return
	}
	m.syncLatency.Observe(d.Seconds())
}

// ObserveDelete implements logstore.Metrics.
func (m *Metrics) ObserveDelete(records int, bytes int64) {
	if m == nil {
		return
	}
	m.deletedRecords.Add(float64(records))
	m.deletedBytes.Add(float64(bytes))
}

func (m *Metrics) request(op, result string, d time.Duration) {
	if m == nil {
		return
	}
	if c, ok := m.okRequests[op]; ok && result == "ok" {
		c.Inc()
	} else {
		m.requests.WithLabelValues(op, result).Inc()
	}
	if o, ok := m.opLatency[op]; ok {
		o.Observe(d.Seconds())
	} else {
		m.requestLatency.WithLabelValues(op).Observe(d.Seconds())
	}
}

func (m *Metrics) connOpened() {
	if m == nil {
		return
	}
	m.accepted.Inc()
	m.connections.Inc()
}

func (m *Metrics) connClosed() {
	if m == nil {
		return
	}
	m.connections.Dec()
}

func (m *Metrics) connDropped(reason string) {
	if m == nil {
		return
	}
	m.dropped.WithLabelValues(reason).Inc()
}

func (m *Metrics) frameMemoryMoved(delta int64) {
	if m == nil {
		return
	}
	m.frameMemory.Add(float64(delta))
}

func (m *Metrics) framesInProgress(delta int) {
	if m == nil {
		return
	}
	m.framesIncomplete.Add(float64(delta))
}

func (m *Metrics) frameMemoryRefused() {
	if m == nil {
		return
	}
	m.frameRefused.Inc()
}

func (m *Metrics) peerSendDropped() {
	if m == nil {
		return
	}
	m.peerDropped.Inc()
}

// groupLag sets the lag of group on shard.
func (m *Metrics) groupLag(shard record.ShardID, group string, lag uint64) {
	if m == nil {
		return
	}
	m.groupLags.WithLabelValues(shard.Stream, strconv.FormatUint(uint64(shard.Shard), 10), group).Set(float64(lag))
}

// deadLettered counts n records group dead-lettered on shard.
func (m *Metrics) deadLettered(shard record.ShardID, group string, n int) {
	if m == nil {
		return
	}
	m.deadLetters.WithLabelValues(shard.Stream, strconv.FormatUint(uint64(shard.Shard), 10), group).Add(float64(n))
}

func (m *Metrics) shardRefused() {
	if m == nil {
		return
	}
	m.shardsRefused.Inc()
}

// ObserveSpace implements logstore.SpaceMetrics.
func (m *Metrics) ObserveSpace(full bool, free uint64) {
	if m == nil {
		return
	}
	v := 0.0
	if full {
		v = 1
	}
	m.storageFull.Set(v)
	m.storageFree.Set(float64(free))
}

// ObserveStorageFullRefusal implements logstore.SpaceMetrics.
func (m *Metrics) ObserveStorageFullRefusal() {
	if m == nil {
		return
	}
	m.fullRefusals.Inc()
}

// ReplicationFrameRefused counts a replication frame (or peer connection)
// refused for reason (RefusedClientPort, RefusedNotBroker,
// RefusedSenderMismatch).
func (m *Metrics) ReplicationFrameRefused(reason string) {
	if m == nil {
		return
	}
	m.replRefused.WithLabelValues(reason).Inc()
}

func (m *Metrics) requestRefused(reason string) {
	if m == nil {
		return
	}
	m.reqRefused.WithLabelValues(reason).Inc()
}
