// Command felix-dev runs Felix locally on one machine: a real kube-apiserver
// and etcd (built by hack/build-envtest.sh) with the Felix CRDs installed.
// It prints how to point kubectl at it and runs until interrupted.
//
// It is the README's run command (`make dev`); the local-cluster work grows
// it into the whole product (operator plus broker processes).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"felix.dev/felix/internal/testenv"
)

func main() {
	stateDir := flag.String("state-dir", filepath.Join(testenv.RepoRoot(), ".felix-dev"), "directory for the kubeconfig and local state")
	flag.Parse()
	if err := run(*stateDir); err != nil {
		fmt.Fprintln(os.Stderr, "felix-dev:", err)
		os.Exit(1)
	}
}

func run(stateDir string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return err
	}
	env, err := testenv.StartEnv()
	if err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()
	kubeconfig := filepath.Join(stateDir, "kubeconfig")
	if err := testenv.WriteKubeconfig(env.Config, kubeconfig); err != nil {
		return err
	}
	fmt.Printf(`Felix local control plane is up: kube-apiserver %s with the Felix CRDs installed.

Point kubectl at it:

  export KUBECONFIG=%s

Then try:

  kubectl apply -f config/samples/
  kubectl get felixclusters,felixstreams
  kubectl get felixshards
  kubectl explain felixstream.spec

Press Ctrl-C to stop.
`, env.Config.Host, kubeconfig)
	<-ctx.Done()
	fmt.Println("\nstopping")
	return nil
}
