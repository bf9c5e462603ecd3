package podrunner

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
)

// tokenLifetime is the lifetime of a pod's ServiceAccount token; the
// runner renews it at half-life. client-go rereads a kubeconfig's
// tokenFile, so a running process picks up the new token.
const tokenLifetime = time.Hour

// credentials returns the kubeconfig path a pod's processes get as
// $KUBECONFIG ("" for none). In bridge mode it is a copy of the kubeconfig
// that reaches a loopback API server at the network's gateway (see
// reachFromBridge).
func (r *Runner) credentials(ctx context.Context, w *podWorker) (string, error) {
	if !r.cfg.ServiceAccountTokens {
		if r.net == nil || r.cfg.Kubeconfig == "" {
			return r.cfg.Kubeconfig, nil
		}
		// Bridge mode: the container's loopback is its own, so it gets a
		// copy reaching the host's API server at the gateway, with every
		// file it names inlined (only the pod directory is mounted).
		kc, err := clientcmd.LoadFromFile(r.cfg.Kubeconfig)
		if err != nil {
			return "", fmt.Errorf("kubeconfig: %w", err)
		}
		if err := clientcmdapi.FlattenConfig(kc); err != nil {
			return "", fmt.Errorf("kubeconfig: %w", err)
		}
		reachFromBridge(kc, r.net.Gateway)
		pd := podDir(r.cfg.StateDir, w.key.Namespace, w.key.Name)
		if err := os.MkdirAll(pd, 0o755); err != nil {
			return "", err
		}
		path := filepath.Join(pd, "kubeconfig")
		if err := clientcmd.WriteToFile(*kc, path); err != nil {
			return "", err
		}
		return path, nil
	}
	dir := filepath.Join(podDir(r.cfg.StateDir, w.key.Namespace, w.key.Name), "serviceaccount")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	tokenFile := filepath.Join(dir, "token")
	if err := r.writeToken(ctx, w, tokenFile); err != nil {
		return "", err
	}
	cfg := r.cfg.RestConfig
	ca := cfg.CAData
	if len(ca) == 0 && cfg.CAFile != "" {
		b, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return "", err
		}
		ca = b
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["local"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: ca, InsecureSkipTLSVerify: cfg.Insecure}
	kc.AuthInfos["pod"] = &clientcmdapi.AuthInfo{TokenFile: tokenFile}
	kc.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "pod", Namespace: w.key.Namespace}
	kc.CurrentContext = "local"
	if r.net != nil {
		reachFromBridge(kc, r.net.Gateway)
	}
	path := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return "", err
	}
	go r.renewToken(ctx, w, tokenFile)
	return path, nil
}

// writeToken requests a token of the pod's ServiceAccount bound to the pod
// (it stops working once the pod is deleted) and writes it to path.
func (r *Runner) writeToken(ctx context.Context, w *podWorker, path string) error {
	sa := w.pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: ptr.To(int64(tokenLifetime / time.Second)),
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: w.key.Name, UID: w.uid},
	}}
	owner := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: w.key.Namespace}}
	if err := r.client.SubResource("token").Create(ctx, owner, tr); err != nil {
		return fmt.Errorf("token for serviceaccount %s/%s: %w", w.key.Namespace, sa, err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(tr.Status.Token), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// renewToken rewrites the token at half-life until the pod's worker ends.
func (r *Runner) renewToken(ctx context.Context, w *podWorker, path string) {
	for {
		t := time.NewTimer(tokenLifetime / 2)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-w.done:
			t.Stop()
			return
		case <-t.C:
		}
		if err := r.writeToken(ctx, w, path); err != nil {
			w.log.Error(err, "renew serviceaccount token")
		}
	}
}
