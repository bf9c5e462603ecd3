package k8s_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

const (
	operatorNS = "felix-system"
	appNS      = "felix-e2e"
	cluster    = "demo"
)

// TestRealNode installs the operator with helm, runs a three-broker cluster
// in a namespace that enforces the restricted Pod Security Standard, writes
// and reads through the cluster's client Service by its DNS name, and
// evicts brokers through the Eviction API against the cluster's
// PodDisruptionBudget. The steps share one cluster, so they run in order.
func TestRealNode(t *testing.T) {
	e := loadEnv(t)

	step := func(name string, f func(t *testing.T)) {
		if !t.Run(name, f) {
			t.FailNow()
		}
	}

	step("HelmInstall", func(t *testing.T) {
		// helm installs crds/ only on the first install and never
		// upgrades them: apply them first, as docs/install.md says.
		e.kubectl(t, "apply", "--server-side", "-f", "charts/felix/crds/")
		repo, tag, _ := strings.Cut(e.image, ":")
		r := e.exec("", e.helm, "upgrade", "--install", "felix", "charts/felix",
			"--namespace", operatorNS, "--create-namespace",
			"--set", "image.repository="+repo, "--set", "image.tag="+tag, "--set", "image.pullPolicy=Never",
			"--wait", "--timeout", "5m")
		if r.err != nil {
			t.Fatalf("helm install: %v\n%s%s", r.err, r.out, r.errOut)
		}
		e.kubectl(t, "-n", operatorNS, "rollout", "status", "deployment/felix-felix-operator", "--timeout=3m")
	})

	step("RestrictedNamespace", func(t *testing.T) {
		e.kubectl(t, "create", "namespace", appNS)
		e.kubectl(t, "label", "namespace", appNS,
			"pod-security.kubernetes.io/enforce=restricted", "pod-security.kubernetes.io/enforce-version=latest")
		// The label is enforced: a pod that asks for privileges is refused.
		r := e.exec("", e.kubectlBin, "run", "privileged", "-n", appNS, "--image", e.image, "--restart=Never",
			"--overrides", `{"spec":{"containers":[{"name":"privileged","image":"`+e.image+`","securityContext":{"privileged":true}}]}}`)
		if r.err == nil || !strings.Contains(r.errOut, "violates PodSecurity") {
			t.Fatalf("a privileged pod was not refused by the namespace's restricted policy: %v\n%s%s", r.err, r.out, r.errOut)
		}
	})

	step("ClusterReady", func(t *testing.T) {
		storage := ""
		if e.storage != "" {
			storage = "\n    storageClassName: " + e.storage
		}
		e.apply(t, appNS, fmt.Sprintf(`apiVersion: felix.dev/v1alpha1
kind: FelixCluster
metadata:
  name: %[1]s
spec:
  brokers: 3
  image: %[2]s
  storage:
    size: 256Mi%[3]s
  durability:
    fsync: OnCommit
  heartbeatInterval: 1s
  nodeExpiry: 5s
---
apiVersion: felix.dev/v1alpha1
kind: FelixStream
metadata:
  name: events
spec:
  cluster: %[1]s
  shards: 2
  replicas: 3
  ack: Quorum
---
apiVersion: felix.dev/v1alpha1
kind: FelixUser
metadata:
  name: alice
spec:
  cluster: %[1]s
  authorization:
    grants:
    - stream: events
      operations: [Append, Read, Describe]
`, cluster, e.image, storage))
		// Every broker pod Running and Ready, the cluster Ready.
		e.kubectl(t, "-n", appNS, "wait", "felixcluster/"+cluster, "--for=condition=Ready", "--timeout=6m")
		e.kubectl(t, "-n", appNS, "wait", "pod", "-l", brokerSelector(), "--for=condition=Ready", "--timeout=3m")
		if n := len(strings.Fields(e.kubectl(t, "-n", appNS, "get", "pod", "-l", brokerSelector(), "-o", "name"))); n != 3 {
			t.Fatalf("%d broker pods, want 3", n)
		}
		e.kubectl(t, "-n", appNS, "wait", "felixuser/alice", "--for=condition=Ready", "--timeout=2m")
		eventually(t, 3*time.Minute, "every shard of events has a leader", func() error {
			return shardsLed(e, t, "events", 2)
		})
	})

	records := []string{}
	step("ClientsThroughClusterDNS", func(t *testing.T) {
		bootstrap := fmt.Sprintf("%s.%s.svc", cluster, appNS)
		for i := 0; i < 20; i++ {
			records = append(records, fmt.Sprintf("record-%02d", i))
		}
		out, err := e.felixClient(t, appNS, "producer", "alice", strings.Join(records, "\n")+"\n",
			"append", "--bootstrap", bootstrap, "--stream", "events", "--shard", "0")
		if err != nil {
			t.Fatal(err)
		}
		var ack struct{ First, Last, Tail uint64 }
		if err := json.Unmarshal([]byte(lastLine(out)), &ack); err != nil || ack.Last-ack.First+1 != uint64(len(records)) {
			t.Fatalf("append answered %q (%v), want %d records", out, err, len(records))
		}
		got := readAll(t, e, bootstrap, "consumer")
		if strings.Join(got, ",") != strings.Join(records, ",") {
			t.Fatalf("read back %v, want %v", got, records)
		}
	})

	step("EvictionRespectsTheDisruptionBudget", func(t *testing.T) {
		pods := strings.Fields(e.kubectl(t, "-n", appNS, "get", "pod", "-l", brokerSelector(), "-o", "jsonpath={.items[*].metadata.name}"))
		if len(pods) < 2 {
			t.Fatalf("broker pods %v", pods)
		}
		// Wait for the budget to allow one disruption (all brokers Ready).
		eventually(t, 2*time.Minute, "the PodDisruptionBudget allows one disruption", func() error {
			out := e.kubectl(t, "-n", appNS, "get", "pdb", "-l", "app.kubernetes.io/instance="+cluster, "-o", "jsonpath={.items[0].status.disruptionsAllowed}")
			if out != "1" {
				return fmt.Errorf("disruptionsAllowed %q", out)
			}
			return nil
		})
		if err := evict(e, pods[0]); err != nil {
			t.Fatalf("first eviction refused: %v", err)
		}
		// One broker is down: the budget refuses the next one.
		err := evict(e, pods[1])
		if err == nil || !strings.Contains(err.Error(), "disruption budget") {
			t.Fatalf("second eviction while one broker is down: %v, want refused by the disruption budget", err)
		}
		// The operator brings the evicted broker back; every record is still there.
		eventually(t, 4*time.Minute, "the evicted broker is back and Ready", func() error {
			r := e.exec("", e.kubectlBin, "-n", appNS, "wait", "pod", pods[0], "--for=condition=Ready", "--timeout=5s")
			if r.err != nil {
				return fmt.Errorf("%v: %s", r.err, r.errOut)
			}
			return nil
		})
		e.kubectl(t, "-n", appNS, "wait", "felixcluster/"+cluster, "--for=condition=Ready", "--timeout=4m")
		got := readAll(t, e, fmt.Sprintf("%s.%s.svc", cluster, appNS), "consumer-after-eviction")
		if strings.Join(got, ",") != strings.Join(records, ",") {
			t.Fatalf("after the eviction read back %v, want %v", got, records)
		}
	})
}

// brokerSelector selects the suite's broker pods.
func brokerSelector() string {
	return "app.kubernetes.io/instance=" + cluster + ",app.kubernetes.io/component=broker"
}

// shardsLed checks that every shard of stream has a leader in its
// FelixShard status (the control plane's assignment).
func shardsLed(e env, t *testing.T, stream string, shards int) error {
	r := e.exec("", e.kubectlBin, "-n", appNS, "get", "felixshards", "-o", "json")
	if r.err != nil {
		return fmt.Errorf("%v: %s", r.err, r.errOut)
	}
	var list struct {
		Items []struct {
			Spec struct {
				Stream string `json:"stream"`
			} `json:"spec"`
			Status struct {
				Assignment *struct {
					Leader string `json:"leader"`
				} `json:"assignment"`
			} `json:"status"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(r.out), &list); err != nil {
		t.Fatal(err)
	}
	led := 0
	for _, s := range list.Items {
		if s.Spec.Stream == stream && s.Status.Assignment != nil && s.Status.Assignment.Leader != "" {
			led++
		}
	}
	if led != shards {
		return fmt.Errorf("%d of %d shards led", led, shards)
	}
	return nil
}

// readAll reads shard 0 of events from the start to its tail, as alice.
func readAll(t *testing.T, e env, bootstrap, pod string) []string {
	t.Helper()
	out, err := e.felixClient(t, appNS, pod, "alice", "",
		"read", "--bootstrap", bootstrap, "--stream", "events", "--shard", "0", "--from", "earliest", "--output", "json")
	if err != nil {
		t.Fatal(err)
	}
	// By offset: `kubectl run -i` can print a finished pod's output twice
	// (its attach stream, then its logs when the attach breaks); the same
	// offset printed twice must carry the same record, and a record
	// written twice would show at two offsets.
	var got []string
	seen := map[uint64]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var rec struct {
			Offset  uint64 `json:"offset"`
			Payload string `json:"payload"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("read printed %q: %v", line, err)
		}
		if prev, ok := seen[rec.Offset]; ok {
			if prev != rec.Payload {
				t.Fatalf("offset %d printed as %q and as %q", rec.Offset, prev, rec.Payload)
			}
			t.Logf("offset %d printed twice (kubectl's output)", rec.Offset)
			continue
		}
		seen[rec.Offset] = rec.Payload
		got = append(got, rec.Payload)
	}
	return got
}

// evict asks the Eviction API to evict a broker pod.
func evict(e env, pod string) error {
	body := fmt.Sprintf(`{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":%q,"namespace":%q}}`, pod, appNS)
	r := e.exec(body, e.kubectlBin, "create", "--raw", fmt.Sprintf("/api/v1/namespaces/%s/pods/%s/eviction", appNS, pod), "-f", "-")
	if r.err != nil {
		return fmt.Errorf("%v: %s", r.err, r.errOut)
	}
	return nil
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
