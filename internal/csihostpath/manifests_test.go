package csihostpath

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	snapv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
)

// TestManifests decodes the deployment manifests (hack/k8s/csi/, with
// their placeholders filled in) strictly, so a misspelt or misplaced field
// fails here rather than on the node, and checks that they name this
// driver and run it in the modes its flags know.
func TestManifests(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := snapv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	decoder := serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
	fill := strings.NewReplacer(
		"@CSI_HOSTPATH_IMAGE@", "felix.local/felix-csi-hostpath:1",
		"@CSI_PROVISIONER_IMAGE@", "felix.local/csi-provisioner:v0",
		"@CSI_SNAPSHOTTER_IMAGE@", "felix.local/csi-snapshotter:v0",
		"@SNAPSHOT_CONTROLLER_IMAGE@", "felix.local/snapshot-controller:v0",
		"@KUBELET_DIR@", "/var/lib/kubelet", "@STATE_DIR@", "/var/lib/felix-csi-hostpath")

	placeholder := regexp.MustCompile(`@[A-Z_]+@`)
	files, err := filepath.Glob(filepath.Join("..", "..", "hack", "k8s", "csi", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests (%v)", err)
	}
	kinds := map[string]int{}
	var driverArgs [][]string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		filled := fill.Replace(string(b))
		if m := placeholder.FindString(filled); m != "" {
			t.Errorf("%s: placeholder %s, which csi-deploy.sh does not fill", f, m)
		}
		r := yaml.NewYAMLReader(bufio.NewReader(strings.NewReader(filled)))
		for {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if len(bytes.TrimSpace(doc)) == 0 {
				continue
			}
			js, err := yaml.ToJSON(doc)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if string(js) == "null" {
				continue
			}
			obj, gvk, err := decoder.Decode(js, nil, nil)
			if err != nil {
				t.Errorf("%s: %v", f, err)
				continue
			}
			kinds[gvk.Kind]++
			switch o := obj.(type) {
			case *storagev1.CSIDriver:
				checkDriverName(t, f, o.Name)
			case *storagev1.StorageClass:
				checkDriverName(t, f, o.Provisioner)
				if o.Annotations["storageclass.kubernetes.io/is-default-class"] != "true" {
					t.Errorf("%s: StorageClass %s is not the default", f, o.Name)
				}
			case *snapv1.VolumeSnapshotClass:
				checkDriverName(t, f, o.Driver)
			case *appsv1.StatefulSet:
				driverArgs = append(driverArgs, containerArgs(o.Spec.Template.Spec.Containers, "driver"))
			case *appsv1.DaemonSet:
				driverArgs = append(driverArgs, containerArgs(o.Spec.Template.Spec.Containers, "driver"))
			}
		}
	}
	for _, k := range []string{"Namespace", "CSIDriver", "StorageClass", "VolumeSnapshotClass", "StatefulSet", "DaemonSet", "Deployment", "ClusterRole", "ClusterRoleBinding", "ServiceAccount"} {
		if kinds[k] == 0 {
			t.Errorf("no %s in the manifests", k)
		}
	}
	var modes []string
	for _, args := range driverArgs {
		for _, a := range args {
			if m, ok := strings.CutPrefix(a, "--mode="); ok {
				modes = append(modes, m)
			}
		}
	}
	if strings.Join(modes, ",") != "controller,node" {
		t.Errorf("driver containers run in modes %v, want controller (StatefulSet) and node (DaemonSet)", modes)
	}
}

func checkDriverName(t *testing.T, file, name string) {
	t.Helper()
	if name != DefaultDriverName {
		t.Errorf("%s: driver %q, want %q", file, name, DefaultDriverName)
	}
}

func containerArgs(cs []corev1.Container, name string) []string {
	for _, c := range cs {
		if c.Name == name {
			return c.Args
		}
	}
	return nil
}
