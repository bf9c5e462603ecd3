package snapshots_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"felix.dev/felix/internal/podrunner"
	"felix.dev/felix/internal/snapshots"
	"felix.dev/felix/internal/testenv"
)

func TestSnapshots_CopyAndRestore(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	env := testenv.Start(t)
	if err := snapshots.InstallCRDs(ctx, env.Config); err != nil {
		t.Fatal(err)
	}
	scheme, err := snapshots.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	const ns = "snap"
	must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))

	state := t.TempDir()
	book, err := podrunner.NewAddressBook(filepath.Join(state, "addresses.json"), 240, 249)
	must(t, err)
	// Wired as internal/localcluster does: the runner first, the
	// controller with the runner as its Freezer, then the runner's source.
	runner, err := podrunner.New(podrunner.Config{
		RestConfig: env.Config, Namespaces: []string{ns}, StateDir: state, Addresses: book,
		Images: map[string]string{"sleeper": "/bin/sleep"},
	})
	must(t, err)
	snaps, err := snapshots.New(snapshots.Config{RestConfig: env.Config, Namespaces: []string{ns}, StateDir: state, Freezer: runner})
	must(t, err)
	runner.SetSnapshots(snaps)
	errs := make(chan error, 2)
	go func() { errs <- runner.Run(ctx) }()
	go func() { errs <- snaps.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		for range 2 {
			if err := <-errs; err != nil {
				t.Errorf("run: %v", err)
			}
		}
	})

	// A bound claim with a file in it.
	must(t, c.Create(ctx, claim(ns, "src", "")))
	srcDir := runner.ClaimDir(ns, "src")
	eventually(t, "claim src bound", func() (bool, string) { return bound(ctx, c, ns, "src") })
	must(t, os.WriteFile(filepath.Join(srcDir, "storage-id"), []byte("v1"), 0o644))

	// A pod writing to it: frozen for the copy, running again after.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "user"},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "sleep", Image: "sleeper", Args: []string{"600"},
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "src"}}}},
		},
	}
	must(t, c.Create(ctx, pod))
	pid := 0
	eventually(t, "user pod running", func() (bool, string) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return false, err.Error()
		}
		if len(pod.Status.ContainerStatuses) == 0 || pod.Status.ContainerStatuses[0].State.Running == nil {
			return false, string(pod.Status.Phase)
		}
		_, err := fmt.Sscanf(pod.Status.ContainerStatuses[0].ContainerID, "podrunner://%d", &pid)
		return err == nil, fmt.Sprint(err)
	})

	// A claim restored from a snapshot that does not exist yet stays
	// Pending until the snapshot is ready.
	must(t, c.Create(ctx, claim(ns, "restored", "snap1")))

	// Snapshot it.
	vs := &snapv1.VolumeSnapshot{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "snap1"},
		Spec:       snapv1.VolumeSnapshotSpec{Source: snapv1.VolumeSnapshotSource{PersistentVolumeClaimName: ptr.To("src")}},
	}
	must(t, c.Create(ctx, vs))
	eventually(t, "snapshot ready", func() (bool, string) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(vs), vs); err != nil {
			return false, err.Error()
		}
		return vs.Status != nil && ptr.Deref(vs.Status.ReadyToUse, false), fmt.Sprintf("%+v", vs.Status)
	})
	if vs.Status.CreationTime == nil || vs.Status.BoundVolumeSnapshotContentName == nil || vs.Status.RestoreSize.Value() != 2 {
		t.Fatalf("ready snapshot status incomplete: %+v", vs.Status)
	}
	if st := procState(t, pid); st == "T" || st == "t" {
		t.Fatalf("pod process state %q after the snapshot: still stopped", st)
	}
	var content snapv1.VolumeSnapshotContent
	must(t, c.Get(ctx, client.ObjectKey{Name: *vs.Status.BoundVolumeSnapshotContentName}, &content))
	if content.Spec.VolumeSnapshotRef.UID != vs.UID || !ptr.Deref(content.Status.ReadyToUse, false) {
		t.Fatalf("content not bound and ready: %+v %+v", content.Spec.VolumeSnapshotRef, content.Status)
	}

	// The snapshot is point-in-time: later writes to the source do not
	// reach it.
	must(t, os.WriteFile(filepath.Join(srcDir, "storage-id"), []byte("v2"), 0o644))

	eventually(t, "restored claim bound", func() (bool, string) { return bound(ctx, c, ns, "restored") })
	if got := readFile(t, filepath.Join(runner.ClaimDir(ns, "restored"), "storage-id")); got != "v1" {
		t.Fatalf("restored claim holds %q, want the snapshot's %q", got, "v1")
	}
	// A second restore of the same snapshot after the source changed.
	must(t, c.Create(ctx, claim(ns, "restored2", "snap1")))
	eventually(t, "second restored claim bound", func() (bool, string) { return bound(ctx, c, ns, "restored2") })
	if got := readFile(t, filepath.Join(runner.ClaimDir(ns, "restored2"), "storage-id")); got != "v1" {
		t.Fatalf("second restore holds %q, want %q", got, "v1")
	}

	// Deleting the snapshot removes its directory and content.
	snapDir := snapshots.SnapshotDir(runner.StateDir(), ns, "snap1")
	if _, err := os.Stat(snapDir); err != nil {
		t.Fatal(err)
	}
	must(t, c.Delete(ctx, vs))
	eventually(t, "snapshot, content and directory gone", func() (bool, string) {
		vsErr := c.Get(ctx, client.ObjectKeyFromObject(vs), &snapv1.VolumeSnapshot{})
		cErr := c.Get(ctx, client.ObjectKeyFromObject(&content), &snapv1.VolumeSnapshotContent{})
		_, dirErr := os.Stat(snapDir)
		return apierrors.IsNotFound(vsErr) && apierrors.IsNotFound(cErr) && errors.Is(dirErr, os.ErrNotExist), fmt.Sprint(vsErr, cErr, dirErr)
	})
	if _, err := snaps.SnapshotDir(ctx, ns, "snap1"); !errors.Is(err, podrunner.ErrSnapshotNotReady) {
		t.Fatalf("SnapshotDir of a deleted snapshot: %v, want ErrSnapshotNotReady", err)
	}
}

func claim(ns, name, fromSnapshot string) *corev1.PersistentVolumeClaim {
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	if fromSnapshot != "" {
		pvc.Spec.DataSource = &corev1.TypedLocalObjectReference{APIGroup: ptr.To("snapshot.storage.k8s.io"), Kind: "VolumeSnapshot", Name: fromSnapshot}
	}
	return pvc
}

func bound(ctx context.Context, c client.Client, ns, name string) (bool, string) {
	var pvc corev1.PersistentVolumeClaim
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &pvc); err != nil {
		return false, err.Error()
	}
	return pvc.Status.Phase == corev1.ClaimBound, string(pvc.Status.Phase)
}

func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, detail := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 20s (last: %s)", what, detail)
		}
		<-tick.C
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// procState is the one-letter state of a process from /proc.
func procState(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return s[i+2 : i+3]
}
