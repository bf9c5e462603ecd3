package version

import (
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
)

// BuildInfoName is the name of the build identity metric.
const BuildInfoName = "felix_build_info"

// NewBuildInfoCollector returns felix_build_info{version,commit,goversion},
// always 1: the binary's Version, Commit ("unknown" when empty) and the Go
// release it was built with. The broker registers it on its own registry,
// the operator on controller-runtime's.
func NewBuildInfoCollector() prometheus.Collector {
	commit := Commit
	if commit == "" {
		commit = "unknown"
	}
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: BuildInfoName,
		Help: "Build identity of the felix binary (always 1): version, source commit, Go version.",
		ConstLabels: prometheus.Labels{
			"version":   Version,
			"commit":    commit,
			"goversion": runtime.Version(),
		},
	}, func() float64 { return 1 })
}
