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

// TestRealNode installs the operator with kubectl apply -k and removes it,
// then installs it with helm, runs a three-broker cluster
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

	step("KustomizeInstallAndRemove", func(t *testing.T) { kustomizeInstall(t, e) })

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
		got := readAll(t, e, bootstrap, "consumer", "alice")
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
		oldUID := podUID(t, e, pods[0])
		if err := evict(e, pods[0]); err != nil {
			t.Fatalf("first eviction refused: %v", err)
		}
		// One broker is down: the budget refuses the next one.
		err := evict(e, pods[1])
		if err == nil || !strings.Contains(err.Error(), "disruption budget") {
			t.Fatalf("second eviction while one broker is down: %v, want refused by the disruption budget", err)
		}
		// The operator brings the evicted broker back; every record is still there.
		waitNewPodReady(t, e, pods[0], oldUID)
		e.kubectl(t, "-n", appNS, "wait", "felixcluster/"+cluster, "--for=condition=Ready", "--timeout=4m")
		got := readAll(t, e, fmt.Sprintf("%s.%s.svc", cluster, appNS), "consumer-after-eviction", "alice")
		if strings.Join(got, ",") != strings.Join(records, ",") {
			t.Fatalf("after the eviction read back %v, want %v", got, records)
		}
	})

	step("RollingRestartUnderLoad", func(t *testing.T) { rollUnderLoad(t, e) })

	step("CleanRestartKeepsItsStorageID", func(t *testing.T) {
		// [ID-3]: a broker restarted on its own volume presents the id it
		// had; only its incarnation moves.
		b := cluster + "-2"
		before := registrations(t, e, cluster)[b]
		oldUID := podUID(t, e, b)
		e.kubectl(t, "-n", appNS, "delete", "pod", b, "--wait=false")
		waitNewPodReady(t, e, b, oldUID)
		eventually(t, 2*time.Minute, b+" registered again", func() error {
			now := registrations(t, e, cluster)[b]
			if now.incarnation <= before.incarnation {
				return fmt.Errorf("%s at incarnation %d, before the restart %d", b, now.incarnation, before.incarnation)
			}
			if now.id != before.id {
				t.Fatalf("%s registered storage id %q after a clean restart, had %q", b, now.id, before.id)
			}
			return nil
		})
	})

	step("APIServerUnreachableAtBrokerStart", func(t *testing.T) { apiUnreachableAtStart(t, e, records) })

	step("WipedFollowerNeverPromoted", func(t *testing.T) {
		// A user wipes a follower's disk (deletes its claim and its pod),
		// then the shard's leader is killed right after the wiped broker
		// is back. The wiped broker has a new storage id [ID-1], so the
		// control plane may not count it before it caught up again, and
		// never promotes it on what its old id was counted for [CP-3];
		// every acknowledged record survives on the intact follower.
		e.kubectl(t, "-n", appNS, "wait", "felixcluster/"+cluster, "--for=condition=Ready", "--timeout=4m")
		leader, epoch := shardLeader(t, e, "events-0")
		var wiped string
		for i := 0; i < 3; i++ {
			if b := fmt.Sprintf("%s-%d", cluster, i); b != leader {
				wiped = b
				break
			}
		}
		before := storageIDs(t, e, cluster)
		oldUID := podUID(t, e, wiped)
		e.kubectl(t, "-n", appNS, "delete", "pvc", "data-"+wiped, "--wait=false")
		e.kubectl(t, "-n", appNS, "delete", "pod", wiped, "--wait=false")
		waitNewPodReady(t, e, wiped, oldUID)
		eventually(t, 2*time.Minute, wiped+" registered with a new storage id", func() error {
			if id := storageIDs(t, e, cluster)[wiped]; id == "" || id == before[wiped] {
				return fmt.Errorf("%s presents %q (before the wipe: %q)", wiped, id, before[wiped])
			}
			return nil
		})
		e.kubectl(t, "-n", appNS, "delete", "pod", leader, "--grace-period=0", "--force")
		// The killed leader's pod comes back on its own volume under a new
		// incarnation, so it may lead again once it caught up: what must
		// hold is a new epoch and every acknowledged record.
		eventually(t, 3*time.Minute, "events-0 is led at a new epoch", func() error {
			l, ep := shardLeader(t, e, "events-0")
			if ep <= epoch || l == "" {
				return fmt.Errorf("leader %q at epoch %d (killed: %s at %d)", l, ep, leader, epoch)
			}
			return nil
		})
		got := readAll(t, e, fmt.Sprintf("%s.%s.svc", cluster, appNS), "consumer-after-wipe", "alice")
		if strings.Join(got, ",") != strings.Join(records, ",") {
			t.Fatalf("after the wipe and the leader's death read back %v, want %v", got, records)
		}
		e.kubectl(t, "-n", appNS, "wait", "felixcluster/"+cluster, "--for=condition=Ready", "--timeout=4m")
	})

	step("BackupAndRestoreThroughVolumeSnapshots", func(t *testing.T) {
		if e.storage != csiStorageClass {
			t.Skipf("storage class %q takes no snapshots: deploy the CSI driver (hack/k8s/csi-deploy.sh) for this step", e.storage)
		}
		oldIDs := storageIDs(t, e, cluster)
		e.apply(t, appNS, fmt.Sprintf(`apiVersion: felix.dev/v1alpha1
kind: FelixBackup
metadata:
  name: before-restore
spec:
  cluster: %s
`, cluster))
		e.kubectl(t, "-n", appNS, "wait", "felixbackup/before-restore", "--for=jsonpath={.status.phase}=Completed", "--timeout=4m")
		// Every snapshot is a real one: a VolumeSnapshotContent bound by
		// the snapshot controller, cut by our CSI driver.
		for _, line := range strings.Split(strings.TrimSpace(e.kubectl(t, "-n", appNS, "get", "volumesnapshot", "-o",
			`jsonpath={range .items[*]}{.metadata.name} {.status.readyToUse} {.status.boundVolumeSnapshotContentName}{"\n"}{end}`)), "\n") {
			f := strings.Fields(line)
			if len(f) != 3 || f[1] != "true" || f[2] == "" {
				t.Fatalf("volume snapshot not ready and bound: %q", line)
			}
		}
		// The stream's name is its logs' name on disk: the restored
		// cluster serves it under the same name once the source's is gone.
		e.kubectl(t, "-n", appNS, "delete", "felixstream", "events", "--wait=true", "--timeout=3m")
		// Its shards go with it (the garbage collector, owner references).
		e.kubectl(t, "-n", appNS, "wait", "--for=delete", "felixshard/events-0", "felixshard/events-1", "--timeout=2m")
		e.apply(t, appNS, fmt.Sprintf(`apiVersion: felix.dev/v1alpha1
kind: FelixCluster
metadata:
  name: %[1]s
spec:
  brokers: 3
  image: %[2]s
  storage:
    size: 256Mi
    storageClassName: %[3]s
  durability:
    fsync: OnCommit
  heartbeatInterval: 1s
  nodeExpiry: 5s
  restore:
    backup: before-restore
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
  name: bob
spec:
  cluster: %[1]s
  authorization:
    grants:
    - stream: events
      operations: [Read, Describe]
`, restored, e.image, e.storage))
		e.kubectl(t, "-n", appNS, "wait", "felixcluster/"+restored, "--for=condition=Ready", "--timeout=8m")
		e.kubectl(t, "-n", appNS, "wait", "felixuser/bob", "--for=condition=Ready", "--timeout=2m")
		// Each claim came from its broker's snapshot, through the real
		// external-provisioner, and the restore-point step ran: every
		// restored broker registered a new storage id [ID-5].
		// The operator records done once it has seen the pod's
		// restore-point step complete, which may follow Ready by a pass.
		eventually(t, 2*time.Minute, "every restored claim came from its snapshot and ran restore-point", func() error {
			for i := 0; i < 3; i++ {
				src := e.kubectl(t, "-n", appNS, "get", "pvc", fmt.Sprintf("data-%s-%d", restored, i), "-o",
					`jsonpath={.spec.dataSource.kind}/{.spec.dataSource.name} {.metadata.annotations.felix\.dev/restore-point}`)
				if want := fmt.Sprintf("VolumeSnapshot/before-restore-%s-%d done", cluster, i); src != want {
					return fmt.Errorf("claim data-%s-%d: %q, want %q", restored, i, src, want)
				}
			}
			return nil
		})
		eventually(t, 3*time.Minute, "every restored broker registered a new storage id", func() error {
			ids := storageIDs(t, e, restored)
			if len(ids) != 3 {
				return fmt.Errorf("registered: %v", ids)
			}
			for b, id := range ids {
				for ob, old := range oldIDs {
					if id == old {
						return fmt.Errorf("%s kept %s's storage id %s", b, ob, id)
					}
				}
			}
			return nil
		})
		e.kubectl(t, "-n", appNS, "wait", "felixcluster/"+restored, "--for=condition=Ready", "--timeout=4m")
		// The source's stream is gone: the stream's shards are the
		// restored cluster's.
		eventually(t, 3*time.Minute, "every shard of the restored events has a leader", func() error {
			return shardsLed(e, t, "events", 2)
		})
		// The restored brokers' pods are replaced once restore-point ran
		// (the cluster stays Ready through it on their heartbeats): read
		// once the replacements serve.
		e.kubectl(t, "-n", appNS, "wait", "pod", "-l", "app.kubernetes.io/instance="+restored+",app.kubernetes.io/component=broker",
			"--for=condition=Ready", "--timeout=3m")
		got := readAll(t, e, fmt.Sprintf("%s.%s.svc", restored, appNS), "consumer-restored", "bob")
		if strings.Join(got, ",") != strings.Join(records, ",") {
			t.Fatalf("the restored cluster read back %v, want every acknowledged record %v", got, records)
		}
	})

	step("ApplyTheSamples", func(t *testing.T) {
		if e.storage != csiStorageClass {
			t.Skipf("the samples' claims name no storage class: deploy the CSI driver (its class is the default) for this step")
		}
		applySamples(t, e)
	})
}

// csiStorageClass is the StorageClass of the node's CSI driver
// (hack/k8s/csi/classes.yaml), the one that takes snapshots.
const csiStorageClass = "felix-hostpath"

// restored is the cluster the suite restores from a backup of cluster.
const restored = "restored"

// registration is what a FelixBroker's status says of its broker.
type registration struct {
	id          string // storage id
	incarnation int64
}

// registrations returns each registered broker of a cluster (FelixBroker
// status), by broker name.
func registrations(t *testing.T, e env, of string) map[string]registration {
	t.Helper()
	out := e.kubectl(t, "-n", appNS, "get", "felixbrokers", "-o",
		`jsonpath={range .items[*]}{.metadata.name} {.spec.cluster} {.status.storageID} {.status.incarnation}{"\n"}{end}`)
	regs := map[string]registration{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) != 4 || f[1] != of {
			continue
		}
		var inc int64
		if _, err := fmt.Sscan(f[3], &inc); err != nil {
			t.Fatalf("felixbroker %s: incarnation %q", f[0], f[3])
		}
		regs[f[0]] = registration{id: f[2], incarnation: inc}
	}
	return regs
}

// storageIDs returns the storage id each registered broker of a cluster
// presents, by broker name.
func storageIDs(t *testing.T, e env, of string) map[string]string {
	t.Helper()
	ids := map[string]string{}
	for b, r := range registrations(t, e, of) {
		ids[b] = r.id
	}
	return ids
}

// shardLeader returns a FelixShard's assigned leader and epoch.
func shardLeader(t *testing.T, e env, shard string) (string, int64) {
	t.Helper()
	out := e.kubectl(t, "-n", appNS, "get", "felixshard", shard, "-o", "jsonpath={.status.assignment.leader} {.status.assignment.epoch}")
	var leader string
	var epoch int64
	if _, err := fmt.Sscan(out, &leader, &epoch); err != nil {
		t.Fatalf("felixshard %s assignment %q: %v", shard, out, err)
	}
	return leader, epoch
}

// podUID returns a pod's uid.
func podUID(t *testing.T, e env, pod string) string {
	t.Helper()
	return e.kubectl(t, "-n", appNS, "get", "pod", pod, "-o", "jsonpath={.metadata.uid}")
}

// waitNewPodReady waits for the pod of that name to be a new one (another
// uid than oldUID: a deleted or evicted pod stays Ready while it
// terminates) and Ready.
func waitNewPodReady(t *testing.T, e env, pod, oldUID string) {
	t.Helper()
	waitNewPodReadyWithin(t, e, pod, oldUID, 4*time.Minute)
}

// waitNewPodReadyWithin is waitNewPodReady with its own deadline.
func waitNewPodReadyWithin(t *testing.T, e env, pod, oldUID string, within time.Duration) {
	t.Helper()
	eventually(t, within, pod+" is back and Ready", func() error {
		r := e.exec("", e.kubectlBin, "-n", appNS, "get", "pod", pod, "-o",
			`jsonpath={.metadata.uid} {.status.conditions[?(@.type=="Ready")].status}`)
		if r.err != nil {
			return fmt.Errorf("%v: %s", r.err, r.errOut)
		}
		uid, ready, _ := strings.Cut(strings.TrimSpace(r.out), " ")
		if uid == oldUID || ready != "True" {
			return fmt.Errorf("pod %s: uid %s (before: %s), Ready %q", pod, uid, oldUID, ready)
		}
		return nil
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

// readAll reads shard 0 of events from the start to its tail, as user,
// and returns the payloads.
func readAll(t *testing.T, e env, bootstrap, pod, user string) []string {
	t.Helper()
	var got []string
	for _, r := range readShard(t, e, bootstrap, pod, user, 0) {
		got = append(got, r.payload)
	}
	return got
}

// readRecord is one record `felix read` printed.
type readRecord struct {
	offset  uint64
	payload string
}

// readShard reads a shard of events from the start to its tail, as user.
func readShard(t *testing.T, e env, bootstrap, pod, user string, shard int) []readRecord {
	t.Helper()
	out, err := e.felixClient(t, appNS, pod, user, "",
		"read", "--bootstrap", bootstrap, "--stream", "events", "--shard", fmt.Sprint(shard), "--from", "earliest", "--output", "json")
	if err != nil && strings.Contains(err.Error(), `"TLSHandshake"`) {
		cluster, _, _ := strings.Cut(bootstrap, ".")
		t.Fatalf("%v\nwhat each side holds:\n%s\n%v", err, tlsDiagnosis(t, e, cluster, user, err), err)
	}
	if err != nil {
		t.Fatal(err)
	}
	// By offset: `kubectl run -i` can print a finished pod's output twice
	// (its attach stream, then its logs when the attach breaks); the same
	// offset printed twice must carry the same record, and a record
	// written twice would show at two offsets.
	var got []readRecord
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
		got = append(got, readRecord{offset: rec.Offset, payload: rec.Payload})
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
