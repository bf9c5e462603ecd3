package podrunner

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// version returns a consistent file set: every file names the same n.
func versionFiles(n int) map[string][]byte {
	v := []byte(strconv.Itoa(n) + "\n" + string(bytes.Repeat([]byte{'x'}, 16<<10)))
	return map[string][]byte{"tls.crt": v, "tls.key": v, "ca.crt": v, "sub/dir/f": v}
}

// TestAtomicDirLayout: keys are links through ..data to a timestamped
// version; an unchanged set writes nothing; a removed key's link goes;
// the old version is deleted.
func TestAtomicDirLayout(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	changed, err := WriteAtomicDir(dir, map[string][]byte{"a": []byte("1"), "b": []byte("2")}, t0)
	if err != nil || !changed {
		t.Fatalf("first write: changed %v, %v", changed, err)
	}
	if got, _ := os.Readlink(filepath.Join(dir, "a")); got != "..data/a" {
		t.Fatalf("a -> %q, want ..data/a", got)
	}
	v1, _ := os.Readlink(filepath.Join(dir, "..data"))
	if v1 != "..2026_12_02_00_00_00.000000000" {
		t.Fatalf("..data -> %q", v1)
	}
	if changed, err := WriteAtomicDir(dir, map[string][]byte{"a": []byte("1"), "b": []byte("2")}, t0.Add(time.Second)); err != nil || changed {
		t.Fatalf("same content: changed %v, %v", changed, err)
	}
	if changed, err := WriteAtomicDir(dir, map[string][]byte{"a": []byte("3")}, t0.Add(2*time.Second)); err != nil || !changed {
		t.Fatalf("update: changed %v, %v", changed, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "a")); err != nil || string(b) != "3" {
		t.Fatalf("a = %q, %v", b, err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "b")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("b still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, v1)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("old version %s still there: %v", v1, err)
	}
	// Same clock reading twice: still a new version.
	if changed, err := WriteAtomicDir(dir, map[string][]byte{"a": []byte("4")}, t0.Add(2*time.Second)); err != nil || !changed {
		t.Fatalf("update at the same time: changed %v, %v", changed, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "a")); string(b) != "4" {
		t.Fatalf("a = %q", b)
	}
	if _, err := WriteAtomicDir(dir, map[string][]byte{"..data": nil}, t0); err == nil {
		t.Fatal("a key named ..data was accepted")
	}
}

// TestAtomicDirReadersSeeWholeSets: while versions are replaced, a reader
// that resolves ..data once and reads every file through it sees one
// version in every file, and a reader of a key's path never sees a
// partly written file.
func TestAtomicDirReadersSeeWholeSets(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	if _, err := WriteAtomicDir(dir, versionFiles(0), t0); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	var sets atomic.Int64
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				v, err := os.Readlink(filepath.Join(dir, "..data"))
				if err != nil {
					errs <- err
					return
				}
				var first []byte
				whole := true
				for _, name := range []string{"tls.crt", "tls.key", "ca.crt", "sub/dir/f"} {
					b, err := os.ReadFile(filepath.Join(dir, v, name))
					if errors.Is(err, fs.ErrNotExist) {
						whole = false // the version was replaced and deleted meanwhile: resolve again
						break
					}
					if err != nil {
						errs <- err
						return
					}
					if first == nil {
						first = b
					} else if !bytes.Equal(first, b) {
						errs <- errors.New("files of one version differ: " + name)
						return
					}
				}
				if whole {
					sets.Add(1)
				}
				// Through the key's own link: any version, but whole.
				b, err := os.ReadFile(filepath.Join(dir, "tls.crt"))
				if err == nil {
					n, _, _ := bytes.Cut(b, []byte("\n"))
					v, perr := strconv.Atoi(string(n))
					if perr != nil || !bytes.Equal(b, versionFiles(v)["tls.crt"]) {
						errs <- errors.New("tls.crt read partly written")
						return
					}
				}
			}
		}()
	}
	for n := 1; n <= 100; n++ {
		if _, err := WriteAtomicDir(dir, versionFiles(n), t0.Add(time.Duration(n)*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if sets.Load() == 0 {
		t.Fatal("readers never read a whole set")
	}
	b, err := os.ReadFile(filepath.Join(dir, "sub", "dir", "f"))
	if err != nil || !bytes.Equal(b, versionFiles(100)["sub/dir/f"]) {
		t.Fatalf("final content wrong: %v", err)
	}
}

// TestRefreshPicksUpSecretChange: a running pod's Secret volume follows
// the Secret (the loop's period is injected), and stops when the pod's
// processes are gone.
func TestRefreshPicksUpSecretChange(t *testing.T) {
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b0-tls"},
		Data: map[string][]byte{"tls.crt": []byte("v1"), "tls.key": []byte("k1")}}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "conf"}, Data: map[string]string{"a": "1", "b": "2"}}
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(secret, cm).Build()
	state := t.TempDir()
	r := &Runner{cfg: Config{StateDir: state}, reader: c, log: logr.Discard(), now: time.Now}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b0"}, Spec: corev1.PodSpec{Volumes: []corev1.Volume{
		{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "b0-tls"}}},
		{Name: "conf", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: "conf"}, Items: []corev1.KeyToPath{{Key: "a", Path: "x/a"}}}}},
	}}}
	ctx := context.Background()
	dirs, err := r.podVolumes(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	read := func(p string) string {
		b, _ := os.ReadFile(p)
		return string(b)
	}
	if got := read(filepath.Join(dirs["tls"], "tls.crt")); got != "v1" {
		t.Fatalf("tls.crt = %q at start", got)
	}
	if got := read(filepath.Join(dirs["conf"], "x", "a")); got != "1" {
		t.Fatalf("conf x/a = %q at start", got)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.refreshKeyVolumes(ctx, pod, stop, 10*time.Millisecond)
	}()
	secret.Data = map[string][]byte{"tls.crt": []byte("v2"), "tls.key": []byte("k2")}
	if err := c.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	cm.Data = map[string]string{"a": "changed"}
	if err := c.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for read(filepath.Join(dirs["tls"], "tls.crt")) != "v2" || read(filepath.Join(dirs["tls"], "tls.key")) != "k2" ||
		read(filepath.Join(dirs["conf"], "x", "a")) != "changed" {
		if time.Now().After(deadline) {
			t.Fatalf("volumes not refreshed: tls.crt %q, x/a %q", read(filepath.Join(dirs["tls"], "tls.crt")), read(filepath.Join(dirs["conf"], "x", "a")))
		}
		time.Sleep(5 * time.Millisecond)
	}
	// A Secret that disappears keeps the volume's last content.
	if err := c.Delete(ctx, secret); err != nil {
		t.Fatal(err)
	}
	close(stop)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("refresh loop did not stop with the pod")
	}
	if got := read(filepath.Join(dirs["tls"], "tls.crt")); got != "v2" {
		t.Fatalf("tls.crt = %q after the Secret went", got)
	}
}
