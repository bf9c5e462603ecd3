package server

import "github.com/prometheus/client_golang/prometheus"

// CorruptLogMetrics reports logs whose stored data the log store found
// damaged on open (logstore.Store.Damaged; docs/operator.md):
//
//   - felix_broker_corrupt_logs (gauge): logs this broker refuses, with the
//     Corrupt error code, until an operator repairs them (standalone);
//   - felix_broker_corrupt_logs_found_total (counter): damaged logs found on
//     open, in either mode; a cluster member gives up its storage id,
//     empties them and copies them again from its peers.
type CorruptLogMetrics struct {
	refused prometheus.Gauge
	found   prometheus.Counter
}

// NewCorruptLogMetrics registers the metrics with reg.
func NewCorruptLogMetrics(reg prometheus.Registerer) (*CorruptLogMetrics, error) {
	m := &CorruptLogMetrics{
		refused: prometheus.NewGauge(prometheus.GaugeOpts{Name: "felix_broker_corrupt_logs",
			Help: "Logs refused with the Corrupt error because their stored data is damaged."}),
		found: prometheus.NewCounter(prometheus.CounterOpts{Name: "felix_broker_corrupt_logs_found_total",
			Help: "Logs found with damaged stored data when the log store opened."}),
	}
	for _, c := range []prometheus.Collector{m.refused, m.found} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Found counts n damaged logs found on open.
func (m *CorruptLogMetrics) Found(n int) { m.found.Add(float64(n)) }

// SetRefused sets the number of logs refused as damaged.
func (m *CorruptLogMetrics) SetRefused(n int) { m.refused.Set(float64(n)) }
