package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	felixv1 "felix.dev/felix/api/v1alpha1"
)

// TestID3_RestoredFromOldCopyRotatesThroughIncarnation: a broker's data
// directory is put back from a copy taken before its last registration. The
// copy's storage id is the one its peers know, and nothing inside it shows
// its age; the control plane's incarnation, ahead of the copy's
// registration file, does: the broker rotates its id at start, and the
// leader copies the shard to it again under the new id [ID-3] [RP-3].
func TestID3_RestoredFromOldCopyRotatesThroughIncarnation(t *testing.T) {
	c := newCluster(t, 3, felixv1.FsyncPeriodic)
	for i := 0; i < 3; i++ {
		c.startBroker(i)
	}
	c.createStream(t, "audit", 3)
	c.appendAcked(t, "audit", 20, "old")
	sh := c.shard("audit", 0)
	leader := sh.Status.Assignment.Leader
	var f string
	for _, r := range sh.Spec.Replicas {
		if r != leader {
			f = r
			break
		}
	}
	original := c.registered(t, f)

	// Take a copy of the follower's directory while it is stopped cleanly.
	c.stop(f)
	snapshot := filepath.Join(t.TempDir(), "snapshot")
	if out, err := exec.Command("cp", "-a", c.brokers[f].dataDir, snapshot).CombinedOutput(); err != nil {
		t.Fatalf("copy: %v\n%s", err, out)
	}
	// It registers again (incarnation +1) and receives more records.
	again := c.startBroker(ordinalOf(t, f))
	if again.id != original.StorageID {
		t.Fatalf("clean restart rotated the id")
	}
	c.appendAcked(t, "audit", 20, "new")

	// The volume is restored from the older copy.
	c.kill9(f)
	if err := os.RemoveAll(c.brokers[f].dataDir); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-a", snapshot, c.brokers[f].dataDir).CombinedOutput(); err != nil {
		t.Fatalf("restore: %v\n%s", err, out)
	}
	restored := c.startBroker(ordinalOf(t, f))
	if restored.id == original.StorageID {
		t.Fatalf("a directory restored from before the last registration kept its storage id %s", original.StorageID)
	}
	c.eventually("the restored follower copied again and counted under its new id", 90*time.Second, func() (bool, string) {
		sh := c.shard("audit", 0)
		if sh.Status.Report == nil {
			return false, "no report"
		}
		for _, fr := range sh.Status.Report.Followers {
			if fr.Name == f {
				return fr.StorageID == restored.id && fr.CaughtUp, shardState(sh)
			}
		}
		return false, shardState(sh)
	})
	st := c.registered(t, f)
	if st.StorageID != restored.id || st.Incarnation != original.Incarnation+2 {
		t.Errorf("registry after restore: id %s incarnation %d; want %s and %d", st.StorageID, st.Incarnation, restored.id, original.Incarnation+2)
	}
}
