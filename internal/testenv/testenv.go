// Package testenv starts a real kube-apiserver and etcd (built from pinned Go
// modules by hack/build-envtest.sh) through controller-runtime's envtest,
// with the Felix CRDs installed. Tests use it instead of a fake client.
package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	felixv1 "felix.dev/felix/api/v1alpha1"
)

// Env is a running API server with the Felix CRDs installed.
type Env struct {
	// Config reaches the API server as an administrator.
	Config *rest.Config
	// Client is a controller-runtime client whose scheme knows the core
	// kinds and the Felix kinds.
	Client client.Client
	// Kubeconfig is the path of a kubeconfig file for kubectl.
	Kubeconfig string
	// Env is the underlying envtest environment.
	Env *envtest.Environment
}

// RepoRoot returns the repository root (the directory holding go.mod).
func RepoRoot() string {
	_, file, _, _ := goruntime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// AssetsDir returns the directory holding kube-apiserver and etcd:
// $KUBEBUILDER_ASSETS when set, otherwise the newest build under bin/k8s.
func AssetsDir() (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir, nil
	}
	matches, _ := filepath.Glob(filepath.Join(RepoRoot(), "bin", "k8s", "*", "kube-apiserver"))
	for i := len(matches) - 1; i >= 0; i-- {
		dir := filepath.Dir(matches[i])
		if _, err := os.Stat(filepath.Join(dir, "etcd")); err == nil {
			return dir, nil
		}
	}
	return "", fmt.Errorf("no kube-apiserver/etcd found: run `make envtest-bins` (or set KUBEBUILDER_ASSETS)")
}

// Start starts an API server for the test and stops it when the test ends.
// It fails the test if the binaries are missing: the envtest suites are part
// of the test command and must not skip silently.
func Start(t testing.TB) *Env {
	t.Helper()
	env, err := StartEnv()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Logf("testenv: stop: %v", err)
		}
	})
	return env
}

// StartEnv starts an API server; the caller must call Stop.
func StartEnv() (*Env, error) {
	assets, err := AssetsDir()
	if err != nil {
		return nil, err
	}
	te := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join(RepoRoot(), "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
	}
	cfg, err := te.Start()
	if err != nil {
		return nil, fmt.Errorf("start envtest: %w", err)
	}
	s := NewScheme()
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		_ = te.Stop()
		return nil, fmt.Errorf("client: %w", err)
	}
	env := &Env{Config: cfg, Client: c, Env: te}
	dir, err := os.MkdirTemp("", "felix-testenv-")
	if err != nil {
		_ = te.Stop()
		return nil, err
	}
	env.Kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := WriteKubeconfig(cfg, env.Kubeconfig); err != nil {
		_ = te.Stop()
		return nil, err
	}
	return env, nil
}

// Stop stops the API server and removes the kubeconfig.
func (e *Env) Stop() error {
	_ = os.RemoveAll(filepath.Dir(e.Kubeconfig))
	return e.Env.Stop()
}

// NewScheme returns a scheme with the core Kubernetes kinds and the Felix kinds.
func NewScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := scheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := felixv1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}

// WriteKubeconfig writes a kubeconfig file for cfg (client certificate or
// token, as envtest hands out).
func WriteKubeconfig(cfg *rest.Config, path string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["felix"] = &clientcmdapi.Cluster{
		Server:                   cfg.Host,
		CertificateAuthorityData: cfg.CAData,
	}
	kc.AuthInfos["felix"] = &clientcmdapi.AuthInfo{
		ClientCertificateData: cfg.CertData,
		ClientKeyData:         cfg.KeyData,
		Token:                 cfg.BearerToken,
	}
	kc.Contexts["felix"] = &clientcmdapi.Context{Cluster: "felix", AuthInfo: "felix"}
	kc.CurrentContext = "felix"
	return clientcmd.WriteToFile(*kc, path)
}
