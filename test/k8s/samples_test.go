package k8s_test

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// samplesNS is the namespace the repository's sample manifests are applied
// in, as a user would: under the restricted Pod Security Standard.
const samplesNS = "felix-samples"

// applySamples applies config/samples' cluster and streams unchanged with
// kubectl apply -f (the cluster's image, felix:dev, is the suite's image
// under the tag the samples name; its storage is the node's default
// StorageClass), waits for the cluster to be Ready and every shard of
// both streams to be led, reads `kubectl get felixshards` as a user does,
// and deletes the namespace again.
func applySamples(t *testing.T, e env) {
	t.Cleanup(func() {
		e.exec("", e.kubectlBin, "delete", "namespace", samplesNS, "--ignore-not-found", "--wait=true", "--timeout=3m")
	})
	e.kubectl(t, "create", "namespace", samplesNS)
	e.kubectl(t, "label", "namespace", samplesNS,
		"pod-security.kubernetes.io/enforce=restricted", "pod-security.kubernetes.io/enforce-version=latest")
	e.kubectl(t, "apply", "-n", samplesNS,
		"-f", "config/samples/felix_v1alpha1_felixcluster.yaml",
		"-f", "config/samples/felix_v1alpha1_felixstream.yaml")
	e.kubectl(t, "-n", samplesNS, "wait", "felixcluster/demo", "--for=condition=Ready", "--timeout=8m")
	// The samples' streams: events (4 shards) and counter-output (1).
	want := map[string]int{"events": 4, "counter-output": 1}
	var table string
	eventually(t, 3*time.Minute, "every shard of the sample streams is led", func() error {
		table = e.kubectl(t, "-n", samplesNS, "get", "felixshards")
		led := map[string]int{}
		out := e.kubectl(t, "-n", samplesNS, "get", "felixshards", "-o",
			`jsonpath={range .items[*]}{.spec.stream} {.status.assignment.leader}{"\n"}{end}`)
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if f := strings.Fields(line); len(f) == 2 {
				led[f[0]]++
			}
		}
		for s, n := range want {
			if led[s] != n {
				return fmt.Errorf("stream %s: %d of %d shards led\n%s", s, led[s], n, table)
			}
		}
		return nil
	})
	// What a user reads: one row per shard with its leader, under the
	// printer columns the CRD declares.
	rows := strings.Split(strings.TrimSpace(table), "\n")
	if len(rows) != 1+4+1 || !strings.Contains(rows[0], "LEADER") {
		t.Fatalf("kubectl get felixshards printed:\n%s", table)
	}
	t.Logf("kubectl get felixshards -n %s:\n%s", samplesNS, table)
}
