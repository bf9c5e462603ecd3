// Package repocheck holds no code, only tests that hold the repository to
// itself:
//
//   - every rule tag used anywhere (code, messages, docs, charts, config,
//     test names) has an entry in docs/rules.md, and every entry there
//     says why the rule exists, where it is enforced and what checks it;
//   - no file refers to design material outside the repository;
//   - every spec.* or status.* field path the docs name exists in a CRD
//     schema under config/crd/bases (or in the Kubernetes type it belongs
//     to: Pod, PersistentVolumeClaim, Lease, VolumeSnapshot).
//   - every felix_* metric an alert of the chart's PrometheusRule queries
//     is registered by the broker or the operator, and every felix_*
//     metric they register is named in docs/metrics.md (the names come
//     from the metric constructors' descriptions, not from a list);
//   - the chart's Grafana dashboard (charts/felix/files/dashboards) is
//     valid JSON with unique panel ids, queries only its ${datasource}
//     variable, and names only registered felix_* metrics, with only
//     labels those metrics have.
//
// The flags the docs name are checked against the felix command tree in
// cmd/felix (TestDocFlagsExist), where the tree can be built.
//
// The tests read files only: no network, no API server, a second or two.
package repocheck
