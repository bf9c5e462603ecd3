package snapshots

import (
	"bytes"
	"context"
	"embed"
	"fmt"
	"io"
	"path/filepath"
	goruntime "runtime"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// crdFS holds the VolumeSnapshot, VolumeSnapshotContent and
// VolumeSnapshotClass CRDs, copied unchanged from
// github.com/kubernetes-csi/external-snapshotter/client/v8@v8.7.0
// config/crd (the version go.mod pins for the API types).
//
//go:embed crds/*.yaml
var crdFS embed.FS

// CRDDir is the directory holding the snapshot CRD files, for envtest's
// CRDDirectoryPaths.
func CRDDir() string {
	_, file, _, _ := goruntime.Caller(0)
	return filepath.Join(filepath.Dir(file), "crds")
}

// CRDs decodes the embedded snapshot CRDs.
func CRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	entries, err := crdFS.ReadDir("crds")
	if err != nil {
		return nil, err
	}
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, e := range entries {
		b, err := crdFS.ReadFile("crds/" + e.Name())
		if err != nil {
			return nil, err
		}
		dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
		for {
			var crd apiextensionsv1.CustomResourceDefinition
			if err := dec.Decode(&crd); err != nil {
				if err == io.EOF {
					break
				}
				return nil, fmt.Errorf("snapshots: %s: %w", e.Name(), err)
			}
			if crd.Name != "" {
				out = append(out, &crd)
			}
		}
	}
	return out, nil
}

// InstallCRDs creates the snapshot CRDs in the API server (leaving ones
// that exist) and waits until they are established.
func InstallCRDs(ctx context.Context, cfg *rest.Config) error {
	crds, err := CRDs()
	if err != nil {
		return err
	}
	s := runtime.NewScheme()
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		return err
	}
	for _, crd := range crds {
		if err := c.Create(ctx, crd); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("snapshots: install CRD %s: %w", crd.Name, err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, crd := range crds {
		for {
			var got apiextensionsv1.CustomResourceDefinition
			if err := c.Get(ctx, client.ObjectKeyFromObject(crd), &got); err != nil {
				return fmt.Errorf("snapshots: CRD %s: %w", crd.Name, err)
			}
			if established(&got) {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("snapshots: CRD %s not established: %w", crd.Name, ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

func established(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
			return true
		}
	}
	return false
}
