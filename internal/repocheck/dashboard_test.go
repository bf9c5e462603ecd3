package repocheck

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The chart's Grafana dashboard and the template that ships it.
const (
	dashboardFile     = "charts/felix/files/dashboards/felix.json"
	dashboardTemplate = "charts/felix/templates/grafana-dashboard.yaml"
)

// scrapeLabels are the labels Prometheus adds to every series of a pod the
// chart's PodMonitors scrape (the Prometheus Operator's target labels).
var scrapeLabels = []string{"namespace", "pod", "container", "endpoint", "job", "instance"}

// TestGrafanaDashboard: the chart's dashboard is valid JSON whose panels
// have unique ids and query the ${datasource} variable (never a fixed
// data source), and whose expressions, panel targets and variable queries
// alike, name only felix_* metrics the code registers, with only labels
// those metrics have (dashboardExprProblems says how far that goes).
func TestGrafanaDashboard(t *testing.T) {
	dir := root(t)
	data, err := os.ReadFile(filepath.Join(dir, dashboardFile))
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := os.ReadFile(filepath.Join(dir, dashboardTemplate))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(tmpl), strings.TrimPrefix(dashboardFile, "charts/felix/")) {
		t.Errorf("%s does not ship %s", dashboardTemplate, dashboardFile)
	}
	for _, p := range dashboardProblems(t, data, registeredMetrics(t)) {
		t.Errorf("%s: %s", dashboardFile, p)
	}
}

// dashboard is the part of a Grafana dashboard the checks read.
type dashboard struct {
	UID           string           `json:"uid"`
	SchemaVersion int              `json:"schemaVersion"`
	Panels        []dashboardPanel `json:"panels"`
	Templating    struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Datasource json.RawMessage `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
}

type dashboardPanel struct {
	ID         int              `json:"id"`
	Type       string           `json:"type"`
	Title      string           `json:"title"`
	Datasource json.RawMessage  `json:"datasource"`
	Panels     []dashboardPanel `json:"panels"` // a collapsed row's
	Targets    []struct {
		Expr       string          `json:"expr"`
		Datasource json.RawMessage `json:"datasource"`
	} `json:"targets"`
}

// datasourceVar is the only data source a panel, target or query variable
// may name: the dashboard's datasource variable.
const datasourceVar = "${datasource}"

var labelValues = regexp.MustCompile(`^\s*label_values\((.*),\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)\s*$`)

// dashboardProblems returns what is wrong with the dashboard JSON data.
func dashboardProblems(t *testing.T, data []byte, registered descNames) []string {
	t.Helper()
	var problems []string
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		return []string{"not valid JSON: " + err.Error()}
	}
	if d.UID == "" {
		problems = append(problems, "no uid: every import would make another copy")
	}
	if d.SchemaVersion < 36 {
		problems = append(problems, fmt.Sprintf("schemaVersion %d: want 36 or later (data sources as {type, uid} objects)", d.SchemaVersion))
	}
	// Every datasource object anywhere, but Grafana's built-in one of the
	// annotations, is the variable.
	var whole any
	_ = json.Unmarshal(data, &whole)
	walkDatasources(whole, "", func(path string, ds any) {
		m, ok := ds.(map[string]any)
		if ok && m["type"] == "grafana" {
			return
		}
		if !ok || m["uid"] != datasourceVar {
			problems = append(problems, fmt.Sprintf("%s: datasource %v, want {type: prometheus, uid: %s}", path, ds, datasourceVar))
		}
	})
	hasVar := false
	exprs := map[string]string{} // expression -> where
	for i, v := range d.Templating.List {
		switch {
		case v.Name == "datasource":
			hasVar = v.Type == "datasource" && string(v.Query) == `"prometheus"`
		case v.Type == "query":
			var q string
			if err := json.Unmarshal(v.Query, &q); err != nil {
				var o struct{ Query string }
				_ = json.Unmarshal(v.Query, &o)
				q = o.Query
			}
			where := fmt.Sprintf("variable %q", v.Name)
			if m := labelValues.FindStringSubmatch(q); m != nil {
				exprs[m[1]] = where
				exprs[fmt.Sprintf("sum by (%s) (%s)", m[2], m[1])] = where // the label it lists
			} else {
				exprs[q] = where
			}
			if len(v.Datasource) == 0 {
				problems = append(problems, fmt.Sprintf("templating.list[%d] (%s) has no datasource", i, v.Name))
			}
		}
	}
	if !hasVar {
		problems = append(problems, `no variable "datasource" of type datasource for prometheus`)
	}
	ids := map[int]string{}
	var visit func(ps []dashboardPanel)
	visit = func(ps []dashboardPanel) {
		for _, p := range ps {
			where := fmt.Sprintf("panel %d %q", p.ID, p.Title)
			if prev, dup := ids[p.ID]; dup {
				problems = append(problems, fmt.Sprintf("%s: id also used by %s", where, prev))
			}
			ids[p.ID] = where
			if p.Type == "row" {
				visit(p.Panels)
				continue
			}
			if len(p.Datasource) == 0 {
				problems = append(problems, where+": no datasource (it would query the default one)")
			}
			if len(p.Targets) == 0 {
				problems = append(problems, where+": no targets")
			}
			for _, tg := range p.Targets {
				if strings.TrimSpace(tg.Expr) == "" {
					problems = append(problems, where+": a target without expr")
					continue
				}
				exprs[tg.Expr] = where
			}
		}
	}
	visit(d.Panels)
	felix := 0
	for expr, where := range exprs {
		n, ps := dashboardExprProblems(expr, registered)
		felix += n
		for _, p := range ps {
			problems = append(problems, fmt.Sprintf("%s: %s in %s", where, p, expr))
		}
	}
	if felix == 0 {
		problems = append(problems, "no felix_* metric in any expression")
	}
	slices.Sort(problems)
	return problems
}

// walkDatasources calls f with every "datasource" value in v.
func walkDatasources(v any, path string, f func(path string, ds any)) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if k == "datasource" {
				f(path+"."+k, e)
				continue
			}
			walkDatasources(e, path+"."+k, f)
		}
	case []any:
		for i, e := range x {
			walkDatasources(e, fmt.Sprintf("%s[%d]", path, i), f)
		}
	}
}

var (
	promString   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	promRange    = regexp.MustCompile(`\[[^\]]*\]`)
	promSelector = regexp.MustCompile(`\b([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\{[^}]*\})?`)
	promMatcher  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)\s*""`)
	promGrouping = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
	promKeywords = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
		"and": true, "or": true, "unless": true, "offset": true, "bool": true}
)

// dashboardExprProblems checks one PromQL expression: every felix_*
// metric it selects is registered, every label a matcher of a felix_*
// selector names is one of that metric's labels (or a scrape label; le
// on a _bucket series), and every label of a by (...) grouping is such a
// label of each felix_* metric in the aggregated expression. It does not
// follow labels through nested aggregations or label_replace, and refuses
// on/ignoring/group_*, which it does not understand. It returns the
// number of felix_* selectors it saw.
func dashboardExprProblems(expr string, registered descNames) (int, []string) {
	var problems []string
	e := promString.ReplaceAllString(expr, `""`)
	e = promRange.ReplaceAllString(e, "[]") // [5m], [$__rate_interval]
	labelsOf := func(name string) ([]string, bool) {
		if !registered.has(name) {
			return nil, false
		}
		ls := append(slices.Clone(scrapeLabels), "__name__")
		if l, ok := registered[name]; ok {
			ls = append(ls, l...)
		} else {
			ls = append(ls, registered[histogramBase(name)]...)
			if strings.HasSuffix(name, "_bucket") {
				ls = append(ls, "le")
			}
		}
		return ls, true
	}
	felixIn := func(s string) []string {
		var names []string
		for _, m := range promSelector.FindAllStringSubmatch(s, -1) {
			if strings.HasPrefix(m[1], "felix_") {
				names = append(names, m[1])
			}
		}
		return names
	}
	n := 0
	for _, m := range promSelector.FindAllStringSubmatchIndex(e, -1) {
		name := e[m[2]:m[3]]
		if !strings.HasPrefix(name, "felix_") || promKeywords[name] {
			continue
		}
		if m[1] < len(e) && e[m[1]] == '(' && m[4] < 0 { // a function, not a metric
			continue
		}
		n++
		labels, ok := labelsOf(name)
		if !ok {
			problems = append(problems, fmt.Sprintf("%s is not a metric the broker or operator registers", name))
			continue
		}
		if m[4] >= 0 {
			for _, l := range promMatcher.FindAllStringSubmatch(e[m[4]:m[5]], -1) {
				if !slices.Contains(labels, l[1]) {
					problems = append(problems, fmt.Sprintf("%s has no label %q (it has %s)", name, l[1], strings.Join(labels, ", ")))
				}
			}
		}
	}
	for _, g := range promGrouping.FindAllStringSubmatchIndex(e, -1) {
		kw := e[g[2]:g[3]]
		if kw != "by" && kw != "without" {
			problems = append(problems, fmt.Sprintf("%s (...): a vector match this check does not follow; extend dashboardExprProblems", kw))
			continue
		}
		if kw == "without" {
			continue // dropping a label that is not there is harmless
		}
		scope := ""
		if rest := strings.TrimLeft(e[g[1]:], " "); strings.HasPrefix(rest, "(") { // sum by (x) (expr)
			start := len(e) - len(rest)
			scope = e[start : start+balanced(rest)]
		} else if before := strings.TrimRight(e[:g[0]], " "); strings.HasSuffix(before, ")") { // sum (expr) by (x)
			scope = before[len(before)-balancedBack(before):]
		}
		if scope == "" {
			problems = append(problems, "by (...) without an expression this check can find")
			continue
		}
		for _, name := range felixIn(scope) {
			labels, ok := labelsOf(name)
			if !ok {
				continue // reported above
			}
			for _, l := range strings.Split(e[g[4]:g[5]], ",") {
				if l = strings.TrimSpace(l); l != "" && !slices.Contains(labels, l) {
					problems = append(problems, fmt.Sprintf("by (%s): %s has no label %q", e[g[4]:g[5]], name, l))
				}
			}
		}
	}
	return n, problems
}

// balanced returns the length of the parenthesised expression s starts
// with (s[0] is '('), or len(s) if it is not closed.
func balanced(s string) int {
	depth := 0
	for i, c := range s {
		switch c {
		case '(':
			depth++
		case ')':
			if depth--; depth == 0 {
				return i + 1
			}
		}
	}
	return len(s)
}

// balancedBack returns the length of the parenthesised expression s ends
// with (s ends with ')'), or len(s) if it is not opened.
func balancedBack(s string) int {
	depth := 0
	for i := len(s) - 1; i >= 0; i-- {
		switch s[i] {
		case ')':
			depth++
		case '(':
			if depth--; depth == 0 {
				return len(s) - i
			}
		}
	}
	return len(s)
}

// TestDashboardChecksFail: the dashboard checks catch what they are for,
// on dashboards made wrong on purpose.
func TestDashboardChecksFail(t *testing.T) {
	registered := registeredMetrics(t)
	good := `{"uid": "x", "schemaVersion": 39,
	  "templating": {"list": [{"name": "datasource", "type": "datasource", "query": "prometheus"},
	    {"name": "stream", "type": "query", "datasource": {"type": "prometheus", "uid": "${datasource}"}, "query": "label_values(felix_shard_tail, stream)"}]},
	  "panels": [{"id": 1, "type": "row", "title": "r", "panels": []},
	    {"id": 2, "type": "timeseries", "title": "p", "datasource": {"type": "prometheus", "uid": "${datasource}"},
	     "targets": [{"datasource": {"type": "prometheus", "uid": "${datasource}"},
	       "expr": "histogram_quantile(0.99, sum by (le, pod) (rate(felix_broker_request_latency_seconds_bucket{op=\"append\", pod=~\"$cluster-[0-9]+\"}[$__rate_interval])))"}]}]}`
	if ps := dashboardProblems(t, []byte(good), registered); len(ps) > 0 {
		t.Fatalf("a good dashboard: %v", ps)
	}
	for _, c := range []struct{ old, new, want string }{
		{`"schemaVersion": 39`, `"schemaVersion": 39,`, "not valid JSON"},
		{`"id": 2`, `"id": 1`, "id also used by"},
		{`"uid": "${datasource}"}, "query"`, `"uid": "P1809F7CD0C75ACF3"}, "query"`, "datasource map[type:prometheus uid:P1809F7CD0C75ACF3]"},
		{`"title": "p", "datasource": {"type": "prometheus", "uid": "${datasource}"},`, `"title": "p",`, "no datasource"},
		{`felix_broker_request_latency_seconds_bucket`, `felix_broker_request_latency_seconds_bogus`, "felix_broker_request_latency_seconds_bogus is not a metric"},
		{`op=\"append\"`, `opp=\"append\"`, `has no label "opp"`},
		{`sum by (le, pod)`, `sum by (le, stream)`, `has no label "stream"`},
		{`sum by (le, pod) (rate(felix_broker_request_latency_seconds_bucket{op=\"append\", pod=~\"$cluster-[0-9]+\"}[$__rate_interval]))`,
			`sum by (le) (rate(felix_broker_request_latency_seconds_bucket[5m]) * on (pod) group_left felix_build_info)`, "does not follow"},
		{`felix_shard_tail, stream`, `felix_shard_tail, follower`, `felix_shard_tail has no label "follower"`},
		{`felix_shard_tail, stream`, `felix_shard_tails, stream`, "felix_shard_tails is not a metric"},
		{`"name": "datasource", "type": "datasource"`, `"name": "ds", "type": "datasource"`, `no variable "datasource"`},
	} {
		bad := strings.Replace(good, c.old, c.new, 1)
		if bad == good {
			t.Fatalf("case %q: the edit changed nothing", c.want)
		}
		ps := dashboardProblems(t, []byte(bad), registered)
		if !slices.ContainsFunc(ps, func(p string) bool { return strings.Contains(p, c.want) }) {
			t.Errorf("after %q -> %q: want a problem with %q, got %q", c.old, c.new, c.want, ps)
		}
	}
}

// TestDashboardLabelsKnown: the label check knows the labels of the
// metrics the dashboard leans on (so it does not pass for want of any).
func TestDashboardLabelsKnown(t *testing.T) {
	registered := registeredMetrics(t)
	for name, want := range map[string][]string{
		"felix_shard_follower_lag_records":     {"stream", "shard", "follower"},
		"felix_operator_shards_waiting":        {"namespace", "cluster", "reason"},
		"felix_broker_request_latency_seconds": {"op"},
		"felix_broker_storage_free_bytes":      {},
	} {
		got := registered[name]
		if got == nil || !slices.Equal(got, want) {
			t.Errorf("%s: labels %q, want %q", name, got, want)
		}
	}
}
