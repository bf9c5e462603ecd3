package version

import (
	"runtime"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestBuildInfoCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewBuildInfoCollector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) != 1 || mfs[0].GetName() != BuildInfoName || len(mfs[0].GetMetric()) != 1 {
		t.Fatalf("gathered %v; want one %s", mfs, BuildInfoName)
	}
	m := mfs[0].GetMetric()[0]
	if v := m.GetGauge().GetValue(); v != 1 {
		t.Errorf("%s = %v; want 1", BuildInfoName, v)
	}
	commit := Commit
	if commit == "" {
		commit = "unknown"
	}
	want := map[string]string{"version": Version, "commit": commit, "goversion": runtime.Version()}
	got := map[string]string{}
	for _, l := range m.GetLabel() {
		got[l.GetName()] = l.GetValue()
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("label %s = %q; want %q (labels %v)", k, got[k], v, got)
		}
	}
}
