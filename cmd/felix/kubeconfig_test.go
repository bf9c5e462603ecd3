package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
)

// errNoKubeconfigInTest is what fakeKube answers when a case must not
// read the kubeconfig.
var errNoKubeconfigInTest = errors.New("test: the kubeconfig must not be read")

// fakeKube is a kubeconfig whose context's namespace is ns; with ns ""
// reading it fails (a lookupKubeconfig error).
type fakeKube struct{ ns string }

func (f fakeKube) Namespace() (string, error) {
	if f.ns == "" {
		return "", &clusterLookupError{reason: lookupKubeconfig, err: errNoKubeconfigInTest}
	}
	return f.ns, nil
}

func (f fakeKube) Reader() (ctrlclient.Reader, error) {
	return nil, &clusterLookupError{reason: lookupKubeconfig, err: errNoKubeconfigInTest}
}

// TestTargetResolution: --cluster NAME takes -n, else the kubeconfig
// context's namespace; NAMESPACE/NAME stands alone and -n must agree;
// --broker, --bootstrap and FELIX_BOOTSTRAP win over the kubeconfig,
// which is asked for the brokers only for --cluster alone.
func TestTargetResolution(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		env     string // FELIX_BOOTSTRAP
		ctxNS   string // the kubeconfig context's namespace; "": reading it fails
		want    target
		wantErr error
		lookup  string // the clusterLookupError reason wanted
	}{
		{name: "nothing: --broker's default"},
		{name: "slash form alone: through the kubeconfig, whose namespace is not read", args: []string{"--cluster", "shop/demo"},
			want: target{cluster: clusterRef{"shop", "demo"}, viaKube: true}},
		{name: "name and -n", args: []string{"--cluster", "demo", "-n", "shop"},
			want: target{cluster: clusterRef{"shop", "demo"}, viaKube: true}},
		{name: "name and --namespace", args: []string{"--cluster", "demo", "--namespace", "shop"},
			want: target{cluster: clusterRef{"shop", "demo"}, viaKube: true}},
		{name: "name: the context's namespace", args: []string{"--cluster", "demo"}, ctxNS: "team",
			want: target{cluster: clusterRef{"team", "demo"}, viaKube: true}},
		{name: "name: the kubeconfig does not load", args: []string{"--cluster", "demo"}, wantErr: errNoKubeconfigInTest, lookup: lookupKubeconfig},
		{name: "slash form and an agreeing -n", args: []string{"--cluster", "shop/demo", "-n", "shop"},
			want: target{cluster: clusterRef{"shop", "demo"}, viaKube: true}},
		{name: "slash form and a disagreeing -n", args: []string{"--cluster", "shop/demo", "-n", "other"}, wantErr: errNamespaceConflict},
		{name: "--bootstrap wins over the kubeconfig", args: []string{"--cluster", "demo", "-n", "shop", "--bootstrap", "10.0.0.1"},
			want: target{bootstrap: []string{"10.0.0.1:7100"}, cluster: clusterRef{"shop", "demo"}}},
		{name: "FELIX_BOOTSTRAP wins over the kubeconfig", args: []string{"--cluster", "shop/demo"}, env: "10.0.0.2:7200",
			want: target{bootstrap: []string{"10.0.0.2:7200"}, cluster: clusterRef{"shop", "demo"}}},
		{name: "--broker wins over the kubeconfig", args: []string{"--cluster", "shop/demo", "--broker", "10.0.0.3:7100"}, env: "10.0.0.2",
			want: target{cluster: clusterRef{"shop", "demo"}}},
		{name: "--broker and --bootstrap with --cluster", args: []string{"--cluster", "shop/demo", "--broker", "10.0.0.3:7100", "--bootstrap", "10.0.0.1"},
			wantErr: errAny},
		{name: "-n without --cluster", args: []string{"-n", "shop"}, wantErr: errKubeFlagsNeedCluster},
		{name: "--context without --cluster", args: []string{"--context", "prod"}, wantErr: errKubeFlagsNeedCluster},
		{name: "--kubeconfig without --cluster", args: []string{"--kubeconfig", "kc"}, wantErr: errKubeFlagsNeedCluster},
		{name: "--kubeconfig and --context with a slash form", args: []string{"--cluster", "shop/demo", "--kubeconfig", "kc", "--context", "prod"},
			want: target{cluster: clusterRef{"shop", "demo"}, viaKube: true}},
		{name: "malformed slash form", args: []string{"--cluster", "shop/demo/x"}, wantErr: errAny},
		{name: "malformed name", args: []string{"--cluster", "Demo_1", "-n", "shop"}, wantErr: errAny},
		{name: "malformed namespace", args: []string{"--cluster", "demo", "-n", "Shop!"}, wantErr: errAny},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f shardFlags
			f.kube.open = func(kubeFlags) kubeSource { return fakeKube{ns: tc.ctxNS} }
			cmd := &cobra.Command{Use: "x"}
			f.register(cmd)
			if err := cmd.ParseFlags(tc.args); err != nil {
				t.Fatal(err)
			}
			got, err := f.target(cmd, func(k string) string {
				if k == envBootstrap {
					return tc.env
				}
				return ""
			})
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("target: %v", err)
			case tc.wantErr == errAny && err == nil, tc.wantErr != nil && tc.wantErr != errAny && !errors.Is(err, tc.wantErr):
				t.Fatalf("target = %+v, %v; want %v", got, err, tc.wantErr)
			}
			if tc.lookup != "" {
				if le := (*clusterLookupError)(nil); !errors.As(err, &le) || le.reason != tc.lookup {
					t.Fatalf("err = %v, want a %s lookup error", err, tc.lookup)
				}
			}
			if err != nil {
				return
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(target{})); diff != "" {
				t.Fatalf("target (-want +got):\n%s", diff)
			}
		})
	}
}

// errAny in a case wants some error, of no particular kind.
var errAny = errors.New("any error")

// TestKubeconfigNamespace: the namespace of --cluster NAME comes from the
// current context of --kubeconfig, or of --context, and is default when
// the context names none.
func TestKubeconfigNamespace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	kc := clientcmdapi.NewConfig()
	kc.Clusters["k"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1"}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: "t"}
	kc.Contexts["team"] = &clientcmdapi.Context{Cluster: "k", AuthInfo: "u", Namespace: "team"}
	kc.Contexts["bare"] = &clientcmdapi.Context{Cluster: "k", AuthInfo: "u"}
	kc.CurrentContext = "team"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		flags kubeFlags
		want  string
	}{
		{name: "current context", flags: kubeFlags{kubeconfig: path}, want: "team"},
		{name: "--context without a namespace", flags: kubeFlags{kubeconfig: path, context: "bare"}, want: "default"},
		{name: "-n wins", flags: kubeFlags{kubeconfig: path, namespace: "shop"}, want: "shop"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ref, ok, err := clusterRefOf("demo", &tc.flags)
			if err != nil || !ok || ref != (clusterRef{Namespace: tc.want, Name: "demo"}) {
				t.Fatalf("clusterRefOf = %v, %v, %v; want %s/demo", ref, ok, err, tc.want)
			}
		})
	}
	t.Run("no kubeconfig at all", func(t *testing.T) {
		t.Setenv(clientcmd.RecommendedConfigPathEnvVar, filepath.Join(t.TempDir(), "none"))
		t.Setenv("HOME", t.TempDir())
		ref, ok, err := clusterRefOf("demo", &kubeFlags{})
		if err != nil || !ok || ref != (clusterRef{Namespace: "default", Name: "demo"}) {
			t.Fatalf("clusterRefOf = %v, %v, %v; want default/demo", ref, ok, err)
		}
	})
	t.Run("missing file", func(t *testing.T) {
		_, _, err := clusterRefOf("demo", &kubeFlags{kubeconfig: filepath.Join(t.TempDir(), "none")})
		if le := (*clusterLookupError)(nil); !errors.As(err, &le) || le.reason != lookupKubeconfig || !errors.Is(err, errKubeconfig) {
			t.Fatalf("err = %v, want a Kubeconfig lookup error", err)
		}
	})
}

// TestLoadBalancerAddrs: only a LoadBalancer's ingress counts, hostname
// before IP, at the Service's felix port.
func TestLoadBalancerAddrs(t *testing.T) {
	lb := func(port int32, ingress ...corev1.LoadBalancerIngress) *corev1.Service {
		s := &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer,
			Ports: []corev1.ServicePort{{Name: "http", Port: 7101}, {Name: "felix", Port: port}}}}
		s.Status.LoadBalancer.Ingress = ingress
		return s
	}
	for _, tc := range []struct {
		name string
		svc  *corev1.Service
		want []string
	}{
		{name: "ClusterIP", svc: &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP}}},
		{name: "not provisioned yet", svc: lb(7100)},
		{name: "IPs and a hostname", svc: lb(17100, corev1.LoadBalancerIngress{IP: "203.0.113.7"},
			corev1.LoadBalancerIngress{Hostname: "felix.example.com", IP: "203.0.113.8"}, corev1.LoadBalancerIngress{IP: "2001:db8::1"}),
			want: []string{"203.0.113.7:17100", "felix.example.com:17100", "[2001:db8::1]:17100"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, loadBalancerAddrs(tc.svc)); diff != "" {
				t.Fatalf("addresses (-want +got):\n%s", diff)
			}
		})
	}
}

// TestClusterLookupErrorJSON: a failed lookup is error ClusterLookup with
// its reason, exit code 1.
func TestClusterLookupErrorJSON(t *testing.T) {
	cmd := &cobra.Command{Use: "x"}
	var stderr bytes.Buffer
	cmd.SetErr(&stderr)
	err := reportErr(cmd, &clusterLookupError{reason: lookupNoReadyBrokers, err: errNoReadyBrokers})
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != exitBrokerError {
		t.Fatalf("err = %v, want exit code %d", err, exitBrokerError)
	}
	var got map[string]any
	if err := json.Unmarshal(stderr.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got["error"] != errNameClusterLookup || got["reason"] != lookupNoReadyBrokers {
		t.Fatalf("stderr = %v", got)
	}
}
