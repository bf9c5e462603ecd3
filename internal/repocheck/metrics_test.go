package repocheck

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"felix.dev/felix/broker/member"
	"felix.dev/felix/broker/replica"
	"felix.dev/felix/broker/server"
	"felix.dev/felix/controllers"
	"felix.dev/felix/internal/version"
)

// prometheusRuleTemplate is the chart template holding Felix's alerts.
const prometheusRuleTemplate = "charts/felix/templates/monitoring.yaml"

// descNames records the metric names of every collector registered on it,
// each with its label names (variable and constant, from the description).
type descNames map[string][]string

var (
	fqName     = regexp.MustCompile(`fqName: "([^"]+)"`)
	descLabels = regexp.MustCompile(`constLabels: \{([^}]*)\}, variableLabels: \{([^}]*)\}\}$`)
	constLabel = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="`)
)

func (n descNames) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		s := d.String()
		m := fqName.FindStringSubmatch(s)
		if m == nil {
			continue
		}
		labels := []string{}
		if l := descLabels.FindStringSubmatch(s); l != nil {
			for _, c := range constLabel.FindAllStringSubmatch(l[1], -1) {
				labels = append(labels, c[1])
			}
			for v := range strings.SplitSeq(l[2], ",") {
				if v = strings.TrimSuffix(strings.TrimPrefix(v, "c("), ")"); v != "" { // c(x): a constrained label
					labels = append(labels, v)
				}
			}
		}
		n[m[1]] = labels
	}
	return nil
}

// has reports whether name, or the histogram or summary it is a series
// of (_bucket, _sum, _count), is registered.
func (n descNames) has(name string) bool {
	_, ok := n[name]
	_, base := n[histogramBase(name)]
	return ok || base
}

func (n descNames) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = n.Register(c)
	}
}

func (n descNames) Unregister(prometheus.Collector) bool { return false }

// registeredMetrics returns the felix_* names the broker (cluster member
// and standalone) and the operator register, from their constructors.
func registeredMetrics(t *testing.T) descNames {
	t.Helper()
	names := descNames{}
	if _, err := server.NewMetrics(names); err != nil {
		t.Fatal(err)
	}
	if _, err := replica.NewMetrics(names); err != nil {
		t.Fatal(err)
	}
	if _, err := server.NewCorruptLogMetrics(names); err != nil {
		t.Fatal(err)
	}
	if _, err := member.NewTLSMetrics(names, nil); err != nil { // Describe never reads the source
		t.Fatal(err)
	}
	names.MustRegister(replica.NewShardCollector(nil), version.NewBuildInfoCollector())
	// The shards-waiting gauge is registered only with a reader; its
	// Describe never reads it.
	if _, err := controllers.NewMetrics(names, noReader{}); err != nil {
		t.Fatal(err)
	}
	for n := range names {
		if !strings.HasPrefix(n, "felix_") {
			delete(names, n)
		}
	}
	return names
}

// noReader is a client.Reader that is never called.
type noReader struct{ client.Reader }

var (
	helmAction  = regexp.MustCompile(`\{\{.*?\}\}`)
	exprLine    = regexp.MustCompile(`(?m)^\s*expr:\s*(.+)$`)
	felixMetric = regexp.MustCompile(`\bfelix_[a-z0-9_]+`)
)

// TestPrometheusRuleMetricsExist: every felix_* metric an alert of the
// chart's PrometheusRule queries is one the code registers, so a renamed
// metric cannot leave an alert that never fires.
func TestPrometheusRuleMetricsExist(t *testing.T) {
	dir := root(t)
	data, err := os.ReadFile(filepath.Join(dir, prometheusRuleTemplate))
	if err != nil {
		t.Fatal(err)
	}
	registered := registeredMetrics(t)
	exprs := exprLine.FindAllStringSubmatch(string(data), -1)
	if len(exprs) < 5 {
		t.Fatalf("%s: %d expr lines; want the five alerts' at least", prometheusRuleTemplate, len(exprs))
	}
	seen := 0
	for _, e := range exprs {
		expr := helmAction.ReplaceAllString(e[1], "0") // {{ .Values.x }} thresholds
		for _, name := range felixMetric.FindAllString(expr, -1) {
			seen++
			if !registered.has(name) {
				t.Errorf("%s: expr %q queries %s, which no broker or operator code registers", prometheusRuleTemplate, e[1], name)
			}
		}
	}
	if seen == 0 {
		t.Fatalf("%s: no felix_* metric in any expr", prometheusRuleTemplate)
	}
}

// histogramBase strips the series suffixes of a histogram or summary.
func histogramBase(name string) string {
	for _, s := range []string{"_bucket", "_sum", "_count"} {
		if b, ok := strings.CutSuffix(name, s); ok {
			return b
		}
	}
	return name
}

// TestMetricsDocumented: every felix_* metric the code registers has its
// name in docs/metrics.md.
func TestMetricsDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(root(t), "docs/metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	for name := range registeredMetrics(t) {
		if !strings.Contains(string(doc), "`"+name) {
			missing = append(missing, name)
		}
	}
	slices.Sort(missing)
	if len(missing) > 0 {
		t.Errorf("docs/metrics.md does not name: %s", strings.Join(missing, ", "))
	}
}
